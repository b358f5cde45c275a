"""Simulation scenarios: deployment + vLLM settings + workload.

Sources: a scenario YAML file (data_specs/scenario.md), an inference-perf experiment
folder (synthetic from its profile, or an exact replay of its recorded requests), or a
BLIS TraceV2 header + data (replay).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from bayesblis.catalog.generation import GENERATION_CONFIG_MODES, defaults_known
from bayesblis.errors import InputError
from bayesblis.simulate.workload import (ARRIVALS, SHARED_PREFIX_KEYS, Workload, check_token_spec,
                                         generate, shared_prefix)

VLLM_KEYS = {
    "max_num_batched_tokens": int, "max_num_seqs": int, "max_model_len": int,
    "gpu_memory_utilization": float, "block_size": int, "enable_prefix_caching": bool,
    "enable_chunked_prefill": bool, "kv_blocks_total": int, "cpu_offload_blocks": int,
    "async_scheduling": bool, "generation_config": str, "cold_start_s": float,
}
VLLM_DEFAULTS = {"max_num_batched_tokens": 2048, "max_num_seqs": 256, "max_model_len": None,
                 "gpu_memory_utilization": 0.9, "block_size": 16, "enable_prefix_caching": True,
                 "enable_chunked_prefill": True, "kv_blocks_total": None,
                 "cpu_offload_blocks": 0, "async_scheduling": True, "generation_config": "auto",
                 "cold_start_s": 0.0}
TOP_KEYS = {"name", "model", "hardware", "tp", "ep", "dtype", "vllm", "workload"}
WORKLOAD_KEYS = {"seed", "arrival", "stages", "prompt_tokens", "output_tokens", "prefix",
                 "shared_prefix"}


@dataclass
class Scenario:
    """What to simulate: one deployment serving one workload.

    `vllm` holds the scheduler settings (keys of VLLM_KEYS; None = derive:
    `max_model_len` from the model, `kv_blocks_total` from the deployment memory model).
    `workload_spec` is the YAML `workload` mapping (synthetic) or None when `workload`
    was given directly (replay).
    """

    model: str
    hardware: str | None
    tp: int = 1
    ep: int = 1
    dtype: str = "auto"
    vllm: dict = field(default_factory=dict)
    workload_spec: dict | None = None
    workload: Workload | None = None
    name: str = "scenario"
    source: str | None = None
    notes: tuple = ()
    """Caveats the source itself raises (e.g. a setting it names but cannot be simulated)."""

    def __post_init__(self):
        merged = dict(VLLM_DEFAULTS)
        merged.update({k: v for k, v in (self.vllm or {}).items()})
        self.vllm = merged
        if self.workload is None and self.workload_spec is None:
            raise InputError(self.source, "no workload", field="workload",
                             expected="a workload mapping or replayed requests")

    # -- building blocks ---------------------------------------------------------------
    def deployment(self):
        """The `features.physics.Deployment` of this scenario."""
        from bayesblis.catalog.sampler_prices import sampler_path
        from bayesblis.features.physics import Deployment

        if not self.hardware:
            raise InputError(self.source, "no hardware given", field="hardware",
                             expected="a GPU catalog name (e.g. H100-SXM) or --hardware")
        return Deployment(self.model, self.hardware, tp=int(self.tp), ep=int(self.ep),
                          dtype=self.dtype, block_size=int(self.vllm["block_size"]),
                          sampler=sampler_path(self.sampling_defaults()))

    def engine_config(self, deployment=None):
        """`EngineConfig` with derived defaults filled in."""
        from bayesblis.simulate.engine import EngineConfig

        v = self.vllm
        mml = v["max_model_len"]
        kv = v["kv_blocks_total"]
        if mml is None or kv is None:
            deployment = deployment or self.deployment()
            if kv is None:
                kv = int(deployment.kv_cache_blocks(float(v["gpu_memory_utilization"])))
                if kv < 1:
                    raise InputError(self.source, "the model does not fit the GPU memory: "
                                     "no KV cache blocks left", field="vllm.kv_blocks_total",
                                     expected="a larger tp, gpu_memory_utilization or an explicit value")
        if mml is None:
            mml = _max_position_embeddings(self.model) or int(kv) * int(v["block_size"])
        if not v["enable_chunked_prefill"] and int(v["max_num_batched_tokens"]) < int(mml):
            # as vLLM: without chunking a whole prompt must fit one step's token budget
            raise InputError(self.source, f"max_num_batched_tokens {v['max_num_batched_tokens']} "
                             f"< max_model_len {mml} with chunked prefill disabled",
                             field="vllm.max_num_batched_tokens",
                             expected=f">= max_model_len ({mml}), or enable_chunked_prefill: true")
        return EngineConfig(max_num_batched_tokens=int(v["max_num_batched_tokens"]),
                            max_num_seqs=int(v["max_num_seqs"]), max_model_len=int(mml),
                            kv_blocks_total=int(kv), block_size=int(v["block_size"]),
                            enable_prefix_caching=bool(v["enable_prefix_caching"]),
                            enable_chunked_prefill=bool(v["enable_chunked_prefill"]),
                            cpu_offload_blocks=int(v["cpu_offload_blocks"]),
                            async_scheduling=bool(v["async_scheduling"]),
                            cold_start_s=float(v["cold_start_s"]))

    def build_workload(self, max_duration_s: float | None = None) -> Workload:
        """The request workload (generated from the spec, or the replayed one)."""
        if self.workload is not None:
            w = self.workload
        else:
            spec = self.workload_spec
            if spec.get("shared_prefix"):
                sp = spec["shared_prefix"]
                w = shared_prefix(spec["stages"], arrival=spec.get("arrival", "constant"),
                                  seed=int(spec.get("seed", 0)), **sp)
            else:
                w = generate(spec["stages"], spec["prompt_tokens"], spec["output_tokens"],
                             arrival=spec.get("arrival", "constant"), prefix=spec.get("prefix"),
                             seed=int(spec.get("seed", 0)))
        if max_duration_s is not None:
            w = w.truncate(float(max_duration_s))
        return w

    def sampling_defaults(self) -> dict:
        """The sampling fields vLLM applies to requests that set none (`catalog.generation`)."""
        from bayesblis.catalog.generation import applied_defaults

        return applied_defaults(self.model, self.vllm["generation_config"])

    def caveats(self, deployment=None, unseen_gpu: str | None = None) -> list[str]:
        """Warnings for a prediction of this scenario (`bayesblis.caveats`) served on
        `deployment` (None: the scenario's own, where it names the hardware) with draws of
        a GPU the posterior never saw (`unseen_gpu`), and the source's own `notes`."""
        from bayesblis import caveats

        if deployment is None and self.hardware:
            deployment = self.deployment()
        moe = caveats.fp8_moe(deployment) if deployment is not None else []
        vocab = deployment.model.vocab_size if deployment is not None else None
        known = self.vllm["generation_config"] != "auto" or defaults_known(self.model)
        return [*caveats.sampling(self.sampling_defaults(), vocab, known, deployment), *moe,
                *caveats.unseen_gpu(unseen_gpu), *self.notes]

    def with_hardware(self, hardware: str | None) -> "Scenario":
        return replace(self, hardware=hardware) if hardware else self

    def describe(self) -> dict:
        """Plain dict for result metadata."""
        return {"name": self.name, "source": self.source, "model": self.model,
                "hardware": self.hardware, "tp": self.tp, "ep": self.ep, "dtype": self.dtype,
                "vllm": dict(self.vllm),
                "workload": (self.workload_spec if self.workload_spec is not None
                             else {"replay": True, "n_requests": len(self.workload)})}

    # -- constructors ------------------------------------------------------------------
    @classmethod
    def from_yaml(cls, path) -> "Scenario":
        """Read a scenario YAML file (see data_specs/scenario.md)."""
        from bayesblis.io.text import load_yaml_checked

        path = Path(path)
        data = load_yaml_checked(path, expected="a scenario YAML (data_specs/scenario.md)")
        return cls.from_dict(data, source=path)

    @classmethod
    def from_dict(cls, data, *, source=None) -> "Scenario":
        """Validate a scenario mapping; errors name `source` and the field."""
        if not isinstance(data, dict):
            raise InputError(source, "not a mapping", expected="scenario keys (model, hardware, ...)")
        unknown = sorted(set(data) - TOP_KEYS)
        if unknown:
            raise InputError(source, f"unknown key(s) {unknown}", field=unknown[0],
                             expected=f"one of {sorted(TOP_KEYS)}")
        if not isinstance(data.get("model"), str) or not data["model"]:
            raise InputError(source, "missing or invalid", field="model",
                             expected="a config.json path or a catalog model name")
        model = data["model"]
        if source is not None and (model.endswith(".json") or "/" in model):
            cand = (Path(source).parent / model)
            if cand.exists():
                model = str(cand)
        hw = data.get("hardware")
        if hw is not None and not isinstance(hw, str):
            raise InputError(source, f"invalid value {hw!r}", field="hardware", expected="a GPU name")
        ints = {}
        for key, default in (("tp", 1), ("ep", 1)):
            v = data.get(key, default)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(source, f"invalid value {v!r}", field=key, expected="a positive integer")
            ints[key] = v
        dtype = data.get("dtype", "auto")
        if not isinstance(dtype, str):
            raise InputError(source, f"invalid value {dtype!r}", field="dtype", expected="a dtype name")
        vllm = _check_vllm(data.get("vllm") or {}, source)
        wl = _check_workload(data.get("workload"), source)
        return cls(model=model, hardware=hw, tp=ints["tp"], ep=ints["ep"], dtype=dtype,
                   vllm=vllm, workload_spec=wl, name=str(data.get("name") or
                                                        (Path(source).stem if source else "scenario")),
                   source=str(source) if source else None)

    @classmethod
    def from_inference_perf(cls, folder, hardware: str | None = None, replay: bool = False,
                            *, seed: int = 0) -> "Scenario":
        """Scenario of an inference-perf experiment folder.

        Settings from exp-config.yaml (+ kv_blocks_total_gpu / block_size of
        requests.json `config`); load from profile.yaml: its stages with inference-perf's
        load timer, its `shared_prefix` data as inference-perf sends it
        (`profile_shared_prefix`, `workload.PromptSet`). With `replay`, the recorded
        arrivals and token counts are used instead; requests with has_error are simulated (with the profile's prompt/output lengths
        when their recorded counts are 0) and excluded from latency metrics. Recorded
        prefix groups are empty in the published runs, so replayed requests are assigned
        to the profile's system-prompt groups at random (seeded).
        """
        folder = Path(folder)
        cfg_path, prof_path = folder / "exp-config.yaml", folder / "profile.yaml"
        for p in (cfg_path, prof_path):
            if not p.is_file():
                raise InputError(p, "file missing", expected="an inference-perf experiment folder")
        from bayesblis.io.inference_perf import read_profile
        from bayesblis.io.mapping_file import read_mapping

        exp = read_mapping(cfg_path, expected="exp-config keys")
        prof = read_profile(prof_path)
        model = exp.get("model") or (prof.get("server") or {}).get("model_name")
        if not model:
            raise InputError(cfg_path, "no model", field="model", expected="a model name")
        for key in ("load", "data"):
            if not isinstance(prof.get(key) or {}, dict):
                raise InputError(prof_path, f"invalid value {prof[key]!r}", field=key,
                                 expected="a mapping (data_specs/inference-perf.md)")
        load = prof.get("load") or {}
        stages = load.get("stages")
        if not isinstance(stages, list) or not stages:
            raise InputError(prof_path, "no load stages", field="load.stages",
                             expected="a list of {rate, duration}")
        for i, st in enumerate(stages):
            if not _valid_stage(st):
                raise InputError(prof_path, f"invalid stage {st!r}", record=f"stage {i}",
                                 field="load.stages", expected=STAGE_EXPECTED)
        load_type = load.get("type", "constant")
        if not isinstance(load_type, str) or load_type not in LOAD_TYPES:
            raise InputError(prof_path, f"unknown load type {load_type!r}", field="load.type",
                             expected=f"one of {list(LOAD_TYPES)} (inference-perf's load types)")
        arrival = LOAD_TYPES[load_type]
        mix = profile_request_mix(prof.get("data") or {}, prof_path)
        sp = ((prof.get("data") or {}).get("shared_prefix")) or {}
        groups = int(sp.get("num_unique_system_prompts", 1))   # replay's fallback groups
        sys_len, q_len, out_len = mix.pop("fallback_lengths")
        req_path = folder / "requests.json"
        meta_cfg = {}
        meta = None
        if req_path.is_file():
            from bayesblis.io.text import load_json_checked

            meta = load_json_checked(req_path, expected="an inference-perf requests.json object")
            meta_cfg = (meta if isinstance(meta, dict) else {}).get("config") or {}
        kv_total = meta_cfg.get("kv_blocks_total_gpu") or exp.get("kv_blocks_total_gpu")
        vllm = {
            "max_num_batched_tokens": int(exp.get("max_num_batched_tokens", 2048)),
            "max_num_seqs": int(exp.get("max_num_seqs", 256)),
            "max_model_len": int(exp["max_model_len"]) if exp.get("max_model_len") else None,
            "block_size": int(meta_cfg.get("block_size") or exp.get("block_size") or 16),
            "kv_blocks_total": int(kv_total) if kv_total else None,
        }
        if "gpu_memory_utilization" in exp:
            vllm["gpu_memory_utilization"] = float(exp["gpu_memory_utilization"])
        for flag in ("enable_prefix_caching", "async_scheduling"):
            if flag in exp:
                vllm[flag] = bool(exp[flag])
        tp = int(exp.get("tensor_parallelism", exp.get("tensor_parallel_size", 1)))
        notes = ((f"{cfg_path.name} sets cpu_offload: true without saying what is offloaded "
                  "(KV cache or weights) or how much; simulated without CPU offload "
                  "(a scenario's vllm.cpu_offload_blocks sets a KV offload)",)
                 if exp.get("cpu_offload") is True else ())
        common = dict(model=str(model), hardware=hardware, tp=tp, ep=1, dtype="auto", vllm=vllm,
                      name=folder.name, source=str(folder), notes=notes)
        if not replay:
            spec = {"seed": int(seed), "arrival": arrival,
                    "stages": [{"rate": float(s["rate"]), "duration": float(s["duration"])}
                               for s in stages], **mix}
            return cls(workload_spec=spec, **common)
        if meta is None:
            raise InputError(req_path, "file missing", expected="requests.json for --replay")
        w = _replay_inference_perf(folder, meta, stages, groups, sys_len, q_len, out_len, seed)
        return cls(workload=w, **common)

    @classmethod
    def from_trace_v2(cls, header, data, hardware: str | None = None) -> "Scenario":
        """Replay a BLIS TraceV2 trace (header YAML + data CSV)."""
        from bayesblis.io.tracev2 import read_trace_v2

        tr = read_trace_v2(header, data)
        return _scenario_from_trace_v2(tr, header, hardware)


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------

STAGE_EXPECTED = "{rate: finite >= 0 req/s, duration: finite > 0 s}"


def _valid_stage(st) -> bool:
    """A load stage: a mapping whose `rate` (>= 0) and `duration` (> 0) are finite numbers."""
    return isinstance(st, dict) and all(
        isinstance(st.get(k), (int, float)) and not isinstance(st.get(k), bool)
        and math.isfinite(st[k]) for k in ("rate", "duration")) \
        and st["rate"] >= 0 and st["duration"] > 0


LOAD_TYPES = {"constant": "normalized_exponential", "poisson": "poisson_per_second"}
"""inference-perf load types (its `LoadType`; `constant` when absent) and the arrival process
each generates (`simulate.workload`)."""

SHARED_PREFIX_MINIMA = {"num_groups": 1, "prompts_per_group": 1, "system_prompt_len": 0,
                        "question_len": 1, "output_len": 1}
"""Smallest value of each `shared_prefix` length or count a profile may give."""

GENERATED_DATA_TYPES = ("shared_prefix", "random", "synthetic")
"""inference-perf data types a profile alone describes (others need their dataset: replay)."""


def profile_request_mix(data: dict, path) -> dict:
    """The request mix of an inference-perf profile's `data` as workload-spec keys
    (`shared_prefix`, or `prompt_tokens` + `output_tokens` for random/synthetic data: a
    normal clipped to [min, max] from `input_distribution`/`output_distribution`), plus
    `fallback_lengths` (system prompt, question, output) that replay uses for requests
    recorded without counts."""
    kind = data.get("type", "shared_prefix")
    if kind == "shared_prefix":
        try:
            shared = profile_shared_prefix(data.get("shared_prefix") or {})
        except (KeyError, TypeError, ValueError, AttributeError):
            raise InputError(path, "shared_prefix data lacks question_len/output_len",
                             field="data.shared_prefix",
                             expected="system_prompt_len, question_len, output_len") from None
        for key, low in SHARED_PREFIX_MINIMA.items():
            if shared[key] < low:
                name = "num_prompts_per_group" if key == "prompts_per_group" else key
                raise InputError(path, f"invalid value {shared[key]!r}",
                                 field=f"data.shared_prefix.{name}", expected=f"an integer >= {low}")
        return {"shared_prefix": shared, "fallback_lengths": tuple(
            shared[k] for k in ("system_prompt_len", "question_len", "output_len"))}
    if kind in ("random", "synthetic"):
        specs = {}
        for key, name in (("input_distribution", "prompt_tokens"),
                          ("output_distribution", "output_tokens")):
            d = data.get(key)
            try:
                specs[name] = {"dist": "normal", "mean": float(d["mean"]),
                               "std": float(d["std_dev"]), "min": int(d["min"]),
                               "max": int(d["max"])}
            except (KeyError, TypeError, ValueError):
                raise InputError(path, f"{kind} data without a usable {key}",
                                 field=f"data.{key}", expected="{min, max, mean, std_dev}") from None
        return {**specs, "fallback_lengths": (0, int(specs["prompt_tokens"]["mean"]),
                                              int(specs["output_tokens"]["mean"]))}
    raise InputError(path, f"data type {kind!r} cannot be generated from the profile alone",
                     field="data.type",
                     expected=f"one of {list(GENERATED_DATA_TYPES)} (or --replay of the recorded "
                              "requests)")


def profile_shared_prefix(sp: dict) -> dict:
    """The `shared_prefix` workload spec of an inference-perf profile's `data.shared_prefix`.

    inference-perf reads `num_groups` and `num_prompts_per_group`; the profiles of the
    shared runs name them `num_unique_system_prompts` and `num_users_per_system_prompt`,
    which inference-perf releases before those aliases existed ignored, sending the default
    10 x 10 = 100 prompts: every shared run cycles exactly 100 prompts (9 x 5, 11 x 4 or
    23 x 1 by the long names). So the long names are ignored here too
    (`data_specs/scenario.md`); give `num_groups`/`num_prompts_per_group`, or a scenario
    YAML, for a release that honours them."""
    from bayesblis.simulate.workload import DEFAULT_GROUPS, DEFAULT_PROMPTS_PER_GROUP

    return {"num_groups": int(sp.get("num_groups", DEFAULT_GROUPS)),
            "prompts_per_group": int(sp.get("num_prompts_per_group", DEFAULT_PROMPTS_PER_GROUP)),
            "system_prompt_len": int(sp.get("system_prompt_len", 0)),
            "question_len": int(sp["question_len"]), "output_len": int(sp["output_len"]),
            "multi_turn": bool(sp.get("enable_multi_turn_chat", False))}


def _max_position_embeddings(model: str) -> int | None:
    """`max_position_embeddings` of a config.json path (file or folder), else None."""
    p = Path(model)
    p = p / "config.json" if p.is_dir() else p
    if p.suffix != ".json" or not p.is_file():
        return None
    try:
        cfg = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # unreadable, undecodable or not JSON: load_model reports it
        return None
    cfg = cfg.get("text_config", cfg) if isinstance(cfg, dict) else {}
    v = cfg.get("max_position_embeddings") if isinstance(cfg, dict) else None
    return int(v) if isinstance(v, int) and v > 0 else None


def _check_vllm(v, source) -> dict:
    if not isinstance(v, dict):
        raise InputError(source, "not a mapping", field="vllm", expected="vLLM settings")
    out = {}
    for key, value in v.items():
        if key not in VLLM_KEYS:
            raise InputError(source, f"unknown vLLM setting {key!r}", field=f"vllm.{key}",
                             expected=f"one of {sorted(VLLM_KEYS)}")
        typ = VLLM_KEYS[key]
        if value is None and key in ("max_model_len", "kv_blocks_total"):
            out[key] = None
            continue
        if key == "generation_config":
            if value not in GENERATION_CONFIG_MODES:
                raise InputError(source, f"invalid value {value!r}", field=f"vllm.{key}",
                                 expected=" or ".join(GENERATION_CONFIG_MODES))
        elif key == "cold_start_s":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    0 <= value < float("inf")):
                raise InputError(source, f"invalid value {value!r}", field=f"vllm.{key}",
                                 expected="seconds >= 0 (a fresh server's start-up stall)")
            value = float(value)
        elif typ is bool:
            if not isinstance(value, bool):
                raise InputError(source, f"invalid value {value!r}", field=f"vllm.{key}",
                                 expected="true or false")
        elif typ is int:
            if isinstance(value, bool) or not isinstance(value, int) or value < (
                    0 if key == "cpu_offload_blocks" else 1):
                raise InputError(source, f"invalid value {value!r}", field=f"vllm.{key}",
                                 expected="a positive integer" if key != "cpu_offload_blocks"
                                 else "an integer >= 0")
        else:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise InputError(source, f"invalid value {value!r}", field=f"vllm.{key}",
                                 expected="a number in (0, 1]")
            value = float(value)
        out[key] = value
    return out


def _check_workload(w, source) -> dict:
    if not isinstance(w, dict):
        raise InputError(source, "missing or not a mapping", field="workload",
                         expected="{stages, prompt_tokens, output_tokens, ...}")
    unknown = sorted(set(w) - WORKLOAD_KEYS)
    if unknown:
        raise InputError(source, f"unknown key(s) {unknown}", field=f"workload.{unknown[0]}",
                         expected=f"one of {sorted(WORKLOAD_KEYS)}")
    stages = w.get("stages")
    if not isinstance(stages, list) or not stages:
        raise InputError(source, "missing or empty", field="workload.stages",
                         expected="a list of {rate, duration}")
    for i, st in enumerate(stages):
        if not (_valid_stage(st) and set(st) <= {"rate", "duration"}):
            raise InputError(source, f"invalid stage {st!r}", record=f"stage {i}",
                             field="workload.stages", expected=STAGE_EXPECTED)
    arrival = w.get("arrival", "constant")
    if arrival not in ARRIVALS:
        raise InputError(source, f"invalid value {arrival!r}", field="workload.arrival",
                         expected=f"one of {list(ARRIVALS)}")
    if w.get("shared_prefix") is not None:
        _check_shared_prefix(w, source)
        return dict(w)
    for key in ("prompt_tokens", "output_tokens"):
        if key not in w:
            raise InputError(source, "missing", field=f"workload.{key}",
                             expected="an int or a distribution mapping")
        check_token_spec(w[key], source, f"workload.{key}")
    seed = w.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InputError(source, f"invalid value {seed!r}", field="workload.seed", expected="an integer")
    prefix = w.get("prefix")
    if prefix is not None:
        if not isinstance(prefix, dict) or set(prefix) - {"num_groups", "system_prompt_len"}:
            raise InputError(source, f"invalid value {prefix!r}", field="workload.prefix",
                             expected="{num_groups: int, system_prompt_len: int | distribution}")
        g = prefix.get("num_groups", 1)
        if isinstance(g, bool) or not isinstance(g, int) or g < 1:
            raise InputError(source, f"invalid value {g!r}", field="workload.prefix.num_groups",
                             expected="a positive integer")
        check_token_spec(prefix.get("system_prompt_len", 0), source, "workload.prefix.system_prompt_len",
                         minimum=0)
    return dict(w)


def _check_shared_prefix(w: dict, source) -> None:
    """Validate `workload.shared_prefix` (inference-perf's prompt set; no token specs)."""
    sp = w["shared_prefix"]
    both = sorted({"prompt_tokens", "output_tokens", "prefix"} & set(w))
    if both:
        raise InputError(source, f"{both[0]} given with shared_prefix", field=f"workload.{both[0]}",
                         expected="either shared_prefix or prompt_tokens/output_tokens/prefix")
    if not isinstance(sp, dict):
        raise InputError(source, "not a mapping", field="workload.shared_prefix",
                         expected=f"keys of {sorted(SHARED_PREFIX_KEYS)}")
    unknown = sorted(set(sp) - SHARED_PREFIX_KEYS)
    if unknown:
        raise InputError(source, f"unknown key(s) {unknown}", field=f"workload.shared_prefix.{unknown[0]}",
                         expected=f"one of {sorted(SHARED_PREFIX_KEYS)}")
    for key, low in (("num_groups", 1), ("prompts_per_group", 1), ("system_prompt_len", 0),
                     ("question_len", 0), ("output_len", 1), ("output_extra_tokens", 0)):
        v = sp.get(key, low)
        if key in ("question_len", "output_len") and key not in sp:
            raise InputError(source, "missing", field=f"workload.shared_prefix.{key}",
                             expected="an integer token count")
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise InputError(source, f"invalid value {v!r}", field=f"workload.shared_prefix.{key}",
                             expected=f"an integer >= {low}")
    inflation = sp.get("token_inflation", 1.0)
    if isinstance(inflation, bool) or not isinstance(inflation, (int, float)) or not 0.5 <= inflation <= 2:
        raise InputError(source, f"invalid value {inflation!r}",
                         field="workload.shared_prefix.token_inflation", expected="a number in [0.5, 2]")
    if not isinstance(sp.get("multi_turn", False), bool):
        raise InputError(source, f"invalid value {sp['multi_turn']!r}",
                         field="workload.shared_prefix.multi_turn", expected="true or false")
    if int(sp.get("system_prompt_len", 0)) + int(sp["question_len"]) < 1:
        raise InputError(source, "empty prompts", field="workload.shared_prefix.question_len",
                         expected="system_prompt_len + question_len >= 1")


def _replay_inference_perf(folder, meta, stages, groups, sys_len, q_len, out_len, seed) -> Workload:
    """Recorded requests of an inference-perf run as a Workload."""
    try:
        from bayesblis.io.inference_perf import correct_output_counts, read_inference_perf
        req = correct_output_counts(read_inference_perf(folder).requests)
        req = req.sort_values("arrival_s", kind="stable")
        arrival = req["arrival_s"].to_numpy(float)
        prompt = req["prompt_tokens"].to_numpy(np.int64)
        output = req["output_tokens"].to_numpy(np.int64)
        err = req["has_error"].to_numpy(bool)
        pgroup = req["prefix_group"].astype(str).to_numpy()
        prompt_id = _repeated_prompt_ids(req)
    except ImportError:
        raw = meta.get("requests") or []
        if not raw:
            raise InputError(Path(folder) / "requests.json", "no requests", field="requests")
        raw = sorted(raw, key=lambda r: r["arrival_time_us"])
        arrival = np.array([r["arrival_time_us"] for r in raw], float) / 1e6
        prompt = np.array([r["input_tokens"] for r in raw], np.int64)
        output = np.array([r["output_tokens"] for r in raw], np.int64)
        err = np.array([bool(r.get("has_error")) for r in raw])
        pgroup = np.array([str(r.get("prefix_group") or "") for r in raw])
        prompt_id = None
    prompt = np.where(prompt < 1, sys_len + q_len, prompt)
    output = np.where(output < 1, max(out_len, 1), output)
    rng = np.random.default_rng(seed)
    if prompt_id is not None:
        # the run cycles through a fixed prompt set (io/prompt_reuse.py): each prompt is a
        # prefix group of its own, cached whole once computed (evictable under KV pressure)
        group, ptok = prompt_id, prompt.copy()
    else:
        if np.all(pgroup == ""):
            group = rng.integers(0, max(groups, 1), size=len(arrival)).astype(np.int64)
        else:
            _, group = np.unique(pgroup, return_inverse=True)
            group = group.astype(np.int64)
            group[pgroup == ""] = -1
        ptok = np.where(group >= 0, sys_len, 0)
    bounds, start = [], 0.0
    for st in stages:
        bounds.append((start, start + float(st["duration"])))
        start += float(st["duration"])
    ends = np.array([b[1] for b in bounds])
    stage = np.minimum(np.searchsorted(ends, arrival, side="right"), len(bounds) - 1)
    return Workload(arrival, prompt, output, group, ptok, stage, err, bounds)


def _repeated_prompt_ids(requests) -> np.ndarray | None:
    """Prompt ids (send position mod the cycle) of a request table when the run cycles
    through a fixed prompt set (io/prompt_reuse.py), else None."""
    from bayesblis.io.prompt_reuse import repeated_prompts

    prompt_id, _ = repeated_prompts(requests)
    return prompt_id.astype(np.int64) if (prompt_id >= 0).any() else None


def _scenario_from_trace_v2(tr, header, hardware) -> Scenario:
    """Build a replay Scenario from a read `TraceV2` (header `server` block + rows).

    Arrivals: `arrival_time_s` shifted to start at 0; prompt: `io.tracev2.prompt_tokens`;
    `output_tokens` (0 -> 1); prefix groups from `prefix_group` with `prefix_length` tokens;
    rows with a status other than 'ok' are simulated but excluded from metrics.
    """
    from bayesblis.io.tracev2 import prompt_tokens

    req = tr.requests.sort_values("arrival_time_s", kind="stable")
    arrival = req["arrival_time_s"].to_numpy(float)
    arrival = arrival - arrival.min()
    pg = req["prefix_group"].astype(str).to_numpy()
    ptok = req["prefix_length"].to_numpy(np.int64)
    prompt = np.maximum(prompt_tokens(req), 1)
    output = np.maximum(req["output_tokens"].to_numpy(np.int64), 1)
    _, group = np.unique(pg, return_inverse=True)
    group = group.astype(np.int64)
    group[pg == ""] = -1
    if (group >= 0).any():   # renumber the groups that exist from 0
        _, group_new = np.unique(group[group >= 0], return_inverse=True)
        group[group >= 0] = group_new
    err = (req["status"].astype(str) != "ok").to_numpy()
    w = Workload(arrival, prompt, output, group, ptok, None, err,
                 [(0.0, float(arrival.max()) + 1e-9)])
    model, tp, vllm = _trace_v2_deployment(tr.header, header,
                                           next((m for m in req.get("model", []) if m), None))
    return Scenario(model=model, hardware=hardware, tp=tp, ep=1, dtype="auto",
                    vllm=vllm, workload=w, name=Path(header).stem, source=str(header))


def _trace_v2_deployment(header_doc: dict, header, row_model=None) -> tuple[str, int, dict]:
    """(model, tp, vLLM settings) of a TraceV2 header's `server` block."""
    server = header_doc.get("server") or {}
    model = server.get("model") or row_model
    if not model:
        raise InputError(header, "no model named", field="server.model",
                         expected="the served model (catalog name or config.json path)")
    vllm = {}
    for src, dst in (("max_num_seqs", "max_num_seqs"), ("block_size", "block_size"),
                     ("gpu_memory_utilization", "gpu_memory_utilization"),
                     ("max_model_len", "max_model_len"),
                     ("max_num_batched_tokens", "max_num_batched_tokens"),
                     ("kv_blocks_total_gpu", "kv_blocks_total")):
        if server.get(src) is not None:
            vllm[dst] = server[src]
    vllm = _check_vllm(vllm, header)
    return str(model), int(server.get("tensor_parallel") or 1), vllm


def _scenario_from_blis_workload_spec(header: Path, hardware, seed: int) -> Scenario:
    """A generated Scenario of a TraceV2 header without data: the BLIS workload spec its
    `workload_spec` names (a YAML path relative to the header), in BLIS's compact
    `inference_perf` form, generated as BLIS's own load generator sends it: Poisson
    arrivals per stage, each request from one of `num_unique_system_prompts` groups
    (uniformly) with that group's `system_prompt_len`-token prefix and a fresh
    `question_len`-token question, `output_len` output tokens."""
    from bayesblis.io.text import load_yaml_checked

    doc = load_yaml_checked(header, expected="a TraceV2 header")
    ref = str(doc.get("workload_spec") or "")
    expected = "a data CSV beside the header, or a workload_spec naming a BLIS workload YAML"
    if not ref or ref.startswith("preset:"):
        raise InputError(header, "no TraceV2 data CSV beside the header, and "
                         + (f"workload_spec {ref!r} is a BLIS preset" if ref else "no workload_spec"),
                         field="workload_spec", expected=expected)
    spec_path = (header.parent / ref) if not Path(ref).is_absolute() else Path(ref)
    if not spec_path.is_file():
        raise InputError(header, f"workload_spec {ref!r} not found at {spec_path}",
                         field="workload_spec", expected=expected)
    spec = load_yaml_checked(spec_path, expected="a BLIS workload spec YAML")
    ip = spec.get("inference_perf") if isinstance(spec, dict) else None
    if not isinstance(ip, dict):
        raise InputError(spec_path, "no inference_perf block", field="inference_perf",
                         expected="BLIS's compact inference_perf form (stages, shared_prefix)")
    sp = ip.get("shared_prefix") or {}
    try:
        stages = [{"rate": float(st["rate"]), "duration": float(st["duration"])}
                  for st in ip["stages"]]
        workload = {"seed": int(spec.get("seed", doc.get("workload_seed", seed)) or 0),
                    "arrival": "poisson", "stages": stages,
                    "prompt_tokens": int(sp["question_len"]), "output_tokens": int(sp["output_len"]),
                    "prefix": {"num_groups": int(sp["num_unique_system_prompts"]),
                               "system_prompt_len": int(sp.get("system_prompt_len", 0))}}
    except (KeyError, TypeError, ValueError):
        raise InputError(spec_path, "incomplete inference_perf block", field="inference_perf",
                         expected="stages [{rate, duration}] and shared_prefix {num_unique_system_"
                                  "prompts, question_len, output_len, system_prompt_len}") from None
    model, tp, vllm = _trace_v2_deployment(doc, header)
    return Scenario(model=model, hardware=hardware, tp=tp, ep=1, dtype="auto", vllm=vllm,
                    workload_spec=_check_workload(workload, spec_path), name=header.stem,
                    source=str(header))


def load_scenario(path, *, hardware: str | None = None, replay: bool = False,
                  seed: int = 0) -> Scenario:
    """Scenario from a YAML file, an inference-perf folder or a TraceV2 header (.yaml
    with a sibling data CSV named in it or `<stem>.csv`: replayed; without one, the BLIS
    workload spec its `workload_spec` names is generated)."""
    path = Path(path)
    if path.is_dir():
        return Scenario.from_inference_perf(path, hardware, replay=replay, seed=seed)
    if not path.exists():
        raise InputError(path, "not found", expected="a scenario YAML, an inference-perf folder "
                         "or a TraceV2 header")
    if _is_trace_v2_header(path):
        try:
            data = _trace_v2_data_path(path)
        except InputError:   # nothing recorded to replay: the workload spec it names
            return _scenario_from_blis_workload_spec(path, hardware, seed)
        return Scenario.from_trace_v2(path, data, hardware)
    return Scenario.from_yaml(path).with_hardware(hardware)


def _is_trace_v2_header(path: Path) -> bool:
    import yaml

    try:
        d = yaml.safe_load(path.read_text(encoding="utf-8"))
    except Exception:  # noqa: BLE001 - not YAML: let from_yaml report it
        return False
    return isinstance(d, dict) and "trace_version" in d


def _trace_v2_data_path(header: Path) -> Path:
    for cand in (header.with_suffix(".csv"), header.with_name(header.stem.replace("header", "data") + ".csv"),
                 header.parent / "data.csv", header.parent / "trace_data.csv"):
        if cand.exists() and cand != header:
            return cand
    raise InputError(header, "no TraceV2 data CSV beside the header",
                     expected=f"{header.with_suffix('.csv').name} or data.csv in {header.parent}")
