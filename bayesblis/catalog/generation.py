"""A model's sampling defaults as vLLM applies them.

vLLM's default `--generation-config auto` reads the model's `generation_config.json` and
applies its sampling fields to every request that sets none of its own (vLLM pull request
12622; inference-perf's completion requests set none). It keeps only `VLLM_FIELDS` and,
through transformers' `to_diff_dict`, drops the values equal to transformers' own defaults
(`TRANSFORMERS_DEFAULTS`: an explicit top-k of 50 is no default at all).

Top-k or top-p makes vLLM sort the whole vocabulary every step: `sampler_for` names the
sampler path a deployment's requests take, which `catalog.sampler_prices` prices. A
repetition penalty puts further work on every step that is not priced (vLLM 0.15: each step
waits for the previous step's tokens, rebuilds the output-token tensor on the CPU and counts
tokens over two batch x vocabulary tensors); `bayesblis.caveats.sampling` says so where it
applies, and where a large vocabulary's defaults are not known.

Sources: `generation_config.json` beside a model's config.json, else ``KNOWN`` (the
published files of catalog models, verified copies only), by model id; a catalog short name
stands for its entry's `hf_id`.
"""

from __future__ import annotations

import json
from pathlib import Path

from bayesblis.errors import InputError

FILE_NAME = "generation_config.json"
GENERATION_CONFIG_MODES = ("auto", "vllm")
"""vLLM's `--generation-config` values modelled: the model's defaults, or vLLM's own."""
VLLM_FIELDS = ("repetition_penalty", "temperature", "top_k", "top_p", "min_p", "max_new_tokens")
"""The fields vLLM 0.15 takes from a generation_config.json (`ModelConfig.get_diff_sampling_param`)."""
TRANSFORMERS_DEFAULTS = {"repetition_penalty": 1.0, "temperature": 1.0, "top_k": 50, "top_p": 1.0}
"""transformers' GenerationConfig defaults: a field equal to one is not applied."""
KNOWN = {
    "qwen/qwen2.5-7b-instruct": {"repetition_penalty": 1.05, "temperature": 0.7, "top_p": 0.8, "top_k": 20},
    "meta-llama/llama-3.1-8b-instruct": {"temperature": 0.6, "top_p": 0.9},
    "meta-llama/llama-2-7b-hf": {"temperature": 0.6, "top_p": 0.9},
    "qwen/qwen3-14b": {"temperature": 0.6, "top_k": 20, "top_p": 0.95},
}
"""Published generation_config.json sampling fields of catalog models (Hugging Face, by
model id, lower case), from copies whose bytes match the hashes recorded for the Hub file
(Llama-2-7b-hf: SHA-256 11e70f5f...; its earlier revisions set temperature 0.9 and top-p
0.6, a top-p all the same: the traced Llama-2-7B runs sampled with top-p over 32k tokens).
Qwen3-14B's is the one exception, taken from its family: Qwen3-0.6B, -8B and -32B publish
byte-identical files with these fields, and Qwen3-14B's model cards recommend the same (not
a verified copy of its own file). A model id not here, with no file beside its config, has
none known."""


def read_generation_config(path) -> dict:
    """The sampling fields vLLM applies from a generation_config.json (`VLLM_FIELDS`, those
    that differ from transformers' defaults); errors name the file and the field."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, f"cannot read: {exc}", expected="a generation_config.json") from None
    except json.JSONDecodeError as exc:
        raise InputError(path, f"not JSON ({exc.msg}, line {exc.lineno})",
                         expected="a generation_config.json") from None
    if not isinstance(data, dict):
        raise InputError(path, "not a JSON object", expected="a generation_config.json")
    out = {}
    for key in VLLM_FIELDS:
        value = data.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise InputError(path, f"invalid value {value!r}", field=key, expected="a number >= 0")
        if TRANSFORMERS_DEFAULTS.get(key) != value:
            out[key] = value
    return out


def sampling_defaults(model: str) -> dict:
    """What vLLM's `--generation-config auto` applies for `model` (a config.json path, a
    folder holding one, or a model id): the file beside the config, else `KNOWN`, else {}."""
    folder = _config_folder(model)
    if folder is not None:
        candidate = folder / FILE_NAME
        return read_generation_config(candidate) if candidate.is_file() else {}
    return dict(KNOWN.get(_model_id(str(model).strip()).lower(), {}))


def applied_defaults(model, generation_config: str = "auto") -> dict:
    """The sampling fields vLLM applies to requests that set none, served with
    `--generation-config` `generation_config` ('auto': the model's, `sampling_defaults`;
    'vllm': vLLM's own, none)."""
    return sampling_defaults(model) if generation_config == "auto" else {}


def sampler_for(model, generation_config: str = "auto") -> str:
    """The sampler path (`catalog.sampler_prices`) of requests that set no sampling fields
    (`applied_defaults`; 'vllm': plain sampling)."""
    from bayesblis.catalog.sampler_prices import sampler_path

    return sampler_path(applied_defaults(model, generation_config))


def defaults_known(model: str) -> bool:
    """Whether `model`'s sampling defaults are known here (`sampling_defaults`): a
    generation_config.json beside its config, or its model id in `KNOWN`."""
    folder = _config_folder(model)
    if folder is not None:
        return (folder / FILE_NAME).is_file()
    return _model_id(str(model).strip()).lower() in KNOWN


def _config_folder(model) -> Path | None:
    """The folder of `model` given as a config.json path or a folder holding one; None for a
    model id."""
    path = Path(str(model))
    return path if path.is_dir() else path.parent if path.is_file() else None


def _model_id(name: str) -> str:
    """The model id a name stands for: a catalog short name is its entry's `hf_id` (the
    aliases name other checkpoints, whose defaults may differ); anything else as given."""
    from bayesblis.catalog.models import UnknownArchitectureError, load_model

    try:
        arch = load_model(name)
    except UnknownArchitectureError:
        return name
    return arch.hf_id if arch.hf_id and name.lower() == arch.name.lower() else name

