"""Caveats of predictions the model is known to get wrong (`bayesblis.caveats`)."""

from __future__ import annotations

from bayesblis import caveats
from bayesblis.features.physics import Deployment


def test_a_repetition_penalty_is_a_caveat_priced_top_k_and_top_p_are_not():
    (text,) = caveats.sampling({"repetition_penalty": 1.05, "top_k": 20}, vocab_size=152064)
    assert "repetition_penalty 1.05 (and top_k 20)" in text
    assert "within 2% with its top-k / top-p sort priced" in text and "not priced" in text
    assert "--generation-config vllm" in text
    assert caveats.sampling({"temperature": 0.6, "top_p": 0.9}, vocab_size=128256) == []
    assert caveats.sampling({"top_k": 20}, vocab_size=151936) == [] == caveats.sampling({})


def test_unknown_defaults_of_a_large_vocabulary_are_a_caveat_known_ones_and_small_ones_not():
    (text,) = caveats.sampling({}, vocab_size=131072, known=False)
    assert text.startswith("no generation_config.json is known here") and "(131,072-token" in text
    assert "predicted 7-19% fast" in text and "beside its config.json" in text
    assert "ms a step" not in text                                # no deployment: no price quoted
    (priced,) = caveats.sampling({}, vocab_size=131072, known=False,
                                 deployment=Deployment("llama-3.1-8b", "H100"))
    assert "about 1.3 ms a step at 32 requests on H100-SXM" in priced   # 0.29 ms + 32 x 32 µs
    assert caveats.sampling({}, vocab_size=131072, known=True) == []     # known to set none
    assert caveats.sampling({}, vocab_size=32000, known=False) == []
    assert caveats.sampling({}, vocab_size=None, known=False) == []


def test_routed_experts_in_fp8_are_a_caveat_dense_fp8_and_bf16_experts_are_not():
    (text,) = caveats.fp8_moe(Deployment("qwen3-30b-a3b", "H100", dtype="fp8"))
    assert "FP8" in text and "1,448-token outputs" in text and "Calibrate" in text
    assert caveats.fp8_moe(Deployment("qwen3-30b-a3b", "H100")) == []            # bf16
    assert caveats.fp8_moe(Deployment("llama-3.1-8b", "H100", dtype="fp8")) == []  # dense
    assert caveats.fp8_moe(Deployment("mixtral-8x7b", "H100", tp=2)) == []


def test_a_gpu_the_posterior_never_saw_is_a_caveat_naming_how_it_is_priced():
    assert caveats.unseen_gpu(None) == []
    (measured,) = caveats.unseen_gpu("A100-SXM-80GB")
    assert "no trace of A100-SXM-80GB" in measured and "kernel times there" in measured
    assert caveats.UNSEEN_GPU_MEASURED in measured and "at 6 req/s" in measured
    assert "Calibrate" in measured
    (unmeasured,) = caveats.unseen_gpu("A40")
    assert "spread as kernel-db's GPUs differ" in unmeasured
