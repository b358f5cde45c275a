"""Operator profiles as evidence: configuration rows and observations (kind
``operator_profile``) from measured kernel times (`io.operator_profiles`).

What a profile row is, and what it informs (data_specs/observations.md, "operator_profile"):

- **linear layers**: one row per profiled (GPU, model, TP, num_tokens):
  ``y_s`` = the measured time of ONE layer's matmuls on one GPU of the TP group
  (attention QKV and output projections, MLP up (with gate) and down projections: the sum
  of their mean times), and the features are the share of a step's features those
  kernels cover (`features.beta.linear_layer_features`): ``f_prefill_compute_s`` (their
  FLOPs for num_tokens tokens / (tp P)), ``f_weight_traffic_s`` (one layer's matmul weight
  bytes / (tp BW)) and ``f_layer_overhead_s`` = 1 µs (one layer's share of the per-layer
  constant: the fixed cost of its kernels, visible when a TP shard is small). Element-wise
  operators (activation, norms, rotary, residual add) are left out: no feature prices
  activation traffic.
  The tokens' FLOPs go to ``prefill_compute_s``: a GEMM does not know whether its rows are
  prefill or decode tokens, but the rows where compute matters (hundreds to thousands of
  tokens: compute-bound) are prefill chunks; at decode-sized batches (<= 64 tokens) the
  compute share is a few per cent of the weight streaming, so those rows inform
  ``weight_traffic_s`` (achieved bandwidth) and hardly any compute coefficient. In a step,
  ``decode_compute_s`` also carries lm_head and decode attention FLOPs, which no operator
  row measures.
- **all-reduce**: one row per (GPU, topology, workers, message size): ``y_s`` = the time
  of one all-reduce, features = one of a step's 2 x n_layers all-reduces
  (`features.beta.allreduce_features`): ``f_tp_comm_s`` (bytes over the interconnect) and
  ``f_tp_sync_s`` (log2(workers) rounds x 1 µs). Only single-node rows (devices_per_node =
  num_workers) of the ``DEFAULT_TOPOLOGIES`` (DGX: NVSwitch, where the datasheet's NVLink
  figure holds) by default: multi-node rows go over InfiniBand and pairwise-NVLink rows
  beyond 2 GPUs over PCIe, which the GPU's datasheet does not describe. In one fit with
  linear rows, their configurations' latency deviations (NCCL latency does not grow as
  log2(workers): ~50%) and the linear configurations' tight per-step-constant sums (~3%)
  share one learnt scale and chains can split; ``all_reduce=False`` (or ``linear=False``)
  builds one type only (docs/operator-profiles.md).

Every profile configuration is its own configuration row: model ``ops:<model>`` (so it
never shares coefficients with a traced configuration of the same model, GPU and TP;
the software stack differs), the model's family and dense arch, the GPU, TP, dtype fp16
(what the profiles ran in). All-reduce configurations are ``ops:all-reduce-<topology>``
with family ``collective``. The hierarchy pools them with traced configurations through
the hardware, family and arch levels; ``n_steps`` = 1 (one forward pass), so a row's
noise is its configuration's ``sigma_step`` and the kind's own ``sigma_kind``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from bayesblis.features.alpha import ALPHA_FEATURES
from bayesblis.features.beta import BETA_FEATURES, allreduce_features, linear_layer_features
from bayesblis.model.data import CONFIG_COLUMNS, ModelData, config_key

KIND = "operator_profile"
MODEL_PREFIX = "ops:"
ALL_REDUCE_FAMILY = "collective"
DTYPE = "fp16"
DEFAULT_TOPOLOGIES = ("dgx",)
WITH_TRACES_ALL_REDUCE = False
"""Whether all-reduce profile rows join a fit of traced runs (`source_observations`, used by
design.py, and `validate --profiles`). They do not by default: the profiles time NCCL
all-reduces (about 1.2x the bytes over NVLink on H100), while vLLM's steps run its own
custom all-reduce kernels, which fits of the traced runs price at ~0.2x. Pooled, they pulled
TP all-reduce up: held out by model, E2E 8.0 / 8.7% with them (model version 3) against
2.8 / 2.2% with the linear-layer rows only and the GEMV factor (seeds 1 / 2, model version 4,
docs/accuracy.md)."""
F_COLUMNS = tuple(f"f_{f}" for f in BETA_FEATURES)
A_COLUMNS = tuple(f"a_{a}" for a in ALPHA_FEATURES)
EXTRA_COLUMNS = ("num_tokens", "message_bytes")
"""Columns a profile observation adds to the table (NaN where they do not apply)."""


def _config(model: str, family: str, hardware: str, tp: int) -> dict:
    row = {"model": model, "model_family": family, "arch": "dense", "hardware": hardware,
           "tp": int(tp), "ep": 1, "dtype": DTYPE}
    row["config"] = config_key(row["model"], hardware, row["tp"], 1, DTYPE)
    return row


def _rows(config: str, y, features: np.ndarray, source: str, **extra) -> pd.DataFrame:
    obs = pd.DataFrame(features, columns=list(F_COLUMNS))
    for column in A_COLUMNS:  # no request-level delay in a kernel time
        obs[column] = 0.0
    obs.insert(0, "y_s", np.asarray(y, float))
    obs.insert(0, "n_steps", 1)
    obs.insert(0, "kind", KIND)
    obs.insert(0, "config", config)
    obs["source"] = source
    for name in EXTRA_COLUMNS:
        obs[name] = np.asarray(extra.get(name, np.nan), float) * np.ones(len(obs))
    return obs


def profile_observations(profiles, *, source: str = "operator-profiles", statistic: str = "mean",
                         layer_constant: bool = True, topologies=DEFAULT_TOPOLOGIES,
                         gpus=None, linear: bool = True, all_reduce: bool = True
                         ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(configurations [CONFIG_COLUMNS], observations) of an `OperatorProfiles` (module doc).

    `statistic`: 'mean' (default: the model's location is a mean time) or 'median' of the
    repeated timings; `layer_constant`: include ``f_layer_overhead_s`` in linear-layer rows;
    `topologies`: all-reduce topologies kept (None: all); `gpus`: keep only these catalog
    GPU names (None: all); `linear`, `all_reduce`: which rows to build."""
    from bayesblis.features.physics import Deployment, DeploymentError

    configs, parts = {}, []
    times = profiles.linear_layer_times(statistic)
    if gpus is not None:
        times = times[times["gpu"].isin(list(gpus))]
    if not linear:
        times = times.iloc[:0]
    for (gpu, model, tp), rows in times.groupby(["gpu", "model", "tp"], sort=True):
        arch = profiles.models[model]
        try:
            dep = Deployment(arch, gpu, tp=int(tp), dtype=DTYPE)
        except DeploymentError as exc:
            warnings.warn(f"operator profile {model} on {gpu} tp{tp} skipped: {exc}", stacklevel=2)
            continue
        row = _config(MODEL_PREFIX + arch.name, arch.family, dep.gpu.name, tp)
        configs[row["config"]] = row
        tokens = rows["num_tokens"].to_numpy(float)
        feats = linear_layer_features(dep, tokens, layer_constant=layer_constant)
        parts.append(_rows(row["config"], rows["time_s"], feats, source, num_tokens=tokens))
    ar = profiles.all_reduce
    if len(ar) and all_reduce:
        keep = (ar["devices_per_node"] == ar["num_workers"]) & (ar["num_workers"] >= 2)
        if topologies is not None:
            keep &= ar["topology"].isin(list(topologies))
        if gpus is not None:
            keep &= ar["gpu"].isin(list(gpus))
        for (gpu, topology, workers), rows in ar[keep].groupby(["gpu", "topology", "num_workers"], sort=True):
            row = _config(f"{MODEL_PREFIX}all-reduce-{topology}", ALL_REDUCE_FAMILY, gpu, workers)
            configs[row["config"]] = row
            size = rows["size_bytes"].to_numpy(float)
            feats = allreduce_features(gpu, int(workers), size)
            parts.append(_rows(row["config"], rows[f"time_s_{statistic}"], feats, source,
                               message_bytes=size))
    cfg = pd.DataFrame(list(configs.values()), columns=list(CONFIG_COLUMNS))
    obs = (pd.concat(parts, ignore_index=True) if parts
           else pd.DataFrame(columns=["config", "kind", "n_steps", "y_s", *F_COLUMNS, *A_COLUMNS,
                                      "source", *EXTRA_COLUMNS]))
    return cfg, obs


def combine(model_data: ModelData | None, configs: pd.DataFrame, obs: pd.DataFrame, *,
            drop_unused: bool = False) -> ModelData:
    """`ModelData` of `model_data` (e.g. traced runs; None: profiles only) plus profile
    configurations and observations; feature columns one side lacks are 0.

    `drop_unused`: leave out feature columns that are 0 in every row, so the model gets no
    coefficient for them. A profiles-only table has no KV, decode, request or step
    features: their coefficients would be prior draws, and a learnt scale over
    prior-only effects (the KV group's per-configuration sums, family effects) is a funnel
    NUTS mixes badly in (bulk ESS 2 in 150 draws)."""
    if model_data is not None:
        configs = pd.concat([model_data.configs, configs[~configs["config"].isin(
            model_data.configs["config"])]], ignore_index=True)
        obs = pd.concat([model_data.obs, obs], ignore_index=True)
    obs = obs.copy()
    for column in list(obs.columns):
        if column.startswith(("f_", "a_")):
            obs[column] = obs[column].astype(float).fillna(0.0)
            if drop_unused and not obs[column].any():
                obs = obs.drop(columns=column)
    return ModelData(configs=configs[list(CONFIG_COLUMNS)], obs=obs)


def source_observations(source, *, kinds=None, **options) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`profile_observations` of an ingested ``operator_profiles`` source (design.py); its
    all-reduce rows only with ``all_reduce=True`` (WITH_TRACES_ALL_REDUCE)."""
    from bayesblis.io.operator_profiles import profiles_from_source

    options.setdefault("all_reduce", WITH_TRACES_ALL_REDUCE)
    cfg, obs = profile_observations(profiles_from_source(source), source=source.name, **options)
    if kinds is not None and KIND not in kinds:
        return cfg.iloc[:0], obs.iloc[:0]
    return cfg, obs


def spread_subsample(obs: pd.DataFrame, per_config: int, seed: int = 0) -> pd.DataFrame:
    """At most `per_config` profile rows per configuration, spread evenly over log2 of the
    size (num_tokens or message_bytes): a uniform draw would leave few of the small-batch
    (weight-bound) rows, which are a few per cent of a profile. Other rows are kept."""
    rng = np.random.default_rng(seed)
    is_profile = obs["kind"] == KIND
    keep = [np.flatnonzero(~is_profile.to_numpy())]
    size = obs["num_tokens"].fillna(obs["message_bytes"]).to_numpy(float)
    for _, idx in obs[is_profile].groupby("config", sort=True).indices.items():
        idx = np.flatnonzero(is_profile.to_numpy())[idx]
        if len(idx) <= per_config:
            keep.append(idx)
            continue
        bins = np.floor(np.log2(size[idx]))
        _, inverse, counts = np.unique(bins, return_inverse=True, return_counts=True)
        p = 1.0 / counts[inverse]
        keep.append(rng.choice(idx, size=per_config, replace=False, p=p / p.sum()))
    return obs.iloc[np.sort(np.concatenate(keep))].reset_index(drop=True)


def token_regime(obs: pd.DataFrame) -> pd.Series:
    """Operator group of each profile row: 'linear <=64 tok' (weight-bound),
    'linear 65-1023 tok', 'linear >=1024 tok' (compute-bound), 'all-reduce'."""
    tokens = obs["num_tokens"].to_numpy(float)
    out = np.where(tokens <= 64, "linear <=64 tok",
                   np.where(tokens >= 1024, "linear >=1024 tok", "linear 65-1023 tok"))
    out = np.where(np.isnan(tokens), "all-reduce", out)
    return pd.Series(out, index=obs.index, name="group")
