"""Model architectures: `ModelArch` derived from a Hugging Face config.json.

`load_model` accepts a config.json path, a folder holding one, or a catalog name
(preset file stem, HF id or alias; case-insensitive). Parameter counts, weight bytes,
KV bytes and FLOPs per token are properties whose names carry their unit.
See data_specs/model-config.md for the fields read and the conventions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Mapping

from bayesblis.errors import InputError, UnknownArchitectureError
from bayesblis.io.text import load_json_checked

CATALOG_DIR = Path(__file__).with_name("models")

# HF architecture class / model_type -> normalized family.
_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "MixtralForCausalLM": "mixtral",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "Llama4ForConditionalGeneration": "llama4",
    "Llama4ForCausalLM": "llama4",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "Glm4MoeForCausalLM": "glm",
    "GlmMoeDsaForCausalLM": "glm",
}
_MODEL_TYPES = {
    "llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "qwen3": "qwen3",
    "mixtral": "mixtral", "qwen2_moe": "qwen2_moe", "qwen3_moe": "qwen3_moe",
    "llama4": "llama4", "llama4_text": "llama4", "deepseek_v2": "deepseek_v2",
    "deepseek_v3": "deepseek_v3", "glm4_moe": "glm", "glm_moe_dsa": "glm",
}
SUPPORTED_ARCHITECTURES = tuple(sorted(_ARCHITECTURES))
SUPPORTED_MODEL_TYPES = tuple(sorted(_MODEL_TYPES))
FAMILIES = tuple(sorted(set(_ARCHITECTURES.values())))

# checkpoint dtype -> (canonical name, bytes per weight)
_TORCH_DTYPES = {
    "bfloat16": ("bf16", 2.0), "bf16": ("bf16", 2.0),
    "float16": ("fp16", 2.0), "fp16": ("fp16", 2.0), "half": ("fp16", 2.0),
    "float32": ("fp32", 4.0), "fp32": ("fp32", 4.0), "float": ("fp32", 4.0),
}
DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}


@dataclass(frozen=True)
class ModelArch:
    """Architecture facts of one decoder-only LLM (text part), read from config.json.

    Counts are per model (all layers, unsharded). `intermediate_size` is the MLP width
    of dense (non-MoE) layers; `moe_intermediate_size` the width of one routed expert;
    `shared_expert_intermediate_size` the summed width of the always-active shared
    expert(s) of an MoE layer. `gated_mlp` False: a dense MLP of two matmuls (up, down;
    e.g. Phi-2) instead of three (gate, up, down); every supported config.json family is
    gated, the flag serves architectures built from shapes (`io.operator_profiles`).
    """

    name: str
    family: str
    architecture: str
    n_layers: int
    hidden_size: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False
    gated_mlp: bool = True
    n_moe_layers: int = 0
    moe_intermediate_size: int = 0
    n_experts: int = 0
    n_experts_per_tok: int = 0
    n_shared_experts: int = 0
    shared_expert_intermediate_size: int = 0
    shared_expert_gate: bool = False
    weight_dtype: str = "bf16"
    bytes_per_weight: float = 2.0
    unquantized_attention: bool = False
    unquantized_lm_head: bool = False
    kv_dtype: str = "bf16"
    kv_bytes: float = 2.0
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    index_n_heads: int = 0
    index_head_dim: int = 0
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False
    hf_id: str = ""
    source: str = field(default="", compare=False)

    # ---- classification -------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0 and self.n_moe_layers > 0

    @property
    def arch(self) -> str:
        """'moe' or 'dense' (the hierarchy's arch level)."""
        return "moe" if self.is_moe else "dense"

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def attention_kind(self) -> str:
        """'MLA', 'MHA', 'MQA' or 'GQA'."""
        if self.is_mla:
            return "MLA"
        if self.n_kv_heads == self.n_heads:
            return "MHA"
        if self.n_kv_heads == 1:
            return "MQA"
        return "GQA"

    @property
    def n_dense_layers(self) -> int:
        return self.n_layers - self.n_moe_layers

    # ---- parameter counts (per layer) -----------------------------------------
    @property
    def attention_matmul_params_per_layer(self) -> int:
        """Weights of the attention projections of one layer (no biases, no norms)."""
        h, nh = self.hidden_size, self.n_heads
        if self.is_mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                q = h * self.q_lora_rank + self.q_lora_rank * nh * qk
            else:
                q = h * nh * qk
            kv_a = h * (self.kv_lora_rank + self.qk_rope_head_dim)
            kv_b = self.kv_lora_rank * nh * (self.qk_nope_head_dim + self.v_head_dim)
            o = nh * self.v_head_dim * h
            indexer = 0
            if self.index_n_heads:
                q_in = self.q_lora_rank or h
                indexer = (q_in * self.index_n_heads * self.index_head_dim
                           + h * self.index_head_dim + h * self.index_n_heads)
            return q + kv_a + kv_b + o + indexer
        q = h * nh * self.head_dim
        kv = 2 * h * self.n_kv_heads * self.head_dim
        o = nh * self.head_dim * h
        return q + kv + o

    @property
    def attention_other_params_per_layer(self) -> int:
        """Biases and norms of one layer (input + post-attention norms included)."""
        n = 2 * self.hidden_size
        if self.qkv_bias:
            n += (self.n_heads + 2 * self.n_kv_heads) * self.head_dim
        if self.o_bias:
            n += self.hidden_size
        if self.qk_norm:
            n += 2 * self.head_dim
        if self.is_mla:
            n += self.kv_lora_rank + self.q_lora_rank
            if self.index_n_heads:
                n += 2 * self.index_head_dim
        return n

    @property
    def dense_mlp_params_per_layer(self) -> int:
        """MLP of a dense layer: gate, up, down (gated) or up, down."""
        return (3 if self.gated_mlp else 2) * self.hidden_size * self.intermediate_size

    @property
    def dense_layer_matmul_params(self) -> int:
        """Matmul weights of one dense layer: attention projections + MLP (the linear
        layers a token passes through; no norms, biases, embedding or lm_head)."""
        return self.attention_matmul_params_per_layer + self.dense_mlp_params_per_layer

    @property
    def expert_params(self) -> int:
        """One routed expert (gate, up, down)."""
        return 3 * self.hidden_size * self.moe_intermediate_size

    @property
    def shared_params_per_moe_layer(self) -> int:
        """Always-active part of an MoE layer: shared expert(s), their gate, the router."""
        n = 3 * self.hidden_size * self.shared_expert_intermediate_size
        n += self.hidden_size * self.n_experts
        if self.shared_expert_gate:
            n += self.hidden_size
        return n

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        """lm_head weights (0 when tied to the embedding: stored once)."""
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    # ---- totals ------------------------------------------------------------------
    @property
    def routed_expert_params(self) -> int:
        """All routed experts of all MoE layers."""
        return self.n_moe_layers * self.n_experts * self.expert_params

    @property
    def total_params(self) -> int:
        """All weights of the language model (embeddings and lm_head included)."""
        per_layer = self.attention_matmul_params_per_layer + self.attention_other_params_per_layer
        return (self.n_layers * per_layer
                + self.n_dense_layers * self.dense_mlp_params_per_layer
                + self.n_moe_layers * self.shared_params_per_moe_layer
                + self.routed_expert_params
                + self.embedding_params + self.lm_head_params + self.hidden_size)

    @property
    def active_params(self) -> int:
        """Weights used per token (embedding, lm_head and top-k + shared experts)."""
        inactive = self.n_moe_layers * (self.n_experts - self.n_experts_per_tok) * self.expert_params
        return self.total_params - inactive

    @property
    def active_matmul_params_per_token(self) -> int:
        """Matmul weights a token multiplies through, lm_head and embedding excluded."""
        return (self.n_layers * self.attention_matmul_params_per_layer
                + self.n_dense_layers * self.dense_mlp_params_per_layer
                + self.n_moe_layers * (self.shared_params_per_moe_layer
                                       + self.n_experts_per_tok * self.expert_params))

    # ---- bytes -------------------------------------------------------------------
    @property
    def unquantized_params(self) -> int:
        """Weights a quantized checkpoint keeps at 16 bits: the embedding table (not a
        Linear layer), and the attention projections and lm_head where its
        quantization_config ignores them (`unquantized_attention`, `unquantized_lm_head`)."""
        return (self.embedding_params
                + (self.n_layers * self.attention_matmul_params_per_layer if self.unquantized_attention else 0)
                + (self.lm_head_params if self.unquantized_lm_head else 0))

    def weight_bytes(self, params: float, bytes_per_weight: float | None = None) -> float:
        """Bytes of `params` weights that include every `unquantized_params` weight, at
        `bytes_per_weight` (the checkpoint's by default) for the quantized ones and at least
        16 bits for the others."""
        bpw = self.bytes_per_weight if bytes_per_weight is None else bytes_per_weight
        return params * bpw + self.unquantized_params * max(0.0, UNQUANTIZED_BYTES - bpw)

    @property
    def dense_weight_bytes(self) -> float:
        """Bytes of all weights that every step reads: everything but routed experts."""
        return self.weight_bytes(self.total_params - self.routed_expert_params)

    def gathered_embedding_bytes(self, bytes_per_weight: float | None = None) -> float:
        """Bytes of the embedding table when a step only gathers its tokens' rows from it
        (0 when the lm_head is tied to it and streams it); 16 bits at least, as in
        `weight_bytes`."""
        if self.tie_word_embeddings:
            return 0.0
        bpw = self.bytes_per_weight if bytes_per_weight is None else bytes_per_weight
        return self.embedding_params * max(bpw, UNQUANTIZED_BYTES)

    @property
    def streamed_weight_bytes(self) -> float:
        """Bytes of the weights every step streams: `dense_weight_bytes` less the embedding
        table, of which a step gathers only its tokens' rows (`gathered_embedding_bytes`)."""
        return self.dense_weight_bytes - self.gathered_embedding_bytes()

    @property
    def expert_weight_bytes_per_layer(self) -> float:
        """Bytes of one routed expert in one MoE layer."""
        return self.expert_params * self.bytes_per_weight

    @property
    def total_weight_bytes(self) -> float:
        return self.weight_bytes(self.total_params)

    @property
    def kv_elements_per_token_per_layer(self) -> int:
        """KV-cache elements one token stores in one layer (MLA: latent + rope key)."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.n_kv_heads * self.head_dim

    @property
    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes per token over all layers, unsharded."""
        return self.n_layers * self.kv_elements_per_token_per_layer * self.kv_bytes

    # ---- FLOPs -------------------------------------------------------------------
    @property
    def linear_flops_per_token(self) -> float:
        """2 x active matmul weights per token (attention projections, MLP/experts,
        router), lm_head excluded."""
        return 2.0 * self.active_matmul_params_per_token

    @property
    def lm_head_flops_per_token(self) -> float:
        """2 x hidden x vocab: the logits of one sampled position."""
        return 2.0 * self.hidden_size * self.vocab_size

    @property
    def attention_flops_per_pair(self) -> float:
        """FLOPs per (query token, context token) pair over all layers (QK^T + PV).

        Standard attention: 4 n_layers n_heads head_dim. MLA (prefill path, keys and
        values up-projected): 2 n_layers n_heads (qk_nope + qk_rope + v_head)."""
        if self.is_mla:
            per_head = self.qk_nope_head_dim + self.qk_rope_head_dim + self.v_head_dim
            return 2.0 * self.n_layers * self.n_heads * per_head
        return 4.0 * self.n_layers * self.n_heads * self.head_dim

    @property
    def decode_attention_flops_per_pair(self) -> float:
        """As `attention_flops_per_pair` for decode; MLA decodes in the absorbed form
        over the latent: 2 n_layers n_heads (2 kv_lora_rank + qk_rope)."""
        if self.is_mla:
            per_head = 2 * self.kv_lora_rank + self.qk_rope_head_dim
            return 2.0 * self.n_layers * self.n_heads * per_head
        return self.attention_flops_per_pair

    def summary(self) -> dict:
        """Plain dict of the main facts and derived quantities (for reports)."""
        return {
            "name": self.name, "family": self.family, "arch": self.arch,
            "attention_kind": self.attention_kind, "n_layers": self.n_layers,
            "n_moe_layers": self.n_moe_layers, "total_params": self.total_params,
            "active_params": self.active_params, "weight_dtype": self.weight_dtype,
            "dense_weight_bytes": self.dense_weight_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
        }


# ---------------------------------------------------------------------------------
# config.json parsing
# ---------------------------------------------------------------------------------
def _get_int(path, cfg: Mapping, key: str, default=None, prefix="") -> int:
    value = cfg.get(key, default)
    if value is None:
        if default is None and key not in cfg:
            raise InputError(path, "missing required field", field=prefix + key,
                             expected="a positive integer")
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < 0:
        raise InputError(path, f"invalid value {value!r}", field=prefix + key,
                         expected="a non-negative integer")
    return int(value)


UNQUANTIZED_BYTES = 2.0
"""Bytes of a weight a quantized checkpoint leaves unquantized (bf16 or fp16)."""
_ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj")
_NOT_LANGUAGE = ("vision", "visual", "multi_modal", "mm_projector", "audio")


def _unquantized_modules(top: Mapping, text: Mapping) -> tuple[bool, bool]:
    """(attention projections, lm_head) a quantization_config leaves unquantized: its
    ``ignore`` (compressed-tensors) or ``modules_to_not_convert`` list, language model only."""
    q = top.get("quantization_config") or text.get("quantization_config")
    if not isinstance(q, Mapping):
        return False, False
    names = [str(n).lower() for n in (q.get("ignore") or q.get("modules_to_not_convert") or [])]
    names = [n for n in names if not any(tag in n for tag in _NOT_LANGUAGE)]
    attention = any(n.rstrip("$").endswith(_ATTENTION_PROJECTIONS) or "self_attn" in n for n in names)
    return attention, any("lm_head" in n for n in names)


def _weight_dtype(path, top: Mapping, text: Mapping) -> tuple[str, float]:
    """(dtype name, bytes per weight) from quantization_config or torch_dtype."""
    q = top.get("quantization_config") or text.get("quantization_config")
    if isinstance(q, Mapping):
        method = str(q.get("quant_method", "")).lower()
        if method == "fp8" or q.get("fmt") in ("e4m3", "e5m2"):
            return "fp8", 1.0
        bits = q.get("bits") or q.get("w_bit")
        kind = "int"
        for group in (q.get("config_groups") or {}).values():
            weights = group.get("weights") or {}
            bits = weights.get("num_bits", bits)
            kind = weights.get("type", kind)
        if bits:
            bits = int(bits)
            if bits == 8:
                return ("fp8", 1.0) if kind == "float" else ("int8", 1.0)
            if bits == 4:
                return "int4", 0.5
            raise InputError(path, f"unsupported quantization to {bits} bits",
                             field="quantization_config", expected="8 or 4 bits")
        raise InputError(path, f"unsupported quantization method '{method}'",
                         field="quantization_config.quant_method",
                         expected="fp8 or a config with weight num_bits 8/4")
    raw = text.get("torch_dtype") or text.get("dtype") or top.get("torch_dtype") or top.get("dtype") or "bfloat16"
    name = _TORCH_DTYPES.get(str(raw).lower().replace("torch.", ""))
    if name is None:
        raise InputError(path, f"unknown dtype '{raw}'", field="torch_dtype",
                         expected=f"one of {', '.join(sorted(_TORCH_DTYPES))}")
    return name


def _moe_layers(family: str, cfg: Mapping, n_layers: int, n_experts: int) -> int:
    if n_experts <= 0:
        return 0
    if family == "llama4":
        step = int(cfg.get("interleave_moe_layer_step", 1) or 1)
        return len(range(step - 1, n_layers, step))
    if family in ("deepseek_v2", "deepseek_v3", "glm"):
        first = int(cfg.get("first_k_dense_replace", 0) or 0)
        freq = int(cfg.get("moe_layer_freq", 1) or 1)
        return sum(1 for i in range(n_layers) if i >= first and i % freq == 0)
    if family in ("qwen2_moe", "qwen3_moe"):
        step = int(cfg.get("decoder_sparse_step", 1) or 1)
        dense = set(cfg.get("mlp_only_layers") or [])
        return sum(1 for i in range(n_layers) if i not in dense and (i + 1) % step == 0)
    return n_layers  # mixtral: every layer


def model_from_config(config: Mapping, *, name: str | None = None, path="<config>") -> ModelArch:
    """Build a ModelArch from a parsed HF config.json (errors name `path` and field)."""
    if not isinstance(config, Mapping):
        raise InputError(path, "config is not a JSON object", expected="an object")
    archs = config.get("architectures") or []
    if isinstance(archs, str):
        archs = [archs]
    model_type = str(config.get("model_type", ""))
    family = next((_ARCHITECTURES[a] for a in archs if a in _ARCHITECTURES), None)
    if family is None:
        family = _MODEL_TYPES.get(model_type)
    if family is None:
        raise UnknownArchitectureError(
            f"{path}: field 'architectures' = {list(archs)} (model_type '{model_type}') is not "
            f"a supported architecture. Supported architectures: "
            f"{', '.join(SUPPORTED_ARCHITECTURES)}; model types: {', '.join(SUPPORTED_MODEL_TYPES)}")
    text = config
    prefix = ""
    if isinstance(config.get("text_config"), Mapping):
        text, prefix = config["text_config"], "text_config."
    gi = lambda key, default=None: _get_int(path, text, key, default, prefix)  # noqa: E731

    n_layers = gi("num_hidden_layers")
    hidden = gi("hidden_size")
    n_heads = gi("num_attention_heads")
    vocab = gi("vocab_size")
    if min(n_layers, hidden, n_heads, vocab) <= 0:
        raise InputError(path, "layers, hidden size, heads and vocab must be positive",
                         field=prefix + "num_hidden_layers/hidden_size/num_attention_heads/vocab_size")
    n_kv = gi("num_key_value_heads", n_heads) or n_heads
    head_dim = gi("head_dim", 0) or hidden // n_heads

    n_experts = gi("num_local_experts", 0) or gi("num_experts", 0) or gi("n_routed_experts", 0)
    top_k = gi("num_experts_per_tok", 0) if n_experts else 0
    if n_experts and not 0 < top_k <= n_experts:
        raise InputError(path, f"num_experts_per_tok {top_k} not in 1..{n_experts}",
                         field=prefix + "num_experts_per_tok")
    inter = gi("intermediate_size", 0)
    moe_inter = shared_inter = n_shared = 0
    shared_gate = False
    if n_experts:
        if family == "mixtral":
            moe_inter = inter
        elif family == "llama4":
            moe_inter = inter
            n_shared, shared_inter = 1, inter
            inter = gi("intermediate_size_mlp", 0) or inter
        elif family == "qwen2_moe":
            moe_inter = gi("moe_intermediate_size")
            shared_inter = gi("shared_expert_intermediate_size", 0)
            n_shared, shared_gate = (1, True) if shared_inter else (0, False)
        else:  # qwen3_moe, deepseek, glm
            moe_inter = gi("moe_intermediate_size")
            n_shared = gi("n_shared_experts", 0)
            shared_inter = n_shared * moe_inter
    n_moe = _moe_layers(family, text, n_layers, n_experts)
    if not n_experts or n_moe == 0:
        n_experts = top_k = moe_inter = n_shared = shared_inter = 0
        shared_gate = False
    if (n_layers - n_moe) > 0 and inter <= 0:
        raise InputError(path, "missing dense MLP width", field=prefix + "intermediate_size",
                         expected="a positive integer")

    kv_lora = gi("kv_lora_rank", 0)
    mla = {}
    if kv_lora:
        mla = dict(kv_lora_rank=kv_lora, q_lora_rank=gi("q_lora_rank", 0),
                   qk_rope_head_dim=gi("qk_rope_head_dim"), qk_nope_head_dim=gi("qk_nope_head_dim"),
                   v_head_dim=gi("v_head_dim"), index_n_heads=gi("index_n_heads", 0),
                   index_head_dim=gi("index_head_dim", 0))
        head_dim = mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]

    dtype, bpw = _weight_dtype(path, config, text)
    unquantized_attention, unquantized_lm_head = _unquantized_modules(config, text) if bpw < UNQUANTIZED_BYTES \
        else (False, False)
    meta = config.get("_bayesblis") or {}
    attention_bias = bool(text.get("attention_bias", False))
    return ModelArch(
        name=name or meta.get("name") or str(config.get("_name_or_path") or model_type or family),
        family=family, architecture=(archs[0] if archs else model_type),
        n_layers=n_layers, hidden_size=hidden, n_heads=n_heads, n_kv_heads=n_kv,
        head_dim=head_dim, intermediate_size=inter, vocab_size=vocab,
        tie_word_embeddings=bool(text.get("tie_word_embeddings", config.get("tie_word_embeddings", False))),
        n_moe_layers=n_moe, moe_intermediate_size=moe_inter, n_experts=n_experts,
        n_experts_per_tok=top_k, n_shared_experts=n_shared,
        shared_expert_intermediate_size=shared_inter, shared_expert_gate=shared_gate,
        weight_dtype=dtype, bytes_per_weight=bpw, unquantized_attention=unquantized_attention,
        unquantized_lm_head=unquantized_lm_head,
        qkv_bias=family in ("qwen2", "qwen2_moe") or attention_bias, o_bias=attention_bias,
        qk_norm=family in ("qwen3", "qwen3_moe") or bool(text.get("use_qk_norm", False)),
        hf_id=str(meta.get("hf_id", config.get("_name_or_path", ""))), source=str(path), **mla)


def read_model_config(path, *, name: str | None = None) -> ModelArch:
    """Read a config.json (or a folder holding one) into a ModelArch."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    data = load_json_checked(path, expected="a HF config.json")
    if name is None and not (isinstance(data, Mapping) and data.get("_bayesblis")):
        name = path.parent.name if path.name == "config.json" else path.stem
    return model_from_config(data, name=name, path=path)


def _key(name: str) -> str:
    return "".join(ch for ch in str(name).lower() if ch.isalnum() or ch == ".")


def _name_variants(name: str):
    text = str(name).strip()
    yield text
    last = text.rsplit("/", 1)[-1]
    yield last
    for suffix in ("-hf", "-instruct", "-chat", "-base", "-v0.1"):
        if last.lower().endswith(suffix):
            last = last[: -len(suffix)]
            yield last


@lru_cache(maxsize=1)
def _catalog() -> tuple[dict[str, ModelArch], dict[str, str]]:
    models, index = {}, {}
    for path in sorted(CATALOG_DIR.glob("*.json")):
        data = load_json_checked(path, expected="a HF config.json")
        meta = data.get("_bayesblis") or {}
        model = model_from_config(data, name=meta.get("name", path.stem), path=path)
        models[model.name] = model
        for alias in (model.name, path.stem, meta.get("hf_id", ""), *meta.get("aliases", [])):
            if alias:
                index[_key(alias)] = model.name
    return models, index


def list_models() -> list[str]:
    """Names of the built-in model presets."""
    return sorted(_catalog()[0])


CONFIG_JSON_HINT = (
    "For another model pass its Hugging Face config.json (the file or its folder) where the model is "
    "named: `coefficients --model PATH`, `model: PATH` in a scenario YAML (simulate, plan), or "
    "`model: PATH` in a deployment.yaml beside the traces, then re-ingest (fit)")
"""How to use a model outside the catalog (part of every unknown-model error)."""


def load_model(name_or_path) -> ModelArch:
    """A ModelArch from a config.json path, a folder with one, or a catalog name/HF id."""
    if isinstance(name_or_path, ModelArch):
        return name_or_path
    text = str(name_or_path)
    path = Path(text)
    if path.is_file() or (path.is_dir() and (path / "config.json").is_file()) or text.endswith(".json"):
        return read_model_config(path)
    models, index = _catalog()
    for variant in _name_variants(text):
        hit = index.get(_key(variant))
        if hit:
            return models[hit]
    raise UnknownArchitectureError(
        f"unknown model '{text}': not a catalog name and not a config.json path. Known presets: "
        f"{', '.join(sorted(models))}. {CONFIG_JSON_HINT}")
