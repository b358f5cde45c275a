"""Profiled weight-streaming factors (bayesblis.catalog.weight_streaming): measured from a
profiles folder with a known truth, looked up by deployments, and the built-in catalog
rebuilt from the shared profiles."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bayesblis.catalog import weight_streaming
from bayesblis.features import Deployment
from bayesblis.io.operator_profiles import read_operator_profiles
from profile_helpers import BW, TRUTH, write_profiles

SHARED_PROFILES = Path(__file__).resolve().parents[3] / "shared" / "data" / "operator-profiles"


def test_measure_gives_each_model_and_tp_its_ratio_to_bytes_over_peak(tmp_path):
    profiles = read_operator_profiles(write_profiles(tmp_path / "vidur"))
    doc = weight_streaming.measure(profiles)
    assert set(doc) == {"A100-SXM-80GB", "H100-SXM"}
    for gpu, key in (("A100-SXM-80GB", "a100"), ("H100-SXM", "h100")):
        expected = {}
        for model in ("llama-2-7b", "tiny-2b"):
            for tp in (1, 2):
                # the fixture's layer: 1.2 x weight time + a 12 µs constant (no FLOP excess
                # at 1-8 tokens), so its ratio to bytes over peak is 1.2 + 12 µs / weight time
                d = Deployment(profiles.models[model], gpu, tp=tp, dtype="fp16")
                weights_s = d.dense_layer_weight_bytes / (tp * BW[key])
                expected[(model, tp)] = TRUTH["weight"] + TRUTH["layer_us"] * 1e-6 / weights_s
                assert doc[gpu]["ratios"][model][str(tp)] == pytest.approx(expected[(model, tp)], abs=1e-4)
        # smaller matrices per GPU (tiny-2b, TP 2) sit further above the GPU's median
        assert doc[gpu]["reference"] == pytest.approx(np.median(list(expected.values())), abs=1e-4)
        assert doc[gpu]["ratios"]["tiny-2b"]["2"] > doc[gpu]["ratios"]["llama-2-7b"]["1"]


def test_build_writes_the_catalog_file_and_a_table(tmp_path):
    out = tmp_path / "weight_streaming.json"
    try:
        doc = weight_streaming.build(write_profiles(tmp_path / "vidur"), out=out)
    finally:
        weight_streaming.catalog.cache_clear()  # the built-in file again for other tests
    assert json.loads(out.read_text()) == doc
    assert doc["tokens_max"] == weight_streaming.TOKENS_MAX
    table = weight_streaming.format_table(doc)
    assert "(reference)" in table and "tiny-2b" in table


def test_deployments_on_a_gpu_kernel_db_lacks_look_up_their_factor():
    a40 = weight_streaming.catalog()["gpus"]["A40"]
    expected = a40["ratios"]["llama-2-7b"]["1"] / a40["reference"]
    assert Deployment("llama-2-7b", "A40", tp=1).weight_stream_factor == pytest.approx(expected)
    # Llama-2-7B's small matrices stream further below peak at TP 4 than at TP 1
    assert Deployment("llama-2-7b", "A40", tp=4).weight_stream_factor > expected
    assert Deployment("mixtral-8x7b", "A40", tp=2).weight_stream_factor == 1.0  # not profiled
    assert weight_streaming.factor("H100-SXM", "llama-2-7b", 16) == 1.0  # TP not profiled
    # the profiles time 2-byte weights: other widths keep bytes over peak
    assert weight_streaming.factor("H100-SXM", "llama-2-7b", 1, 1.0) == 1.0
    # where kernel-db has the GPU, its GEMMs price the weights instead (catalog.kernel_prices)
    h100 = weight_streaming.catalog()["gpus"]["H100-SXM"]
    vidur = h100["ratios"]["llama-2-7b"]["1"] / h100["reference"]
    assert Deployment("llama-2-7b", "H100", tp=1).weight_stream_factor != pytest.approx(vidur)
