"""Model catalog: config.json parsing, parameter counts, presets, errors."""

import json
from pathlib import Path

import pytest

from bayesblis.catalog.models import ModelArch, list_models, load_model
from bayesblis.errors import InputError, UnknownArchitectureError

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "model_configs"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="shared data absent")
SHARED_NAMES = sorted(p.name for p in SHARED.iterdir()) if SHARED.is_dir() else []

REQUIRED_PRESETS = ["llama-2-7b", "llama-2-70b", "codellama-34b", "mixtral-8x7b",
                    "llama-3.1-8b", "qwen3-30b-a3b"]


@pytest.mark.parametrize("name", REQUIRED_PRESETS)
def test_required_presets_exist(name):
    assert name in list_models()
    assert load_model(name).name == name


@pytest.mark.parametrize("query, name", [
    ("meta-llama/Llama-2-70b-hf", "llama-2-70b"), ("LLAMA-2-7B", "llama-2-7b"),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"), ("Llama-2-7b-chat-hf", "llama-2-7b"),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"), ("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b"),
])
def test_lookup_by_hf_id_and_alias(query, name):
    assert load_model(query).name == name


# Known public parameter counts (model cards / papers).
@pytest.mark.parametrize("name, total, active", [
    ("llama-2-7b", 6.74e9, 6.74e9),
    ("llama-2-70b", 6.9e10, 6.9e10),
    ("mixtral-8x7b", 4.67e10, 1.29e10),
    ("qwen3-30b-a3b", 3.05e10, 3.3e9),
    ("llama-3.1-8b", 8.03e9, 8.03e9),
    ("codellama-34b", 3.37e10, 3.37e10),
])
def test_parameter_counts(name, total, active):
    m = load_model(name)
    assert m.total_params == pytest.approx(total, rel=0.02)
    assert m.active_params == pytest.approx(active, rel=0.02)


def test_llama2_7b_exact_count_by_hand():
    m = load_model("llama-2-7b")
    # per layer: attention 4*4096^2 = 67,108,864; MLP 3*4096*11008 = 135,266,304;
    # two RMSNorms 8,192 -> 202,383,360; x32 = 6,476,267,520
    # + embedding 32000*4096 = 131,072,000 + lm_head 131,072,000 + final norm 4,096
    assert m.total_params == 6_738_415_616
    assert m.linear_flops_per_token == 2 * 32 * (67_108_864 + 135_266_304)
    assert m.lm_head_flops_per_token == 2 * 4096 * 32000
    assert m.attention_flops_per_pair == 4 * 32 * 32 * 128
    assert m.kv_bytes_per_token == 32 * 2 * 32 * 128 * 2 == 524_288
    assert m.attention_kind == "MHA" and m.arch == "dense" and not m.is_moe
    assert m.weight_dtype == "fp16" and m.bytes_per_weight == 2


def test_mixtral_expert_bytes_by_hand():
    m = load_model("mixtral-8x7b")
    assert (m.n_experts, m.n_experts_per_tok, m.n_moe_layers) == (8, 2, 32)
    assert m.expert_weight_bytes_per_layer == 3 * 4096 * 14336 * 2 == 352_321_536
    # total 46,702,792,704 minus 32*8 experts of 176,160,768 params = 1,605,636,096 params
    assert m.dense_weight_bytes == 1_605_636_096 * 2
    assert m.attention_kind == "GQA" and m.family == "mixtral" and m.arch == "moe"


@needs_shared
def test_deepseek_v2_lite_counts_and_mla():
    m = load_model(SHARED / "deepseek-v2-lite")
    assert m.attention_kind == "MLA" and m.family == "deepseek_v2"
    assert m.n_moe_layers == 26  # first_k_dense_replace = 1 of 27 layers
    assert m.total_params == pytest.approx(1.57e10, rel=0.02)
    # DeepSeek's "2.4B activated" excludes the input embedding (a lookup, not a matmul):
    # 2.661e9 - 102400*2048 = 2.451e9, which the paper truncates to 2.4B.
    assert m.active_params - m.embedding_params == pytest.approx(2.4e9, rel=0.025)
    assert m.kv_bytes_per_token == 27 * (512 + 64) * 2  # latent + rope key, 2 bytes
    assert m.attention_flops_per_pair == 2 * 27 * 16 * (128 + 64 + 128)
    assert m.decode_attention_flops_per_pair == 2 * 27 * 16 * (2 * 512 + 64)
    assert m.n_shared_experts == 2 and m.shared_expert_intermediate_size == 2 * 1408


@needs_shared
@pytest.mark.parametrize("folder", SHARED_NAMES)
def test_all_shared_configs_load(folder):
    m = load_model(SHARED / folder)
    assert isinstance(m, ModelArch)
    assert m.total_params > m.active_params * (1.0 if not m.is_moe else 1.5) * 0.99
    assert m.kv_bytes_per_token > 0 and m.linear_flops_per_token > 0
    assert m.arch in ("dense", "moe")
    # folder and file forms agree
    assert load_model(SHARED / folder / "config.json") == m


@needs_shared
def test_special_architectures():
    scout = load_model(SHARED / "llama-4-scout-17b-16e-instruct-fp8-dynamic")
    assert scout.family == "llama4" and scout.n_moe_layers == 48
    assert scout.weight_dtype == "fp8" and scout.bytes_per_weight == 1
    assert scout.unquantized_attention and scout.unquantized_lm_head   # its ignore list
    assert scout.n_shared_experts == 1 and scout.n_experts == 16 and scout.n_experts_per_tok == 1
    assert scout.total_params == pytest.approx(1.08e11, rel=0.02)  # 109B incl. vision tower
    assert scout.active_params == pytest.approx(1.7e10, rel=0.03)
    glm = load_model(SHARED / "glm-5.2-fp8")
    assert glm.family == "glm" and glm.attention_kind == "MLA" and glm.weight_dtype == "fp8"
    assert glm.n_moe_layers == 75
    qwen = load_model(SHARED / "qwen2.5-7b-instruct")
    assert qwen.qkv_bias and qwen.total_params == pytest.approx(7.61e9, rel=0.01)
    assert load_model(SHARED / "qwen3-14b").qk_norm


def test_interleaved_moe_layers(tmp_path):
    cfg = {"architectures": ["Llama4ForCausalLM"], "model_type": "llama4_text",
           "hidden_size": 512, "intermediate_size": 256, "intermediate_size_mlp": 1024,
           "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 2,
           "vocab_size": 1000, "num_local_experts": 4, "num_experts_per_tok": 1,
           "interleave_moe_layer_step": 2, "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = load_model(tmp_path)
    assert m.n_moe_layers == 4 and m.intermediate_size == 1024 and m.moe_intermediate_size == 256
    cfg.update(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
               moe_intermediate_size=128, num_experts=4, mlp_only_layers=[0, 1])
    del cfg["num_local_experts"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert load_model(tmp_path).n_moe_layers == 6


def test_fp32_checkpoint_is_4_bytes(tmp_path):
    data = json.loads((Path(load_model("llama-2-7b").source)).read_text())
    data["torch_dtype"] = "float32"
    (tmp_path / "config.json").write_text(json.dumps(data))
    m = load_model(tmp_path / "config.json")
    assert m.weight_dtype == "fp32" and m.bytes_per_weight == 4


def test_quantized_checkpoint_keeps_ignored_modules_at_16_bits(tmp_path):
    """An FP8 checkpoint whose quantization_config ignores the attention projections and
    the lm_head (as RedHat's Llama-4-Scout FP8-dynamic does) streams them at 2 bytes, and
    kernel-db prices their GEMMs from the bf16 table; the embedding is never quantized."""
    from bayesblis.catalog import kernel_prices

    data = json.loads((Path(load_model("llama-2-7b").source)).read_text())
    data["quantization_config"] = {
        "quant_method": "compressed-tensors", "format": "float-quantized",
        "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}, "targets": ["Linear"]}},
        "ignore": ["vision_model.layers.0.mlp.fc1", "model.layers.0.self_attn.q_proj", "lm_head"]}
    (tmp_path / "config.json").write_text(json.dumps(data))
    m = load_model(tmp_path / "config.json")
    assert m.weight_dtype == "fp8" and m.unquantized_attention and m.unquantized_lm_head
    # Llama-2-7B: 32 layers x 4 x 4096^2 attention weights, 32,000 x 4,096 lm_head and embedding
    sixteen_bit = 32 * 4 * 4096 ** 2 + 2 * 32_000 * 4096
    assert m.unquantized_params == sixteen_bit
    assert m.dense_weight_bytes == m.total_params * 1.0 + sixteen_bit * 1.0
    # a decode step gathers embedding rows: the 16-bit table is not streamed
    assert m.streamed_weight_bytes == m.dense_weight_bytes - 32_000 * 4096 * 2
    assert kernel_prices.gemm_tables(m, 1, "fp8") == ["bf16", "bf16", "fp8", "fp8", "bf16"]
    # without the ignore list every Linear weight is FP8; the embedding still is not
    del data["quantization_config"]["ignore"]
    (tmp_path / "config.json").write_text(json.dumps(data))
    plain = load_model(tmp_path / "config.json")
    assert not plain.unquantized_attention and not plain.unquantized_lm_head
    assert plain.unquantized_params == 32_000 * 4096
    assert kernel_prices.gemm_tables(plain, 1, "fp8") == ["fp8"] * 5
    assert kernel_prices.gemm_tables(load_model("llama-2-7b"), 1, "fp16") == ["bf16"] * 5
    # tied embeddings: the lm_head streams the table, so nothing is left out
    data.pop("quantization_config")
    data["tie_word_embeddings"] = True
    (tmp_path / "config.json").write_text(json.dumps(data))
    tied = load_model(tmp_path / "config.json")
    assert tied.streamed_weight_bytes == tied.dense_weight_bytes == tied.total_params * 2


def test_unknown_architecture_names_file_field_and_supported(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"architectures": ["MambaForCausalLM"], "model_type": "mamba",
                                "hidden_size": 10}))
    with pytest.raises(UnknownArchitectureError) as info:
        load_model(path)
    text = str(info.value)
    assert str(path) in text and "architectures" in text and "MambaForCausalLM" in text
    assert "LlamaForCausalLM" in text and "MixtralForCausalLM" in text


def test_missing_field_names_file_and_field(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
                                "num_attention_heads": 4, "vocab_size": 10,
                                "intermediate_size": 128}))
    with pytest.raises(InputError) as info:
        load_model(path)
    assert str(path) in str(info.value) and "num_hidden_layers" in str(info.value)


def test_unknown_name():
    with pytest.raises(UnknownArchitectureError, match="Known presets: .*llama-2-7b"):
        load_model("gpt-5-ultra")


# Presets were written from public architecture facts; check them against the public
# reference configs field by field.
PRESET_VS_SHARED = {
    "llama-2-7b": "llama-2-7b-hf", "llama-2-70b": "llama-2-70b-hf",
    "codellama-34b": "codellama-34b-instruct-hf", "mixtral-8x7b": "mixtral-8x7b-v0.1",
    "llama-3.1-8b": "llama-3.1-8b-instruct", "llama-3.1-70b": "llama-3.1-70b-instruct",
    "qwen3-30b-a3b": "qwen3-30b-a3b", "qwen2.5-7b": "qwen2.5-7b-instruct",
    "qwen3-14b": "qwen3-14b", "mistral-nemo-12b": "mistral-nemo-instruct-2407",
    "yi-34b": "yi-34b", "deepseek-v2-lite": "deepseek-v2-lite",
}


@needs_shared
@pytest.mark.parametrize("preset, folder", sorted(PRESET_VS_SHARED.items()))
def test_presets_match_public_configs(preset, folder):
    ours, ref = load_model(preset), load_model(SHARED / folder)
    for f in ("family", "n_layers", "n_moe_layers", "hidden_size", "n_heads", "n_kv_heads",
              "head_dim", "intermediate_size", "moe_intermediate_size", "n_experts",
              "n_experts_per_tok", "n_shared_experts", "vocab_size", "tie_word_embeddings",
              "weight_dtype", "kv_lora_rank", "qk_rope_head_dim", "total_params"):
        assert getattr(ours, f) == getattr(ref, f), f
