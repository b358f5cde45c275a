import pytest

from bayesblis.errors import InputError
from bayesblis.io.vllm_settings import VllmSettings


def test_defaults_are_v1():
    s = VllmSettings()
    assert (s.max_num_seqs, s.max_num_batched_tokens, s.block_size) == (256, 2048, 16)
    assert s.enable_prefix_caching and s.enable_chunked_prefill and s.gpu_memory_utilization == 0.9


def test_from_cli_args():
    s = VllmSettings.from_cli_args(
        "vllm serve mistralai/Mixtral-8x7B-v0.1 --tensor-parallel-size 2 --max_num_batched_tokens=8192 "
        "--enable-expert-parallel --no-enable-prefix-caching --kv-offloading-size 10 --port 8000 "
        "--max-num-seqs 64 --disable-log-requests")
    assert s.model == "mistralai/Mixtral-8x7B-v0.1" and s.tp == 2 and s.ep == 2
    assert s.max_num_batched_tokens == 8192 and s.max_num_seqs == 64
    assert not s.enable_prefix_caching and s.kv_offloading_size_gb == 10
    assert VllmSettings.from_cli_args(["m", "-tp", "4"]).tp == 4


def test_weight_offloading_is_refused_not_read_as_kv_offloading():
    """vLLM's --cpu-offload-gb moves weights, not the KV cache, to the CPU."""
    assert VllmSettings.from_cli_args("m --cpu-offload-gb 0").kv_offloading_size_gb == 0
    with pytest.raises(InputError) as info:
        VllmSettings.from_cli_args("m --cpu-offload-gb 10")
    assert info.value.field == "cpu-offload-gb" and "offloads model weights" in str(info.value)
    assert "--kv-offloading-size" in str(info.value)


def test_round_trip_and_validation(real_ip_dir):
    s = VllmSettings.from_exp_config(real_ip_dir / "20260217-155451-llama-2-7b-tp1-codegen" / "exp-config.yaml")
    assert s.model == "meta-llama/Llama-2-7b-hf" and s.max_model_len == 4096 and s.max_num_seqs == 128
    assert VllmSettings.from_dict(s.to_dict()) == s


def test_validation():
    with pytest.raises(InputError, match="tp"):
        VllmSettings(tp=0)
    with pytest.raises(InputError, match="max_num_seqs"):
        VllmSettings.from_cli_args("m --max-num-seqs -3")
    with pytest.raises(InputError, match="gpu_memory_utilization"):
        VllmSettings(gpu_memory_utilization=1.5)
    with pytest.raises(InputError, match="bogus"):
        VllmSettings.from_dict({"bogus": 1})


def test_generation_config_is_read_from_the_command_and_the_config_and_checked(tmp_path):
    assert VllmSettings().generation_config == "auto"
    assert VllmSettings.from_cli_args("m --generation-config vllm").generation_config == "vllm"
    (tmp_path / "exp-config.yaml").write_text("model: m\ngeneration_config: vllm\n")
    assert VllmSettings.from_exp_config(tmp_path / "exp-config.yaml").generation_config == "vllm"
    with pytest.raises(InputError) as info:
        VllmSettings.from_cli_args("m --generation-config /models/m")
    assert info.value.field == "generation_config" and "auto or vllm" in str(info.value)
