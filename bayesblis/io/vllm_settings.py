"""vLLM server settings that change step latency or scheduling (`VllmSettings`).

Defaults are the vLLM V1 engine's (v0.8+, checked against v0.15):

- `max_num_seqs` 256 and `max_num_batched_tokens` 2048 (V1 default for online serving
  on a GPU with chunked prefill on, the V1 default; 8192 is the V1 default for
  `LLM` offline use, which we do not model);
- `block_size` 16 tokens, `gpu_memory_utilization` 0.9, `enable_prefix_caching` and
  `enable_chunked_prefill` on, no CPU offload, `dtype` 'auto';
- `async_scheduling` on: the scheduler works one step ahead, so a request that arrives
  while the engine is busy waits one more step for its prefill (simulate/engine.py). The
  16 shared v0.15.1 runs show it (TTFT 2.6-3.1 decode steps); pass
  `--no-async-scheduling` for servers that run without it;
- `max_model_len` None means "the model's own `max_position_embeddings`";
- `kv_blocks_total_gpu` None means "computed by vLLM at start-up" (from
  `--num-gpu-blocks-override` when given, else memory profiling);
- `generation_config` 'auto': requests that set no sampling fields take the model's
  `generation_config.json` defaults (vLLM's default since 0.9; 'vllm': vLLM's own), which
  decide the sampler a step runs (`catalog.sampler_prices`).
"""

from __future__ import annotations

import dataclasses
import math
import shlex
from dataclasses import dataclass, fields
from pathlib import Path

from bayesblis.catalog.generation import GENERATION_CONFIG_MODES
from bayesblis.errors import InputError

V1_DEFAULT_MAX_NUM_SEQS = 256
V1_DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048


@dataclass(frozen=True)
class VllmSettings:
    """Serving settings of one vLLM deployment (vLLM V1 defaults, see module doc)."""

    model: str | None = None
    tp: int = 1
    ep: int = 1
    max_num_batched_tokens: int = V1_DEFAULT_MAX_NUM_BATCHED_TOKENS
    max_num_seqs: int = V1_DEFAULT_MAX_NUM_SEQS
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.9
    block_size: int = 16
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    async_scheduling: bool = True
    kv_offloading_size_gb: float = 0.0
    dtype: str = "auto"
    kv_blocks_total_gpu: int | None = None
    generation_config: str = "auto"

    def __post_init__(self):
        for name in ("tp", "ep", "max_num_batched_tokens", "max_num_seqs", "block_size"):
            _check_positive_int(self, name, getattr(self, name))
        for name in ("max_model_len", "kv_blocks_total_gpu"):
            value = getattr(self, name)
            if value is not None:
                _check_positive_int(self, name, value)
        g = self.gpu_memory_utilization
        if not _is_number(g) or not 0 < float(g) <= 1:
            raise InputError(None, f"invalid value {g!r}", field="gpu_memory_utilization",
                             expected="a number in (0, 1]")
        if not _is_number(self.kv_offloading_size_gb) or not 0 <= self.kv_offloading_size_gb < math.inf:
            raise InputError(None, f"invalid value {self.kv_offloading_size_gb!r}",
                             field="kv_offloading_size_gb", expected="a number >= 0 (GiB)")
        for name in ("model", "dtype"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise InputError(None, f"invalid value {value!r}", field=name, expected="a string")
        if self.generation_config not in GENERATION_CONFIG_MODES:
            raise InputError(None, f"invalid value {self.generation_config!r}", field="generation_config",
                             expected=" or ".join(GENERATION_CONFIG_MODES))
        for name in ("enable_prefix_caching", "enable_chunked_prefill", "async_scheduling"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(None, f"invalid value {getattr(self, name)!r}", field=name,
                                 expected="true or false")

    # -- conversions -----------------------------------------------------------------
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict, *, source=None) -> "VllmSettings":
        """Build from `to_dict()` output; unknown keys are an error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InputError(source, f"unknown vLLM setting(s) {unknown}", field=unknown[0],
                             expected=f"one of {sorted(known)}")
        return cls(**data)

    @classmethod
    def from_exp_config(cls, path, **overrides) -> "VllmSettings":
        """Read an inference-perf `exp-config.yaml` (keys: model, tensor_parallelism,
        max_model_len, max_num_batched_tokens, max_num_seqs; others ignored)."""
        from bayesblis.io.mapping_file import read_mapping

        path = Path(path)
        data = read_mapping(path, expected="exp-config.yaml keys")
        mapping = {
            "model": "model", "tensor_parallelism": "tp", "tensor_parallel_size": "tp",
            "expert_parallelism": "ep", "max_model_len": "max_model_len",
            "max_num_batched_tokens": "max_num_batched_tokens", "max_num_seqs": "max_num_seqs",
            "gpu_memory_utilization": "gpu_memory_utilization", "block_size": "block_size",
            "enable_prefix_caching": "enable_prefix_caching",
            "enable_chunked_prefill": "enable_chunked_prefill", "dtype": "dtype",
            "async_scheduling": "async_scheduling", "generation_config": "generation_config",
        }
        kwargs = {mapping[k]: v for k, v in data.items() if k in mapping}
        kwargs.update(overrides)
        try:
            return cls(**kwargs)
        except InputError as exc:
            raise exc.at(path) from None

    @classmethod
    def from_cli_args(cls, args) -> "VllmSettings":
        """Parse a `vllm serve MODEL --flag value ...` command (string or argv list).

        Accepts `--a-b` and `--a_b`, `--flag=value`, `-tp N`, and `--no-<flag>` for
        booleans. Flags that do not affect latency are ignored.
        """
        if not isinstance(args, (str, list, tuple)):
            raise InputError(None, f"invalid value {args!r}", field="vllm_args",
                             expected="a `vllm serve MODEL --flag value ...` command (a string or a list)")
        try:
            argv = shlex.split(args) if isinstance(args, str) else [str(a) for a in args]
        except ValueError as exc:  # e.g. an unclosed quote
            raise InputError(None, f"cannot split the command: {exc}", field="vllm_args",
                             expected="a shell-quoted `vllm serve ...` command") from None
        if argv[:2] == ["vllm", "serve"]:
            argv = argv[2:]
        elif argv[:1] == ["serve"]:
            argv = argv[1:]
        kwargs: dict = {}
        valued = {
            "model": ("model", str), "tensor-parallel-size": ("tp", int), "tp": ("tp", int),
            "max-num-batched-tokens": ("max_num_batched_tokens", int),
            "max-num-seqs": ("max_num_seqs", int), "max-model-len": ("max_model_len", int),
            "gpu-memory-utilization": ("gpu_memory_utilization", float),
            "block-size": ("block_size", int), "kv-offloading-size": ("kv_offloading_size_gb", float),
            "cpu-offload-gb": ("weight_offload_gb", float), "dtype": ("dtype", str),
            "num-gpu-blocks-override": ("kv_blocks_total_gpu", int),
            "generation-config": ("generation_config", str),
            "data-parallel-size": (None, int),
        }
        flags = {"enable-prefix-caching": "enable_prefix_caching",
                 "enable-chunked-prefill": "enable_chunked_prefill",
                 "async-scheduling": "async_scheduling"}
        expert_parallel = False
        i = 0
        while i < len(argv):
            tok = argv[i]
            if not tok.startswith("-"):
                if "model" in kwargs:
                    raise InputError(None, f"unexpected positional argument {tok!r}",
                                     field="argv", expected="one model name")
                kwargs["model"] = tok
                i += 1
                continue
            name, eq, inline = tok.lstrip("-").partition("=")
            name = name.replace("_", "-")
            if name in ("enable-expert-parallel", "ep"):
                expert_parallel = True
            elif name in flags:
                kwargs[flags[name]] = _parse_bool(inline) if eq else True
            elif name.startswith("no-") and name[3:] in flags:
                kwargs[flags[name[3:]]] = False
            elif name in valued:
                if eq:
                    value = inline
                else:
                    if i + 1 >= len(argv):
                        raise InputError(None, f"flag {tok} has no value", field=name,
                                         expected="a value after the flag")
                    i += 1
                    value = argv[i]
                key, conv = valued[name]
                try:
                    converted = conv(value)
                except ValueError:
                    raise InputError(None, f"cannot parse {value!r}", field=name,
                                     expected=conv.__name__) from None
                if key == "weight_offload_gb":
                    if converted:
                        raise InputError(None, f"--{name} {value} offloads model weights to the CPU "
                                         "(vLLM streams them back to the GPU every step), which "
                                         "bayesblis does not model", field=name,
                                         expected="0, or --kv-offloading-size for the KV cache")
                elif key is not None:
                    kwargs[key] = converted
            else:
                # Unknown flag: skip its value if the next token is not a flag.
                if not eq and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                    i += 1
            i += 1
        if expert_parallel:
            # vLLM's EP reuses the TP x DP group: EP size = TP size (DP 1).
            kwargs["ep"] = kwargs.get("tp", 1)
        return cls(**kwargs)


def _parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise InputError(None, f"cannot parse {text!r} as a boolean", expected="true/false")


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_positive_int(obj, name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(None, f"invalid value {value!r}", field=name, expected="a positive integer")
