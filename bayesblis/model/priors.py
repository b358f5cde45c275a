"""Default priors: readable, overridable, centred on published calibrations.

Every coefficient is positive: ``coef = floor + exp(theta)`` with ``theta`` normal and
``floor`` 0 unless the prior sets one (`floor_of`). A prior is given on the natural scale
as a *median* and a *log-scale sd* (``log_sd``) of the part above the floor: the 90% prior
interval is ``floor + (median - floor) * exp(±1.645 * log_sd)``. Override any entry with a
dict of the same shape, e.g. ``{"beta": {"weight_traffic_s": {"median": 1.1, "log_sd": 0.3}}}``.

Physical floors: the compute coefficients multiply the FLOP time at datasheet peak beyond
the memory roofline (features/beta.py), TP all-reduce the bytes over the datasheet link
bandwidth; below 1 they would claim a GPU (or link) faster than its datasheet, so ``floor:
1`` puts no prior mass there (and no posterior mass either). Weight and KV traffic are not
floored: streaming reaches ~100% of the HBM figure (H100 profiles: 1.00), and a log-normal
excess over a floor of 1 would push them away from where they are; and both sit in
proportional groups (`PROPORTIONAL_GROUPS`) whose per-configuration scaling multiplies the
whole coefficient, so a floor would not hold per configuration without re-parameterising
the groups. The bound report flags them when a fit puts them below 1 (or above 5).

Where the centres come from (see data_specs/features.md):

- compute: vLLM's measured GEMMs at prefill sizes (kernel-db, H100 bf16: 1.265x the FLOP
  time) with norms and activations on top (1.35; model versions up to 12 took 2.0 from
  the BLIS hardware table's prefill MFU 0.45);
- weight traffic ~1.0-1.4 (decode streams weights at about peak HBM bandwidth);
- KV traffic ~1.3-1.5; TP all-reduce ~1.2 (operator profiles, H100 NVLink; published
  trained-physics: 0.75-1.95);
- overheads in µs: per layer ~30, per request ~4, per step ~100 (trained-physics:
  32.1, 4.42, 126.0);
- sampling ~1 (vLLM's sampler at its published timings, catalog/sampler_prices.py);
- alpha: arrival->queue a few ms, per output token tens of µs (trained-physics 45.9).
"""

from __future__ import annotations

import copy

import numpy as np

EFFICIENCY = ("arch", "hardware", "family", "config")
MACHINE = ("arch", "hardware", "family")
SOFTWARE = ("hardware",)

BETA_PRIORS = {
    # 1/MFU of the FLOP time beyond the memory roofline; floored at the datasheet peak.
    # Centred on vLLM's measured kernels (model version 13): kernel-db times H100 bf16
    # GEMMs at prefill sizes at 1.265x their FLOP time (prefill attention carries its own
    # factor in the features), and norms, rotary and activations add about 7% of the
    # GEMMs' time; the shared traces barely measure prefill (prefix-cache hits), so this
    # prior is what a fresh prompt's price rests on. 90% [1.11, 2.11].
    "prefill_compute_s": {"median": 1.35, "log_sd": 0.7, "floor": 1.0, "levels": EFFICIENCY},
    # Tied to prefill compute in every fit (TIED_BETA, below): this entry only keeps the
    # coefficient's own (uninformed) parameters well defined.
    "decode_compute_s": {"median": 1.35, "log_sd": 0.7, "floor": 1.0, "levels": MACHINE},
    "weight_traffic_s": {"median": 1.15, "log_sd": 0.5, "levels": MACHINE},
    # No configuration level of its own: a configuration's KV cost per token deviates as
    # one group with kv_token_layer_s (PROPORTIONAL_GROUPS["kv"]).
    "kv_traffic_s": {"median": 1.4, "log_sd": 0.8, "levels": MACHINE},
    # A fixed cost per (KV token, layer) of paged decode attention whatever the bytes
    # (block-table lookups, softmax and split-KV bookkeeping): small against the bytes of
    # an MHA model's KV (16 KB per token-layer for Llama-2-7B), comparable for GQA shards
    # of 1-2 KB per token-layer per GPU. One value per GPU (a kernel property).
    "kv_token_layer_s": {"median": 0.2, "log_sd": 1.2, "levels": SOFTWARE},
    # TP all-reduce grows with the tokens of the step, like the linear part of compute:
    # one configuration's data barely separate them, so no per-configuration effect.
    # On a GPU kernel-db measured, the feature is vLLM's own all-reduce time (model version
    # 8) and the floor says serving is no faster than that kernel; elsewhere it is bytes over
    # the datasheet link bandwidth, floored at it (below 1 a link faster than its
    # datasheet). Centred on the operator profiles' 1.20 (H100 NVLink, NCCL; A100
    # 1.78). Unfloored, fits of the shared runs put it at ~0.22 (4.5x the link), and the
    # floor makes held-out predictions better: by model E2E 5.6 / 3.5% -> 3.7 / 3.1%
    # (seeds 1 / 2), overloaded stages 13.2 / 15.2% -> 9.6 / 7.3% (docs/history.md,
    # model version 5; earlier, scored on 30 draws and without the GEMV factor, it looked
    # worse). One value per GPU (the interconnect and NCCL, like tp_sync_s): with family
    # and dense/MoE effects a model alone in its family at TP > 1 priced its per-token
    # cost with its own compute effect or its own all-reduce effect, a curved ridge that
    # kept the demo's fit from converging (docs/sampler.md, model versions 3-7).
    "tp_comm_s": {"median": 1.2, "log_sd": 0.8, "floor": 1.0, "levels": SOFTWARE},
    # All-reduce latency per exchange round (2 all-reduces per layer, log2(tp) rounds each):
    # small messages of decode are latency-bound, so the bandwidth feature above misses it.
    # NVLink all-reduce of a few KB takes ~5-20 µs; one value per GPU (interconnect). 0 where
    # the measured all-reduce (latency included) prices tp_comm_s: there only the prior speaks.
    "tp_sync_s": {"median": 8.0, "log_sd": 0.8, "levels": SOFTWARE},
    "ep_comm_s": {"median": 1.0, "log_sd": 1.0, "levels": MACHINE},
    "offload_s": {"median": 1.0, "log_sd": 0.8, "levels": MACHINE},
    # Per-step constants (per layer, per step) are confounded with weight traffic inside a
    # configuration: their priors carry the published calibration (32.1, 4.42, 126.0 µs),
    # the per-layer one less the four dense GEMMs' fixed time (gemm_fixed_s, 4 x 3.35 µs on
    # H100; model version 17).
    "layer_overhead_s": {"median": 17.0, "log_sd": 0.5, "levels": SOFTWARE},
    # Per request: within a configuration nearly collinear with decode compute (both grow
    # with the number of decode requests), so its prior is kept tight around the
    # calibration (4.42 µs) and decode compute takes the rest.
    "request_overhead_s": {"median": 4.0, "log_sd": 0.3, "levels": SOFTWARE},
    "step_overhead_s": {"median": 100.0, "log_sd": 0.5, "levels": SOFTWARE},
    # vLLM's sampler per step, priced from its published kernel timings
    # (catalog/sampler_prices.py: the top-p sort on H100 at 1-4 rows as a power of the rows,
    # its chord over 8-64 rows); B200's timings at 64-128 rows put the per-request part 1.5x
    # higher. The traces sample 32k vocabularies (Llama-2-7B with top-p), where the sort is
    # about 0.19 ms a step and 7 µs a request on H100; 90% prior [0.85, 1.18]. One value per
    # GPU (a kernel's efficiency).
    "sampling_s": {"median": 1.0, "log_sd": 0.1, "levels": SOFTWARE},
    # The dense GEMMs' fixed kernel time per step, as kernel-db measures it on the GPU
    # (catalog/kernel_prices.py `gemm_fixed_us`: H100 bf16 3.35 µs a GEMM, A100 5.1, L40S
    # 2.8, H100 FP8 12.4); weight traffic prices only the time beyond it. 90% prior [0.85,
    # 1.18]. One value per GPU (a kernel's launch and set-up).
    "gemm_fixed_s": {"median": 1.0, "log_sd": 0.1, "levels": SOFTWARE},
}
"""`levels`: the pooling levels whose effects the coefficient gets. Per-configuration
effects only where the data of one configuration can identify them, i.e. on features
that vary from step to step: within a dense configuration weight traffic, per-layer and
per-step overheads are all constant per step, so they are pooled across configurations
(which differ in weight bytes and layer counts) and get no per-configuration effect."""

ALPHA_PRIORS = {
    # Client-side windows alone cannot split these from the step times they sit next to:
    # a TTFT is alpha_const + the prefill step, and prompts of one workload have nearly one
    # length; a decode window holds (out - 1) steps and out per-token delays. Left wide,
    # chains of a real-trace fit settled on either side of those ridges (alpha_output
    # 48 µs in one chain, 1.2-4 ms in the other: r_hat 2.2). So the priors hold them near
    # the published calibration (a few ms; 45.9 µs) and the step times take the rest.
    "alpha_const_s": {"median": 3000.0, "log_sd": 0.7, "levels": ("hardware", "config")},
    # Per prompt token on the API server (tokenization and input processing): a fast
    # tokenizer on one core runs about 1-5 M tokens/s, 0.2-1 µs a token; 90% prior
    # [0.16, 1.6] µs. Prompts of one workload have nearly one length, so the constant
    # above and this slope form a ridge; at log_sd 1.5 ([0.04, 5.9] µs) the quick tour's
    # slowest direction was this pair (docs/sampler.md, model version 3).
    "alpha_prompt_s": {"median": 0.5, "log_sd": 0.7, "levels": ("hardware",)},
    # Per output token (detokenization, streaming): a client decode window holds n steps
    # and n of these delays, so inside a configuration it is exactly proportional to the
    # per-step constants (PROPORTIONAL_GROUPS["step_const"]); only OTEL post-decode
    # windows measure it alone. Held near the published calibration (45.9 µs; 90% prior
    # [22, 71] µs): at log_sd 0.5 quick-tour chains wandered along that ridge to 130-200
    # µs (the population level) and diverged there. One value per GPU only fixed that too,
    # but cannot follow a model's own cost that OTEL traces measure (demo: 46.8 [46.2,
    # 47.5] µs against 36.7 true for the held-out configuration), so it keeps its levels.
    "alpha_output_s": {"median": 40.0, "log_sd": 0.35, "levels": ("hardware", "config")},
    # Per request decoding when a token is returned (features.alpha.ALPHA_FEATURES): the API
    # server detokenizes and streams one output per running request each step, in Python,
    # some 10-50 µs each; 90% prior [3.9, 100] µs. A property of the serving host and the
    # vLLM version, not of the model: one value per GPU.
    "alpha_frontend_s": {"median": 20.0, "log_sd": 1.0, "levels": ("hardware",)},
}

TIED_BETA = {"decode_compute_s": "prefill_compute_s"}
"""Coefficients that equal another one: a step runs its prefill and decode tokens through the
same GEMMs, so the FLOP time beyond the memory roofline has one efficiency; the split of
that excess between the two features (by their FLOPs, features/beta.py) is otherwise a
ridge. The tied coefficient keeps its own prior and effects, which no data then inform."""


def tied_pairs(features) -> list[tuple[int, int]]:
    """(tied column, source column) of TIED_BETA among `features` (both present)."""
    index = {f: i for i, f in enumerate(features)}
    return [(index[t], index[s]) for t, s in TIED_BETA.items() if t in index and s in index]


def tie_columns(coef, features):
    """`coef` [..., len(features)] (numpy or pytensor) with each tied column replaced by its
    source column (TIED_BETA); a numpy input is copied, not changed."""
    pairs = tied_pairs(features)
    if not pairs:
        return coef
    tied, source = ([pair[i] for pair in pairs] for i in (0, 1))
    if isinstance(coef, np.ndarray):
        coef = coef.copy()
        coef[..., tied] = coef[..., source]
        return coef
    import pytensor.tensor as pt

    return pt.set_subtensor(coef[..., tied], coef[..., source])


STEP_CONSTANT_FEATURES = ("weight_traffic_s", "tp_sync_s", "layer_overhead_s", "step_overhead_s",
                          "gemm_fixed_s")
"""Beta features paid once per step whatever the batch (weight streaming of a dense model,
all-reduce latency, per-layer launches, per-step scheduling)."""

KV_FEATURES = ("kv_traffic_s", "kv_token_layer_s")
"""Beta features paid per KV token in context: bytes over bandwidth, and a fixed cost per
token and layer. Both are the same aggregate times a per-configuration constant."""

PROPORTIONAL_GROUPS = {"step_const": STEP_CONSTANT_FEATURES, "kv": KV_FEATURES}
"""Beta features that are exactly proportional to one another inside a configuration.
One configuration's data fix only their weighted *sum*; the split is a ridge (on real
client windows, chains settled on either side of the KV one: kv_token_layer 4x apart,
r_hat 1.7). The model therefore gives each configuration one centred log sum per group,
``L[c] ~ Normal(log P[c], tau_<group>)`` around the sum ``P[c]`` the population
coefficients predict (model/hierarchy.py), and the split is learnt from how the sums vary
across configurations. ``L[c]`` is also the configuration's own deviation: the group's
features get no configuration level."""

SHEARED_GROUPS = {"kv": "request_overhead_s"}
"""Proportional group -> the coefficient its per-configuration log sum trades against.
Decode requests and their KV tokens grow together, so a configuration's data fix the sum of
the per-request and KV costs: a higher per-request cost means a lower KV sum in every
configuration (posterior correlation -0.82 to -0.97, the quick tour's slowest direction).
The group's log sum is sampled sheared along that line (`LatencyModel._proportional_groups`):
the same distribution, in coordinates where the two are less correlated (-0.61 to -0.84)."""

HYPER_PRIORS = {
    # HalfNormal scales of the level effects on the log scale, per coefficient.
    "tau_arch": 0.3,
    "tau_hardware": 0.3,
    "tau_family": 0.3,
    # Scales of centred effects: configuration effects (the median of a log-normal prior,
    # model/hierarchy.py CONFIG_SCALE_LOG_SD; fixed below 5 configurations), and the spread
    # of a configuration's sum of each PROPORTIONAL_GROUPS group (per-step constant; KV
    # cost per token) around its physics sum (always fixed).
    "tau_config": 0.15,
    "tau_step_const": 0.15,
    "tau_kv": 0.15,
    # Relative (multiplicative) noise of one step time, per configuration.
    "sigma_step": 0.3,
    # Relative error of a window that does not shrink with its length, per
    # observation kind (reconstruction error of the batch timeline, clock offsets).
    "sigma_kind": 0.1,
    # Run-to-run (experiment) multiplicative spread of all durations, log scale.
    "tau_run": 0.05,
    # Student-t degrees of freedom: nu = 2 + Exponential(mean nu_excess_mean).
    "nu_excess_mean": 15.0,
}


def floor_of(prior: dict) -> float:
    """The physical floor of a coefficient (0 unless its prior sets ``floor``)."""
    return float(prior.get("floor", 0.0))


def floors(section: dict, features) -> np.ndarray:
    """Floors [len(features)] of the named coefficients of one prior section."""
    return np.array([floor_of(section.get(f, {})) for f in features], float)


def log_excess_median(prior: dict) -> float:
    """log(median - floor): the prior centre of theta (an error unless median > floor)."""
    floor = floor_of(prior)
    if not prior["median"] > floor:
        raise ValueError(f"prior median {prior['median']} must exceed its floor {floor}")
    return float(np.log(prior["median"] - floor))


def default_priors() -> dict:
    """A fresh, mutable copy of every default prior."""
    return {"beta": copy.deepcopy(BETA_PRIORS), "alpha": copy.deepcopy(ALPHA_PRIORS),
            "hyper": copy.deepcopy(HYPER_PRIORS)}


def merge_priors(overrides: dict | None) -> dict:
    """Default priors with `overrides` merged in (unknown keys are an error)."""
    priors = default_priors()
    for section, entries in (overrides or {}).items():
        if section not in priors:
            raise KeyError(f"unknown prior section '{section}' (known: {sorted(priors)})")
        for name, value in entries.items():
            if name not in priors[section]:
                raise KeyError(f"unknown prior '{section}.{name}' "
                               f"(known: {sorted(priors[section])})")
            if isinstance(value, dict):
                priors[section][name].update(value)
            else:
                priors[section][name] = value
    return priors
