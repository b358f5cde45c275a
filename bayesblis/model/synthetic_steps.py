"""Synthetic step observations drawn from a known hierarchy (tests and benchmarks).

Each configuration (hardware x model family x TP) gets true coefficients
``beta = floor + exp(log(prior median - floor) + u_hardware + u_family + e_config)`` (the
model's own form: the floor is 1 for the compute coefficients, 0 else; level effects with
log-scale sd 0.15, configuration effects with sd 0.05; decode compute equal to prefill
compute, as in the model: `priors.TIED_BETA`) and ``n_obs`` engine steps whose
beta features (in seconds of physics-predicted time, see data_specs/features.md) are:

- ``prefill_compute_s``: Exponential(mean 5 ms) in half the steps, else 0;
- ``decode_compute_s``: Uniform(0.1, 1) ms; ``kv_traffic_s``: Uniform(0.1, 3) ms;
- ``weight_traffic_s``: one value per configuration, Uniform(2, 4) ms / TP;
- ``tp_comm_s``: Uniform(0.1, 1) ms when TP > 1; ``ep_comm_s``, ``offload_s``: 0;
- overheads in µs counts: layers of the family, 1-63 requests, 1 step.

A step's duration is ``y_s = |X . beta (1 + noise_rel t_5)|`` (Student-t with 5 degrees
of freedom, relative scale ``noise_rel``), observed as kind ``step`` with ``n_steps = 1``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bayesblis.model.data import ModelData, config_key
from bayesblis.model.priors import BETA_PRIORS, PROPORTIONAL_GROUPS, floors, tie_columns

FEATURES = ["prefill_compute_s", "decode_compute_s", "weight_traffic_s", "kv_traffic_s",
            "tp_comm_s", "ep_comm_s", "offload_s", "layer_overhead_s", "request_overhead_s",
            "step_overhead_s"]
"""Beta feature names, in the column order of the generated observation table: every
BETA_PRIORS feature but two added after this generator's truths were published:
``kv_token_layer_s`` (proportional to ``kv_traffic_s`` inside a configuration) and
``tp_sync_s`` (one more per-step constant)."""
_COL = {name: j for j, name in enumerate(FEATURES)}

MODEL_LEVELS = {level: np.array([level in BETA_PRIORS[f]["levels"] for f in FEATURES], float)
                for level in ("hardware", "family", "config")}
"""Per level, 1 for the features whose prior pools over it (the model's structure)."""
GROUP_MEMBERS = [[_COL[f] for f in members if f in _COL] for members in PROPORTIONAL_GROUPS.values()]
"""Column indices of each proportional group: one log deviation per configuration."""

LAYERS = {"llama": 32, "qwen3": 40, "mixtral": 32, "qwen3_moe": 48}
"""Layer count per model family (the per-layer overhead feature)."""

FLEET_HARDWARE = ("H100-SXM", "A100-SXM-80GB", "L40S")
FLEET_FAMILIES = (("llama", "dense"), ("qwen3", "dense"), ("mixtral", "moe"),
                  ("qwen3_moe", "moe"))
FLEET_TPS = (1, 2)
"""The benchmark fleet: 3 GPUs x 4 families (2 dense, 2 MoE) x TP 1/2 = 24 configurations."""


def synthetic_data(hardware=("H100-SXM", "A100-SXM-80GB"),
                   families=(("llama", "dense"), ("qwen3", "dense"), ("mixtral", "moe")),
                   tps=(1, 2), n_obs=40, noise=0.05, seed=0, match_model=False):
    """(ModelData, {config: true beta vector}) with `n_obs` step observations per
    configuration (see module docstring; `noise` is the relative step noise scale).

    ``match_model=True``: the truths follow the model's own pooling (`MODEL_LEVELS`) instead
    of giving every coefficient a hardware, family and configuration effect."""
    rng = np.random.default_rng(seed)
    floor = floors(BETA_PRIORS, FEATURES)
    mu = np.log([BETA_PRIORS[f]["median"] for f in FEATURES] - floor)
    mask = MODEL_LEVELS if match_model else {level: np.ones(len(FEATURES)) for level in MODEL_LEVELS}
    u_hw = {h: rng.normal(0, 0.15, len(FEATURES)) * mask["hardware"] for h in hardware}
    u_fam = {f: rng.normal(0, 0.15, len(FEATURES)) * mask["family"] for f, _ in families}
    rows, obs, truth = [], [], {}
    for h in hardware:
        for fam, arch in families:
            for tp in tps:
                key = config_key(f"{fam}-m", h, tp)
                rows.append(dict(config=key, model=f"{fam}-m", model_family=fam, arch=arch,
                                 hardware=h, tp=tp, ep=1, dtype="bf16"))
                own = rng.normal(0, 0.05, len(FEATURES)) * mask["config"]
                if match_model:  # a proportional group's members deviate together
                    for members in GROUP_MEMBERS:
                        own[members] = rng.normal(0, 0.05)
                beta = tie_columns(floor + np.exp(mu + u_hw[h] + u_fam[fam] + own), FEATURES)
                truth[key] = beta
                X = _step_features(rng, n_obs, tp, LAYERS[fam])
                y = X @ beta * (1 + noise * rng.standard_t(5, n_obs))
                frame = pd.DataFrame(X, columns=[f"f_{f}" for f in FEATURES])
                frame["y_s"] = np.abs(y)
                frame["n_steps"] = 1
                frame["kind"] = "step"
                frame["config"] = key
                obs.append(frame)
    return ModelData(pd.DataFrame(rows), pd.concat(obs, ignore_index=True)), truth


def _step_features(rng, n_obs: int, tp: int, n_layers: int) -> np.ndarray:
    """[n_obs, feature] beta features of `n_obs` steps of one configuration."""
    X = np.zeros((n_obs, len(FEATURES)))
    c = _COL
    X[:, c["prefill_compute_s"]] = rng.exponential(5e-3, n_obs) * (rng.random(n_obs) < 0.5)
    X[:, c["decode_compute_s"]] = rng.uniform(1e-4, 1e-3, n_obs)
    X[:, c["weight_traffic_s"]] = rng.uniform(2e-3, 4e-3) / tp
    X[:, c["kv_traffic_s"]] = rng.uniform(1e-4, 3e-3, n_obs)
    X[:, c["tp_comm_s"]] = (tp > 1) * rng.uniform(1e-4, 1e-3, n_obs)
    X[:, c["layer_overhead_s"]] = n_layers * 1e-6
    X[:, c["request_overhead_s"]] = rng.integers(1, 64, n_obs) * 1e-6
    X[:, c["step_overhead_s"]] = 1e-6
    return X


def synthetic_fleet(n_obs_total: int, noise: float = 0.05, seed: int = 0, match_model: bool = False):
    """(ModelData, truth) of the 24-configuration benchmark fleet with about
    `n_obs_total` step observations in all (split evenly across configurations;
    `match_model`: see `synthetic_data`)."""
    n_configs = len(FLEET_HARDWARE) * len(FLEET_FAMILIES) * len(FLEET_TPS)
    return synthetic_data(hardware=FLEET_HARDWARE, families=FLEET_FAMILIES, tps=FLEET_TPS,
                          n_obs=max(1, int(round(n_obs_total / n_configs))), noise=noise,
                          seed=seed, match_model=match_model)


def truth_coverage(posterior, truth: dict, prob: float = 0.9, identified_in=None) -> float:
    """Share of true beta coefficients (`truth`: {config: vector in FEATURES order}) inside
    their central `prob` intervals of `posterior` (an InferenceData's posterior group).
    `identified_in` (the fitted ModelData): only coefficients whose feature is nonzero in
    their configuration's rows (the others are set by the hierarchy and priors alone)."""
    beta = posterior["beta"].stack(s=("chain", "draw")).sel(feature=FEATURES)
    touched = None
    if identified_in is not None:
        touched = identified_in.obs.groupby("config")[[f"f_{f}" for f in FEATURES]].max() > 0
    inside = []
    for key, true_beta in truth.items():
        lo, hi = np.quantile(beta.sel(config=key).values, [(1 - prob) / 2, (1 + prob) / 2], axis=1)
        hit = (lo <= true_beta) & (true_beta <= hi)
        inside.extend(hit if touched is None else hit[touched.loc[key].to_numpy()])
    return float(np.mean(inside))
