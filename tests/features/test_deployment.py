"""Deployment constants and validation."""

import pytest

from bayesblis.catalog import load_gpu, load_model
from bayesblis.errors import UnknownHardwareError
from bayesblis.features.physics import Deployment, DeploymentError


def test_llama2_70b_tp4_kv_sharding_and_weights():
    d = Deployment(load_model("llama-2-70b"), load_gpu("H100"), tp=4)
    # 8 KV heads over 4 GPUs = 2 heads each: 80 layers * (K+V) 2 * 2 heads * 128 * 2 B
    assert d.kv_heads_per_gpu == 2
    assert d.kv_bytes_per_token_per_gpu == 80 * 2 * 2 * 128 * 2 == 81_920
    assert d.kv_bytes_per_token == 327_680
    # 68,976,648,192 params * 2 B / 4 GPUs
    assert d.weight_bytes_per_gpu == 68_976_648_192 * 2 / 4
    assert d.num_gpus == 4
    assert d.config_key == "llama-2-70b|H100-SXM|tp4|ep1|bf16"


def test_kv_heads_replicated_beyond_n_kv_heads():
    d = Deployment("llama-2-70b", "H100", tp=16 // 2)  # 8 GPUs, 8 KV heads -> 1 each
    assert d.kv_heads_per_gpu == 1
    q = Deployment("qwen2.5-7b", "H100", tp=2)  # 4 KV heads / 2
    assert q.kv_heads_per_gpu == 2


def test_mla_latent_is_replicated():
    d1 = Deployment("deepseek-v2-lite", "H100", tp=1)
    d2 = Deployment("deepseek-v2-lite", "H100", tp=2)
    assert d1.kv_bytes_per_token_per_gpu == d2.kv_bytes_per_token_per_gpu == 27 * 576 * 2


def test_kv_cache_blocks_by_hand():
    d = Deployment("llama-2-7b", "H100")
    # (80 GiB * 0.9 - 13,476,831,232 B weights - 2 GiB) / (16 tokens * 524,288 B)
    # = (77,309,411,328 - 13,476,831,232 - 2,147,483,648) / 8,388,608 = 7353.4 -> 7353
    assert d.kv_cache_blocks(0.9) == 7353
    assert d.kv_cache_blocks(0.9, activation_reserve_bytes=0) == 7609
    assert Deployment("llama-2-70b", "L40S", tp=1).kv_cache_blocks(0.9) == 0  # does not fit


def test_dtype_auto_and_fallbacks():
    assert Deployment("llama-2-7b", "H100", dtype="auto").compute_dtype == "fp16"
    assert Deployment("llama-3.1-8b", "H100", dtype="auto").compute_dtype == "bf16"
    fp8 = Deployment("llama-3.1-8b", "H100", dtype="fp8")
    assert fp8.weight_bytes_per_param == 1 and fp8.peak_flops_per_s == pytest.approx(1978.9e12)
    with pytest.raises(UnknownHardwareError, match="fp8"):
        Deployment("llama-3.1-8b", "A100", dtype="fp8")
    with pytest.raises(DeploymentError):
        Deployment("llama-3.1-8b", "A100", dtype="fp64")


def test_validation():
    with pytest.raises(DeploymentError, match="divide"):
        Deployment("llama-2-7b", "H100", tp=3)
    with pytest.raises(DeploymentError, match="ep"):
        Deployment("mixtral-8x7b", "H100", tp=4, ep=2)
    with pytest.raises(DeploymentError, match="dense"):
        Deployment("llama-2-7b", "H100", tp=2, ep=2)
    with pytest.raises(DeploymentError):
        Deployment("llama-2-7b", "H100", tp=0)
    assert Deployment("mixtral-8x7b", "H100", tp=4, ep=4).ep == 4


def test_deployments_are_hashable_values():
    a = Deployment("llama-2-7b", "H100")
    b = Deployment(load_model("llama-2-7b"), load_gpu("h100-sxm"))
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1


def test_auto_dtype_is_resolved_in_place():
    d = Deployment("llama-2-7b", "H100", dtype="auto")
    assert d.dtype == d.compute_dtype == "fp16"
    assert d == Deployment("llama-2-7b", "H100", dtype="fp16")
    assert "auto" not in d.config_key
