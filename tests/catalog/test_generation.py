"""A model's sampling defaults as vLLM applies them (`catalog.generation`)."""

from __future__ import annotations

import json

import pytest

from bayesblis.catalog.generation import KNOWN, read_generation_config, sampling_defaults
from bayesblis.errors import InputError

QWEN_FILE = {"bos_token_id": 151643, "pad_token_id": 151643, "do_sample": True,
             "eos_token_id": [151645, 151643], "repetition_penalty": 1.05, "temperature": 0.7,
             "top_p": 0.8, "top_k": 20, "transformers_version": "4.37.0"}


def test_only_the_fields_vllm_applies_and_not_transformers_defaults(tmp_path):
    p = tmp_path / "generation_config.json"
    p.write_text(json.dumps(QWEN_FILE))
    assert read_generation_config(p) == {"repetition_penalty": 1.05, "temperature": 0.7,
                                         "top_p": 0.8, "top_k": 20}
    p.write_text(json.dumps({"do_sample": True, "top_k": 50, "temperature": 1.0, "top_p": 0.9}))
    assert read_generation_config(p) == {"top_p": 0.9}


@pytest.mark.parametrize("text, field, words", [
    ('{"top_p": "high"}', "top_p", ["'high'", "a number >= 0"]),
    ('{"repetition_penalty": -1}', "repetition_penalty", ["-1"]),
    ("[1, 2]", None, ["not a JSON object"]),
    ("{top_p: 0.9", None, ["not JSON", "line 1"]),
])
def test_bad_generation_config_names_the_file_and_field(tmp_path, text, field, words):
    p = tmp_path / "generation_config.json"
    p.write_text(text)
    with pytest.raises(InputError) as info:
        read_generation_config(p)
    msg = str(info.value)
    assert str(p) in msg
    if field:
        assert field in msg
    for w in words:
        assert w in msg


def test_the_file_beside_a_config_json_then_the_known_catalog_ids(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert sampling_defaults(tmp_path) == {} == sampling_defaults(tmp_path / "config.json")
    (tmp_path / "generation_config.json").write_text(json.dumps(QWEN_FILE))
    assert sampling_defaults(tmp_path)["repetition_penalty"] == 1.05
    assert sampling_defaults(tmp_path / "config.json")["top_k"] == 20
    assert sampling_defaults("Qwen/Qwen2.5-7B-Instruct") == KNOWN["qwen/qwen2.5-7b-instruct"]
    # the catalog's short name is its entry's checkpoint; an alias names another one
    assert sampling_defaults("qwen2.5-7b") == KNOWN["qwen/qwen2.5-7b-instruct"]
    assert sampling_defaults("Qwen/Qwen2.5-7B") == {}
    assert sampling_defaults("llama-2-7b") == {"temperature": 0.6, "top_p": 0.9}   # the traced model's
    assert sampling_defaults("meta-llama/Llama-2-70b-hf") == {} == sampling_defaults("no-such/model")


def test_qwen3_14b_samples_with_its_familys_top_k_and_top_p_its_base_checkpoint_with_none():
    from bayesblis.catalog.generation import defaults_known, sampler_for

    assert sampling_defaults("qwen3-14b") == {"temperature": 0.6, "top_k": 20, "top_p": 0.95}
    assert sampler_for("Qwen/Qwen3-14B") == "sort" and defaults_known("qwen3-14b")
    assert sampler_for("Qwen/Qwen3-14B-Base") == "plain"          # an alias, another checkpoint
    assert sampler_for("qwen3-14b", generation_config="vllm") == "plain"
