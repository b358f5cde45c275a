"""The design: a `ModelData` (configurations + observation table) from an ingested dataset.

For each source: the `Deployment` from its settings (model via the catalog, which takes
HF ids; hardware from the source or the `hardware` argument; tp, ep, dtype), its
configuration row (`model.data.config_row`) and its window observations:

- OTEL sources: `reconstruct.otel_observations` (step gaps, journey decode and
  queue-to-first-token windows, alpha windows);
- inference-perf sources: `bayesblis.client_windows.client_observations(source,
  deployment)` (skipped with a warning while that module is missing);
- BLIS TraceV2/V3 sources: the same client windows, from the trace's client-side request
  table (`io.tracev2.client_requests`; each row's shared prefix from its
  `prefix_length`): a run written both ways gives the same observations;
- operator-profile sources: `bayesblis.operator_evidence.source_observations` (their own
  configuration rows, kind ``operator_profile``; no deployment settings needed);
- other kinds (KV events alone): no observations (a warning says so).

Configuration rows are deduplicated (several traces of one configuration share its
coefficients). `max_obs_per_config` subsamples each configuration's rows (seeded).
See data_specs/observations.md.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from bayesblis.errors import BayesBlisError, UnknownArchitectureError, UnknownHardwareError
from bayesblis.model.data import CONFIG_COLUMNS, ModelData, config_row
from bayesblis.reconstruct import KINDS, OBS_COLUMNS, otel_observations, trace_from_source


def deployment_for_source(source, hardware: str | None = None):
    """The `Deployment` of a source: model (catalog name, HF id or config.json path),
    hardware (the source's `hardware` setting, else the `hardware` argument), tp, ep,
    dtype, block_size, and the sampler its requests take (the model's sampling defaults
    under `generation_config`, `catalog.generation.sampler_for`)."""
    from bayesblis.catalog.generation import sampler_for
    from bayesblis.catalog.models import load_model
    from bayesblis.features.physics import Deployment

    s = source.settings or {}
    model = s.get("model")
    if not model:
        raise BayesBlisError(
            f"source '{source.name}': no model in its settings; give one in deployment.yaml "
            f"(model: <HF id or catalog name>), the experiment config or a TraceV2 header's "
            f"server.model")
    hw = s.get("hardware") or hardware
    if not hw:
        where = ("the header's server block (server: {hardware: <GPU>}), a <stem>.deployment.yaml "
                 "beside the trace" if source.kind == "trace_v2" else "the source's deployment.yaml")
        raise BayesBlisError(
            f"source '{source.name}': the hardware is unknown; put 'hardware: <GPU>' in "
            f"{where} or pass hardware=... (CLI --hardware)")
    try:
        return Deployment(load_model(model), hw, tp=int(s.get("tp") or 1), ep=int(s.get("ep") or 1),
                          dtype=str(s.get("dtype") or "auto"), block_size=int(s.get("block_size") or 16),
                          sampler=sampler_for(model, str(s.get("generation_config") or "auto")))
    except (UnknownArchitectureError, UnknownHardwareError) as exc:
        raise type(exc)(f"source '{source.name}': {exc}") from None


def _client_observations():
    try:
        from bayesblis.client_windows import client_observations
    except ImportError:
        return None
    return client_observations


def trace_v2_source_requests(source) -> pd.DataFrame:
    """The client-side request table of an ingested TraceV2 source
    (`io.tracev2.client_requests` of its rows and header)."""
    from bayesblis.io.tracev2 import client_requests

    return client_requests(source.tables["requests"], (source.extra or {}).get("header") or {},
                           (source.meta or {}).get("path"))


def trace_v2_observations(source, deployment) -> pd.DataFrame:
    """Client windows of an ingested TraceV2/V3 source: as `client_windows.client_observations`
    on the trace's client-side request table, with each request's shared prefix its own
    `prefix_length` (an inference-perf run has one `system_prompt_len` for all) and a
    repeated prompt cached whole; the warm-up as for inference-perf runs (`WARMUP_S`, none
    for a source `calibrate.truncate_source` cut)."""
    from bayesblis.client_windows import source_windows

    requests = trace_v2_source_requests(source)
    return source_windows(source, deployment, requests, requests["prefix_tokens"].to_numpy(float))


def source_observations(source, deployment, *, kinds=None) -> tuple[pd.DataFrame, dict]:
    """Observation rows of one source (without the `config` column filled) and a summary."""
    if source.kind == "otel":
        trace, offload = trace_from_source(source)
        otel_kinds = None if kinds is None else [k for k in kinds if k in KINDS]
        if otel_kinds == []:
            return pd.DataFrame(columns=list(OBS_COLUMNS)), {"skipped": "no requested kind"}
        mnbt = int(source.settings.get("max_num_batched_tokens") or 2048)
        return otel_observations(trace, deployment, mnbt, source=source.name, offload=offload,
                                 kinds=otel_kinds)
    if source.kind in ("inference_perf", "trace_v2"):
        fn = _client_observations()
        if fn is None:
            warnings.warn(f"source '{source.name}': bayesblis.client_windows is not available yet; "
                          f"{source.kind} source skipped", stacklevel=3)
            return pd.DataFrame(columns=list(OBS_COLUMNS)), {"skipped": "client_windows unavailable"}
        obs = pd.DataFrame(fn(source, deployment) if source.kind == "inference_perf"
                           else trace_v2_observations(source, deployment)).copy()
        if obs.empty:
            return pd.DataFrame(columns=list(OBS_COLUMNS)), {
                "skipped": "no usable window (every stage queued or had client errors)"}
        if "source" not in obs.columns or obs["source"].isna().all():
            obs["source"] = source.name
        if kinds is not None:
            obs = obs[obs["kind"].isin(list(kinds))]
        return obs, {"kept": obs["kind"].value_counts().to_dict() if len(obs) else {}}
    warnings.warn(f"source '{source.name}' ({source.kind}): no window observations from this kind "
                  f"of source; skipped", stacklevel=3)
    return pd.DataFrame(columns=list(OBS_COLUMNS)), {"skipped": f"kind {source.kind}"}


def build_model_data(dataset, *, hardware: str | None = None, kinds=None,
                     max_obs_per_config: int | None = None, seed: int = 0,
                     return_summary: bool = False):
    """`ModelData` of every source of `dataset` (see module doc).

    `kinds`: keep only these observation kinds (default all). `max_obs_per_config`:
    at most this many rows per configuration, a seeded uniform subsample. With
    `return_summary`, returns (ModelData, summary dict per source).
    """
    configs: dict[str, dict] = {}
    parts: list[pd.DataFrame] = []
    summary: dict = {}
    for src in dataset.sources:
        if src.kind == "operator_profiles":  # measured kernels: configurations of their own
            from bayesblis.operator_evidence import source_observations as profile_observations

            rows, obs = profile_observations(src, kinds=kinds)
            summary[src.name] = {"configs": len(rows), "kept": {"operator_profile": len(obs)}}
            if len(obs):
                for row in rows.to_dict("records"):
                    configs.setdefault(row["config"], row)
                parts.append(obs)
            continue
        if src.kind in ("kv_events", "kernel_db"):
            warnings.warn(f"source '{src.name}' ({src.kind}): no window observations from this kind "
                          f"of source; skipped", stacklevel=2)
            summary[src.name] = {"skipped": f"kind {src.kind}"}
            continue
        if src.kind in ("inference_perf", "trace_v2") and _client_observations() is None:
            warnings.warn(f"source '{src.name}': bayesblis.client_windows is not available yet; "
                          f"inference-perf source skipped", stacklevel=2)
            summary[src.name] = {"skipped": "client_windows unavailable"}
            continue
        dep = deployment_for_source(src, hardware)
        row = config_row(dep)
        obs, info = source_observations(src, dep, kinds=kinds)
        summary[src.name] = {"config": row["config"], **info}
        if not len(obs):
            continue
        configs.setdefault(row["config"], row)
        obs = obs.copy()
        obs["config"] = row["config"]
        parts.append(obs)
    if not parts:
        raise BayesBlisError("no observations: no source of the dataset gave a usable window "
                             f"(per source: {summary})")
    obs = pd.concat(parts, ignore_index=True)
    # every f_/a_ column present in some part: 0 where a part lacks it
    for c in obs.columns:
        if c.startswith(("f_", "a_")):
            obs[c] = obs[c].astype(float).fillna(0.0)
    if max_obs_per_config is not None:
        if max_obs_per_config < 1:
            raise ValueError("max_obs_per_config must be >= 1")
        rng = np.random.default_rng(seed)
        keep = []
        for _, idx in obs.groupby("config", sort=True).indices.items():
            if len(idx) > max_obs_per_config:
                idx = np.sort(rng.choice(idx, size=max_obs_per_config, replace=False))
            keep.append(idx)
        obs = obs.iloc[np.sort(np.concatenate(keep))].reset_index(drop=True)
    front = [c for c in OBS_COLUMNS if c in obs.columns]
    obs = obs[front + [c for c in obs.columns if c not in front]]
    cfg = pd.DataFrame(list(configs.values()))[list(CONFIG_COLUMNS)]
    md = ModelData(configs=cfg, obs=obs)
    return (md, summary) if return_summary else md


def describe(model_data: ModelData) -> pd.DataFrame:
    """Observation counts per configuration x kind (plus total window steps and median
    y_s), one row per (config, kind)."""
    obs = model_data.obs
    g = obs.groupby(["config", "kind"], sort=True)
    out = pd.DataFrame({"n_obs": g.size(), "n_steps": g["n_steps"].sum(),
                        "median_y_s": g["y_s"].median()}).reset_index()
    return out


__all__ = ["build_model_data", "describe", "deployment_for_source", "source_observations"]
