"""bayesblis's step and request model projected onto BLIS's trained-physics basis.

BLIS's `trained-physics` latency model prices a step as beta . basis(batch) with its own
basis functions (`sim/latency/trained_physics_model.go`, computed here term by term as
BLIS computes them: `trained_physics_basis`). bayesblis prices the same step on a
different basis (compute beyond the memory time, TP over the interconnect, a per KV token
per layer term, ...), so copying coefficients slot by slot (`blis_export.slot_mapping`)
makes BLIS 19-60% slower. Here the BLIS coefficients are instead fitted, by non-negative
least squares on relative step-time errors, to the step times bayesblis gives the batches
a workload actually produces (bayesblis's own simulator run on the scenario, no noise):

- beta3 (weight loading) reproduces bayesblis's weight streaming time; beta5 and beta8
  (per layer, per MoE layer) are 0 and the per-step constant beta7 takes the rest of
  the constant time; beta1a/1b/2a/2b, beta4 and beta6 are fitted; beta_EP = beta4.
- alpha0 (arrival to queue) = bayesblis's API delay (const + per prompt token at the
  workload's mean prompt) + the API return of the first token behind the requests decoding
  then (mean) + the async-scheduling wait BLIS does not model (the mean extra wait of the
  run's requests for the step after next) - alpha2 (BLIS adds alpha2 to the first token);
  alpha1 (post decode) = alpha2 + the mean change of the return delay from first token to
  finish; alpha2 = bayesblis's per output token.

The error is stated with the export (`Projection.comments`): the RMS and worst relative
step-time error over the run's steps and the bias of their sum.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

BLIS_BASIS = ("T_pf_compute", "T_dc_compute", "T_weight", "T_tp", "L", "B", "one", "nMoE_interleaved",
              "T_pf_kv", "T_dc_kv", "T_moe_dispatch")
"""Basis functions in BLIS `beta_coeffs` order (features.beta.BLIS_BETA_ORDER), µs (L, B,
one and nMoE are counts)."""

_DTYPE_BYTES = {"float32": 4.0, "float": 4.0, "bfloat16": 2.0, "float16": 2.0, "half": 2.0,
                "fp8": 1.0, "float8_e4m3fn": 1.0, "int8": 1.0}


@dataclass(frozen=True)
class BlisShape:
    """What BLIS's trained-physics model reads of a model, hardware and TP (dp = 1)."""

    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    intermediate: int
    moe_intermediate: int
    n_experts: int
    experts_per_tok: int
    bytes_per_param: float
    weight_bytes_per_param: float
    tp: int
    tflops_peak: float
    bw_peak_tbs: float
    tflops_fp8: float = 0.0

    @property
    def is_moe(self) -> bool:
        return self.n_experts >= 2   # sim.MoEMinExperts

    @classmethod
    def from_hf_config(cls, config_json, hardware_config_json, gpu: str, tp: int) -> "BlisShape":
        """From the config.json and hardware_config.json BLIS itself reads."""
        c = json.loads(Path(config_json).read_text())
        hw = json.loads(Path(hardware_config_json).read_text())[gpu]
        bpp = _DTYPE_BYTES.get(str(c.get("torch_dtype", c.get("dtype", "bfloat16"))), 2.0)
        n_exp = int(c.get("num_local_experts") or c.get("num_experts") or 0)
        inter = int(c["intermediate_size"])
        return cls(n_layers=int(c["num_hidden_layers"]), hidden=int(c["hidden_size"]),
                   n_heads=int(c["num_attention_heads"]),
                   n_kv_heads=int(c.get("num_key_value_heads") or c["num_attention_heads"]),
                   intermediate=inter, moe_intermediate=int(c.get("moe_intermediate_size") or inter),
                   n_experts=n_exp, experts_per_tok=int(c.get("num_experts_per_tok") or 0),
                   bytes_per_param=bpp, weight_bytes_per_param=bpp, tp=int(tp),
                   tflops_peak=float(hw["TFlopsPeak"]), bw_peak_tbs=float(hw["BwPeakTBs"]),
                   tflops_fp8=float(hw.get("TFlopsFP8", 0.0)))

    @classmethod
    def from_deployment(cls, deployment) -> "BlisShape":
        """From bayesblis's catalog (the model's config.json values, the GPU's datasheet)."""
        m, g = deployment.model, deployment.gpu
        bpp = float(m.bytes_per_weight)
        return cls(n_layers=m.n_layers, hidden=m.hidden_size, n_heads=m.n_heads,
                   n_kv_heads=m.n_kv_heads or m.n_heads, intermediate=m.intermediate_size,
                   moe_intermediate=m.moe_intermediate_size or m.intermediate_size,
                   n_experts=m.n_experts, experts_per_tok=m.n_experts_per_tok,
                   bytes_per_param=bpp, weight_bytes_per_param=bpp, tp=deployment.tp,
                   tflops_peak=g.peak_flops_per_s.get("bf16", 0.0) / 1e12,
                   bw_peak_tbs=g.hbm_bandwidth_bytes_per_s / 1e12,
                   tflops_fp8=g.peak_flops_per_s.get("fp8", 0.0) / 1e12)


@dataclass
class Batches:
    """Per-step batch sums BLIS's basis needs (arrays, one entry per step): prefill tokens
    P, sum over prefill chunks of t (s + t/2) with s the request's whole prompt (BLIS's
    attention count), decodes D, their summed ProgressIndex (context), and the batch size."""

    prefill_tokens: np.ndarray
    prefill_attention: np.ndarray
    decodes: np.ndarray
    decode_context: np.ndarray
    batch_size: np.ndarray


def batches_from_run(run, workload) -> Batches:
    """`Batches` of a recorded `simulate.engine.EngineRun` (record=True): a request is in
    prefill while its computed tokens are below its prompt, as BLIS classifies it."""
    from bayesblis.simulate.engine import ENTRY_COLS

    st = run.steps
    step_ids = st.step_col("step_id")
    n = len(step_ids)
    e = st.entries
    col = {c: i for i, c in enumerate(ENTRY_COLS)}
    k = e[:, col["scheduled_tokens"]].astype(float)
    live = k > 0
    e, k = e[live], k[live]
    row = np.searchsorted(step_ids, e[:, col["step_id"]])
    prompt = workload.prompt_tokens[e[:, col["request"]]].astype(float)
    before = e[:, col["computed_before"]].astype(float)
    pre = before < prompt
    out = Batches(*(np.zeros(n) for _ in range(5)))
    np.add.at(out.prefill_tokens, row[pre], k[pre])
    np.add.at(out.prefill_attention, row[pre], k[pre] * (prompt[pre] + k[pre] / 2))
    np.add.at(out.decodes, row[~pre], 1.0)
    np.add.at(out.decode_context, row[~pre], before[~pre])
    np.add.at(out.batch_size, row, 1.0)
    return out


def trained_physics_basis(shape: BlisShape, b: Batches) -> np.ndarray:
    """[n_steps, 11] BLIS basis values in beta_coeffs order, as TrainedPhysicsModel.StepTime
    computes them (dp = 1, BalancedPlacement, no shared experts, no interleaved MoE)."""
    s = shape
    L, d, tp = float(s.n_layers), float(s.hidden), float(s.tp)
    dh = d / s.n_heads
    dkv = s.n_kv_heads * dh
    h_gpu = s.n_heads / tp
    n_moe = s.n_layers if s.is_moe else 0
    n_dense = s.n_layers - n_moe
    k_eff = float(max(1, s.experts_per_tok))
    group = tp                      # EffectiveMoEGroupSize = TP x DP, dp = 1
    flops = s.tflops_peak * 1e6
    if s.weight_bytes_per_param == 1.0 and s.tflops_fp8 > 0:
        flops = s.tflops_fp8 * 1e6
    bw = s.bw_peak_tbs * 1e6
    P, attn, D, ctx, B = (np.asarray(x, float) for x in (b.prefill_tokens, b.prefill_attention,
                                                         b.decodes, b.decode_context, b.batch_size))

    def ffn(tokens):
        f = np.zeros_like(tokens)
        if n_moe:
            f += n_moe * (tokens * k_eff / group) * 6 * d * s.moe_intermediate
        if n_dense:
            f += n_dense * tokens * 6 * d * s.intermediate / tp
        return f

    proj = lambda tokens: L * 2 * tokens * d * (2 * d + 2 * dkv) / tp  # noqa: E731
    t_pf = np.where(P > 0, (proj(P) + L * 4 * h_gpu * attn * dh + ffn(P)) / flops, 0.0)
    t_pf_kv = np.where(P > 0, L * 2 * (dkv / tp) * P * 2.0 / bw, 0.0)
    t_dc = np.where(D > 0, (proj(D) + L * 4 * h_gpu * ctx * dh + ffn(D)) / flops, 0.0)
    t_dc_kv = np.where(D > 0, L * 2 * (dkv / tp) * 2.0 * (ctx + D) / bw, 0.0)
    bpp = s.weight_bytes_per_param
    weight = L * d * (2 * d + 2 * dkv) * bpp / tp
    if n_moe:
        weight += n_moe * (s.n_experts / group) * 3 * d * s.moe_intermediate * bpp
    if n_dense:
        weight += n_dense * 3 * d * s.intermediate * bpp / tp
    t_w = np.full_like(P, weight / bw)
    T = P + D
    if s.tp > 1:
        v = lambda units: units * T * d * s.bytes_per_param * 2.0 * (tp - 1) / tp / bw  # noqa: E731
        t_tp = v(L) + v(n_dense) + (v(n_moe) if n_moe else 0.0)
    else:
        t_tp = np.zeros_like(P)
    ones = np.ones_like(P)
    return np.column_stack([t_pf, t_dc, t_w, t_tp, L * ones, B, ones, 0.0 * ones,
                            t_pf_kv, t_dc_kv, np.zeros_like(P)])


@dataclass
class Projection:
    alpha: list          # BLIS alpha_coeffs [3]
    beta: list           # BLIS beta_coeffs [11]
    step_rms_rel: float  # RMS relative step-time error over the run's steps
    step_max_rel: float  # worst relative step-time error
    busy_bias_rel: float  # (sum of BLIS step times) / (sum of bayesblis's) - 1
    async_wait_us: float  # mean extra wait for the step after next (in alpha0)
    n_steps: int

    def comments(self) -> list[str]:
        return [f"projection of bayesblis's step model onto BLIS's basis over {self.n_steps} "
                f"steps of the scenario: step time RMS error {self.step_rms_rel:.1%}, worst "
                f"{self.step_max_rel:.1%}, busy time {self.busy_bias_rel:+.2%}",
                f"alpha0 includes the mean async-scheduling wait ({self.async_wait_us:.0f} us) "
                "and the API return of the first token; BLIS applies them to every request alike"]


def project(shape: BlisShape, deployment, beta, alpha_us, run, workload) -> Projection:
    """Fit BLIS's coefficients to one bayesblis coefficient set over the steps of `run`
    (a noise-free recorded run of `workload` with these coefficients)."""
    from scipy.optimize import nnls

    from bayesblis.features.alpha import decoding_at
    from bayesblis.features.beta import BETA_FEATURES, feature_weights

    beta = np.asarray(beta, float)
    a = np.asarray(alpha_us, float)
    feats = feature_weights(deployment).apply(run.steps.aggregates)
    y = feats @ beta * 1e6                                          # µs
    basis = trained_physics_basis(shape, batches_from_run(run, workload))
    iw = BETA_FEATURES.index("weight_traffic_s")
    beta3 = float(np.mean(feats[:, iw] * beta[iw] * 1e6) / basis[0, 2])
    fit_cols = [0, 1, 3, 5, 6, 8, 9]          # 1a, 2a, 4, 6, 7, 1b, 2b
    if shape.tp <= 1:
        fit_cols.remove(3)
    w = 1.0 / np.maximum(y, 1.0)
    target = (y - beta3 * basis[:, 2]) * w
    X = basis[:, fit_cols] * w[:, None]
    scale = np.maximum(np.abs(X).max(0), 1e-30)
    coef, _ = nnls(X / scale, target, maxiter=50 * len(fit_cols))
    coef = coef / scale
    blis_beta = np.zeros(11)
    blis_beta[2] = beta3
    blis_beta[fit_cols] = coef
    blis_beta[10] = blis_beta[3]
    pred = basis @ blis_beta
    rel = pred / y - 1
    ok = run.status == 0
    first, fin = run.first_token_s[ok], run.finish_s[ok]
    dec_first = decoding_at(run.first_token_s, run.finish_s, first)
    dec_fin = decoding_at(run.first_token_s, run.finish_s, fin)
    starts = run.steps.start_s
    nxt = starts[np.minimum(np.searchsorted(starts, run.queued_s[ok]), len(starts) - 1)]
    wait = np.maximum(run.scheduled_s[ok] - np.maximum(nxt, run.queued_s[ok]), 0.0) * 1e6
    mean_prompt = float(np.mean(workload.prompt_tokens[ok]))
    alpha0 = a[0] + a[1] * mean_prompt + a[3] * float(np.mean(dec_first)) + float(np.mean(wait)) - a[2]
    alpha1 = a[2] + a[3] * float(np.mean(dec_fin - dec_first))
    return Projection(alpha=[max(alpha0, 0.0), max(alpha1, 0.0), float(a[2])],
                      beta=[float(v) for v in blis_beta],
                      step_rms_rel=float(np.sqrt(np.mean(rel ** 2))),
                      step_max_rel=float(np.max(np.abs(rel))),
                      busy_bias_rel=float(pred.sum() / y.sum() - 1),
                      async_wait_us=float(np.mean(wait)), n_steps=int(len(y)))


def projection_mapping(scenario, engine_config, *, seed: int = 0, max_duration_s=None,
                       shape: BlisShape | None = None):
    """A `blis_export.write_trained_physics_files` mapping: each coefficient set is
    projected over its own noise-free run of `scenario` (bayesblis's simulator)."""
    from bayesblis.simulate.engine import deployment_constants, run_engine

    w = scenario.build_workload(max_duration_s)

    def mapping(deployment, beta, alpha):
        run = run_engine(w, engine_config, deployment_constants(deployment), beta, alpha,
                         seed=seed, record=True)
        p = project(shape or BlisShape.from_deployment(deployment), deployment, beta, alpha, run, w)
        return p.alpha, p.beta, p.comments()

    return mapping
