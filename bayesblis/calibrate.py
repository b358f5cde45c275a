"""Calibrate a fitted posterior to a new deployment from a few minutes of its traces.

A user with a fitted posterior (POSTERIOR.nc) and short traces of a *new* deployment (new
GPU, new model, new vLLM version) gets a posterior for it in which the population
posterior is the prior: no refit of the hierarchy, seconds instead of minutes.

1. **Prior.** For each configuration of the calibration data, draws of its log
   coefficients ``theta = log [beta, alpha]`` through the hierarchy, exactly as
   `bayesblis.coefficients.coefficient_draws` answers for it: a configuration the parent
   fitted uses its own posterior draws; any other gets ``mu`` + the effects of its seen
   levels (their posteriors) + fresh ``Normal(0, tau)`` effects of its unseen levels, of
   the configuration itself and of its PROPORTIONAL_GROUPS sums (``allow_unseen``). The
   draws are summarised as a multivariate normal ``theta ~ MvNormal(m, S)`` (``S``
   regularised by `COV_SHRINK` towards its diagonal): the covariance carries the
   population's split of the proportional groups, which a new configuration's data cannot
   make (they fix only the group sums). Noise: ``sigma_step`` gets a log-normal prior
   matched to the draws of the configuration (the pooled configurations' draws for a new
   one), ``sigma_kind`` per kind to the parent's posterior (a kind the parent never saw:
   the default HalfNormal prior), ``nu - 2`` to the parent's ``nu`` (log-scale sds floored
   at `MIN_NOISE_LOG_SD`).
2. **Likelihood.** The one of `bayesblis.model.hierarchy` (same mean ``F . beta + A .
   alpha``, same relative scale `relative_scale`, same Student-t `student_t_logp`), over
   the new configurations only, without run factors (the calibration runs share the
   configuration's coefficients).
3. **Fit.** nutpie NUTS on the JAX backend (compiles in seconds), non-centred in the
   group-sum coordinates: each PROPORTIONAL_GROUPS group the configuration's data see is
   described by its log sum ``log sum_k ref_k beta_k`` and log ratios (`to_sum_coordinates`;
   ``ref``: the configuration's summed features), ``u = m_u + chol(S_u) z`` with the moments
   of the prior draws in those coordinates: the data pin the sum, a curved ridge in log
   coefficients (tree depth 6-7) and an axis here. ``laplace=True`` in the sampler settings
   preconditions it at the posterior mode (`bayesblis.model.laplace`; faster but unreliable
   here, see `DEFAULT_SAMPLER`). With no calibration data, exact draws from the prior (the
   population-level prediction).
4. **Output.** A posterior file `coefficients`, `simulate` and `plan` read like a fit:
   ``beta``/``alpha`` over the calibrated configurations, ``sigma_step``, ``nu``, and
   ``tau_run`` resampled from the parent (a simulated new run still draws a run factor);
   the calibration observations in its observation group; attribute
   ``bayesblis_calibration_of`` names the parent file (``fit_info["calibration"]`` holds
   the details). It answers only for its own configurations.

See data_specs/calibrate.md.
"""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from bayesblis.client_windows import WARMUP_S
from bayesblis.constants import DIM_ALPHA_FEATURE, DIM_CONFIG, DIM_FEATURE, DIM_OBS
from bayesblis.errors import BayesBlisError
from bayesblis.model.data import CONFIG_COLUMNS, ModelData
from bayesblis.model.priors import tie_columns

PRIOR_DRAWS = 2000
"""Population-level draws summarised into the prior (fresh level effects per repetition)."""

COV_SHRINK = 0.02
"""Weight of the diagonal in the regularised prior covariance ``(1 - w) S + w diag(S)``."""

COV_JITTER = 1e-6
"""Added to the prior covariance's diagonal (log scale): a positive-definite ``S``."""

MIN_NOISE_LOG_SD = 0.3
"""Floor on the log-scale sd of the noise priors (sigma_step, sigma_kind, nu - 2): a new
deployment's noise may differ from the fleet's more than the fleet's posterior says."""

DEFAULT_SAMPLER = {"draws": 1000, "tune": 300, "chains": 2, "target_accept": 0.95, "seed": 1,
                   "max_treedepth": 10, "laplace": False}
"""NUTS in the group-sum coordinates (`to_sum_coordinates`) with nutpie's diagonal mass
matrix. Llama-2-70B held out, calibrated on 300 s of one run (203 client windows), sampler
seeds 1 / 2 / 3: 39 / 44 / 42 s, mean tree depth 5.6-5.8, bulk ESS 255 / 168 / 115, r_hat
1.010 / 1.023 / 1.011, no divergences; in log-coefficient coordinates with Laplace
preconditioning (the default before 2026-11-25) 68 / 72 / 63 s, depth 6.3-6.5, ESS 218 / 224
/ 69, r_hat 1.008 / 1.016 / 1.026. Laplace or a low-rank mass matrix in the sum coordinates
were 3x faster but unreliable (r_hat up to 1.43, divergences in the prior-dominated tail;
docs/calibration.md)."""

CALIBRATION_ATTR = "bayesblis_calibration_of"
"""Posterior-group attribute of a calibrated file: the parent posterior's path."""


# ---------------------------------------------------------------------- inputs
def truncate_source(source, *, max_requests: int | None = None,
                    first_seconds: float | None = None, warmup_s: float = 0.0):
    """A copy of an ingested source keeping only its first `max_requests` requests (by
    arrival) and/or those arriving in its first `first_seconds` seconds, both counted after
    a warm-up of `warmup_s` seconds.

    inference-perf and BLIS TraceV2/V3 (its client-side request table,
    `io.tracev2.client_requests`): the request table is cut after the last kept request (warm-up requests
    kept: they share the batch timeline). The timeline is complete only up to the last
    kept arrival (later requests are unknown), so only windows inside [end of warm-up,
    last kept arrival] are exact: ``meta["calibration_windows"]`` records that span and
    `calibration_data` keeps only the windows inside it. OTEL: the kept requests (by
    engine queue time; unfinished ones dropped), their journey events, and the steps (and
    their snapshots) up to the last kept request's end (the warm-up is not applied). Other
    kinds, and OTEL without a cut, are returned as they are."""
    tables = dict(source.tables)
    meta = dict(source.meta)
    if source.kind in ("inference_perf", "trace_v2"):
        req = tables["requests"]
        if source.kind == "trace_v2":   # its client-side request table, as inference-perf's
            from bayesblis.design import trace_v2_source_requests

            req = trace_v2_source_requests(source)
        req = req.sort_values("arrival_s", kind="stable").reset_index(drop=True)
        arrival = req["arrival_s"].to_numpy(float)
        start_s = float(arrival.min()) + float(warmup_s) if len(req) else 0.0
        warm = req[arrival < start_s]
        steady = _first(req[arrival >= start_s], "arrival_s", max_requests, first_seconds)
        kept = pd.concat([warm, steady], ignore_index=True)
        tables["requests"] = kept
        complete = len(kept) == len(req)   # nothing cut: the trace's own end is its end
        meta["calibration_windows"] = {
            "from_s": start_s,
            "until_s": None if complete or steady.empty else float(steady["arrival_s"].max())}
    elif source.kind == "otel":
        if max_requests is None and first_seconds is None:
            return source
        req = tables["requests"]
        req = req[np.isfinite(req["queued_s"].to_numpy(float))].sort_values("queued_s",
                                                                            kind="stable")
        kept = _first(req, "queued_s", max_requests, first_seconds)
        kept = kept[np.isfinite(kept["finished_s"].to_numpy(float))]
        tables["requests"] = kept
        ids = set(kept["request_id"])
        ev = tables["journey_events"]
        tables["journey_events"] = ev[ev["request_id"].isin(ids)].reset_index(drop=True)
        end = float(kept["finished_s"].max()) if len(kept) else -np.inf
        steps = tables["steps"]
        steps = steps[steps["ts_end_s"].to_numpy(float) <= end + 1e-9].reset_index(drop=True)
        tables["steps"] = steps
        snaps = tables["snapshots"]
        tables["snapshots"] = snaps[snaps["step_id"].isin(set(steps["step_id"]))].reset_index(
            drop=True)
    else:
        return source
    return replace(source, tables=tables, meta=meta)


def _first(table: pd.DataFrame, time_col: str, max_requests, first_seconds) -> pd.DataFrame:
    if first_seconds is not None and len(table):
        t = table[time_col].to_numpy(float)
        table = table[t <= t.min() + float(first_seconds)]
    if max_requests is not None:
        table = table.iloc[:int(max_requests)]
    return table.reset_index(drop=True)


CALIBRATION_KINDS = ("inference_perf", "otel", "trace_v2")
"""Source kinds calibration reads (client-side request traces and OTEL engine traces)."""


def calibration_data(dataset, *, hardware: str | None = None, max_requests: int | None = None,
                     first_seconds: float | None = None, max_obs_per_config: int | None = None,
                     seed: int = 0, warmup_s: float = WARMUP_S) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(configuration table, observation table) of a dataset's sources after truncation
    (`truncate_source`, after a warm-up of `warmup_s` seconds); the observation table may
    be empty (no request kept, or windows of none), the configurations are those of every
    source with a deployment. Client windows outside a source's exact span
    (``meta["calibration_windows"]``: warm-up, or past the last kept arrival) are dropped."""
    from bayesblis.design import build_model_data, deployment_for_source
    from bayesblis.io.dataset import Dataset
    from bayesblis.model.data import config_row

    sources = [truncate_source(s, max_requests=max_requests, first_seconds=first_seconds,
                               warmup_s=warmup_s)
               for s in dataset.sources if s.kind in CALIBRATION_KINDS]
    if not sources:
        kinds = sorted({s.kind for s in dataset.sources})
        raise BayesBlisError(f"no source to calibrate on: the inputs hold {', '.join(kinds) or 'none'}"
                             " (expected inference-perf folders, OTEL traces or BLIS TraceV2/V3 "
                             "header + CSV pairs)")
    rows = {}
    for s in sources:
        row = config_row(deployment_for_source(s, hardware))
        rows.setdefault(row["config"], row)
    configs = pd.DataFrame(list(rows.values()))[list(CONFIG_COLUMNS)]
    usable = [s for s in sources if len(s.tables["requests"])]
    obs = pd.DataFrame()
    if usable:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a source without windows: empty table below
                data = build_model_data(Dataset(sources=usable), hardware=hardware,
                                        max_obs_per_config=max_obs_per_config, seed=seed)
            obs = _exact_windows(data.obs, usable)
        except BayesBlisError as exc:
            if "no observations" not in str(exc):
                raise
    return configs, obs


CLIENT_WINDOW_END = {"client_decode_window": "e2e_s", "client_ttft": "ttft_s"}
"""Client window kinds and the request time (after arrival) at which each ends."""


def _exact_windows(obs: pd.DataFrame, sources) -> pd.DataFrame:
    """`obs` without the client windows of requests that arrived in a source's warm-up or
    whose window ends after the last kept arrival (``meta["calibration_windows"]``)."""
    drop = np.zeros(len(obs), bool)
    for s in sources:
        span = s.meta.get("calibration_windows")
        if not span:
            continue
        req = s.tables["requests"]
        for kind, end_col in CLIENT_WINDOW_END.items():
            rows = (obs["source"] == s.name).to_numpy() & (obs["kind"] == kind).to_numpy()
            if not rows.any():
                continue
            ids = obs.loc[rows, "request_id"].to_numpy()
            arrival = req.loc[ids, "arrival_s"].to_numpy(float)
            bad = arrival < span["from_s"]
            if span["until_s"] is not None:
                bad |= arrival + req.loc[ids, end_col].to_numpy(float) > span["until_s"]
            drop[np.flatnonzero(rows)[bad]] = True
    return obs[~drop].reset_index(drop=True)


# ---------------------------------------------------------------------- prior
def population_prior(parent, row: dict, *, n_draws: int = PRIOR_DRAWS, seed: int = 0,
                     extra_beta=(), extra_alpha=(), as_new: bool = False) -> dict:
    """The calibration prior of one configuration (see module docstring, step 1).

    `extra_beta`, `extra_alpha`: features the parent was not fitted with (its data had none):
    their log coefficients get the default prior (`priors.default_priors`, or the parent's
    prior for them), independent of the others. `as_new`: a configuration the parent fitted
    is answered as a new configuration of its levels (its own fitted effect ignored; e.g.
    a new vLLM version of a fitted deployment).

    Returns {"mean": m, "cov": S (regularised), "draws": draws [S, K] of log(coefficient -
    floor) (parent's beta features, extra beta, parent's alpha features, extra alpha),
    "floor": [K] the coefficients' physical floors (model/priors.py),
    "sigma_step": [S] draws, "seen_config", "unseen_levels"}."""
    from bayesblis.coefficients import coefficient_draws
    from bayesblis.model.priors import floors, log_excess_median, merge_priors

    known = merge_priors(None)
    rng = np.random.default_rng(seed)
    if as_new and parent.config_row(row["config"]) is not None:
        from dataclasses import replace as copy_with

        configs = parent.configs.copy()
        configs.loc[configs["config"] == row["config"], "config"] = row["config"] + "#fitted"
        parent = copy_with(parent, configs=configs)

    def specs(section):  # the parent's priors, the defaults for features it did not have
        return {**known[section], **parent.priors.get(section, {})}

    def extra(section, names, n):
        spec = [specs(section)[f] for f in names]
        return np.column_stack([rng.normal(log_excess_median(p), p["log_sd"], n) for p in spec]
                               ) if names else np.zeros((n, 0))

    def floor(section, names):
        return floors(specs(section), names)

    floor_beta = floor("beta", list(parent.beta_features))
    floor_alpha = floor("alpha", list(parent.alpha_features))

    levels = {k: row[k] for k in ("model", "model_family", "arch", "hardware", "tp", "ep",
                                  "dtype")}
    parts, sigmas = [], []
    rep = 0
    while sum(len(p) for p in parts) < n_draws:
        cd = coefficient_draws(parent, **levels, allow_unseen=True, seed=seed + rep,
                               new_run=False)
        n = cd.n_draws
        parts.append(np.hstack([np.log(cd.beta - floor_beta), extra("beta", list(extra_beta), n),
                                np.log(cd.alpha - floor_alpha),
                                extra("alpha", list(extra_alpha), n)]))
        sigmas.append(cd.noise_sigma)
        rep += 1
        if cd.seen_config:  # its own posterior draws: nothing fresh to repeat
            break
    draws = np.vstack(parts)
    mean, cov = _moments(draws)
    floor_all = np.concatenate([floor_beta, floor("beta", list(extra_beta)), floor_alpha,
                                floor("alpha", list(extra_alpha))])
    return {"mean": mean, "cov": cov, "draws": draws, "floor": floor_all,
            "sigma_step": np.concatenate(sigmas),
            "seen_config": bool(cd.seen_config), "unseen_levels": dict(cd.unseen_levels)}


def _moments(draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and regularised covariance (`COV_SHRINK`, `COV_JITTER`) of draws [S, K]."""
    mean = draws.mean(axis=0)
    cov = np.atleast_2d(np.cov(draws, rowvar=False))
    cov = (1 - COV_SHRINK) * cov + COV_SHRINK * np.diag(np.diag(cov))
    cov[np.diag_indices_from(cov)] += COV_JITTER
    return mean, cov


def sum_groups(beta_f: list, reference: np.ndarray, floor: np.ndarray) -> list[np.ndarray]:
    """Per PROPORTIONAL_GROUPS group, the indices of its members that this configuration's
    data see (`reference` > 0: the configuration's summed feature values) and that have no
    floor; only groups of two or more."""
    from bayesblis.model.priors import PROPORTIONAL_GROUPS

    out = []
    for members in PROPORTIONAL_GROUPS.values():
        idx = np.array([j for j, f in enumerate(beta_f)
                        if f in members and reference[j] > 0 and floor[j] == 0], np.int64)
        if len(idx) >= 2:
            out.append(idx)
    return out


def to_sum_coordinates(theta: np.ndarray, groups, reference: np.ndarray) -> np.ndarray:
    """Log coefficients [S, K] -> the same with each group's members replaced by the log of
    the group's sum ``log sum_k ref_k beta_k`` (first member's slot) and the log ratios
    ``log(ref_j beta_j / ref_0 beta_0)`` (the others'): the configuration's data pin the
    sum, a curved ridge in theta (chains crawled along it: tree depth 6-7), a coordinate
    axis here. Members have floor 0 (`sum_groups`)."""
    from scipy.special import logsumexp

    u = np.array(theta, float, copy=True)
    for idx in groups:
        a = theta[:, idx] + np.log(reference[idx])
        u[:, idx[0]] = logsumexp(a, axis=1)
        u[:, idx[1:]] = a[:, 1:] - a[:, :1]
    return u


def from_sum_coordinates(u, groups, reference: np.ndarray):
    """The inverse of `to_sum_coordinates` for one configuration's vector (pytensor)."""
    import pytensor.tensor as pt

    theta = u = pt.as_tensor_variable(u)
    for idx in groups:
        w = u[idx[1:]]
        a0 = u[idx[0]] - pt.log1p(pt.sum(pt.exp(w)))
        a = pt.concatenate([pt.stack([a0]), a0 + w])
        theta = pt.set_subtensor(theta[idx], a - np.log(reference[idx]))
    return theta


def _lognormal(draws, floor: float = MIN_NOISE_LOG_SD) -> tuple[float, float]:
    """(mu, sigma) of a log-normal matched to positive draws, sigma floored at `floor`."""
    logs = np.log(np.asarray(draws, float).ravel())
    logs = logs[np.isfinite(logs)]
    return float(logs.mean()), float(max(logs.std(), floor))


def _stacked(post, name) -> np.ndarray:
    arr = post[name]
    return arr.stack(sample=("chain", "draw")).transpose("sample", ...).values


# ---------------------------------------------------------------------- model
def build_calibration_model(parent, configs: pd.DataFrame, obs: pd.DataFrame,
                            priors: list[dict], beta_f: list, alpha_f: list):
    """The PyMC model of the new configurations (module docstring, step 2), over beta
    features `beta_f` and alpha features `alpha_f` (the order of the priors' vectors);
    `obs` non-empty."""
    import pymc as pm
    import pytensor.tensor as pt

    from bayesblis.model.hierarchy import (EXACT_KINDS, _segment_dot, _student_t,
                                           relative_scale, student_t_logp)

    data = ModelData(configs=configs, obs=obs)
    obs = data.obs
    n_beta, n_alpha, n_cfg = len(beta_f), len(alpha_f), len(configs)
    matrix = lambda prefix, names: np.column_stack(  # noqa: E731
        [obs[f"{prefix}{f}"].to_numpy(float) if f"{prefix}{f}" in obs else np.zeros(len(obs))
         for f in names])
    X, XA = matrix("f_", beta_f), matrix("a_", alpha_f)
    bounds = data.config_bounds()
    n_steps = obs["n_steps"].to_numpy(float)
    kinds = data.kinds()
    kind_idx = obs["kind"].astype(str).map({k: i for i, k in enumerate(kinds)}).to_numpy(np.int64)
    approx = [k for k in kinds if k not in EXACT_KINDS]
    post = parent.idata.posterior
    hyper = parent.priors["hyper"]
    coords = {DIM_CONFIG: list(configs["config"]), DIM_FEATURE: beta_f,
              DIM_ALPHA_FEATURE: alpha_f, "coefficient": beta_f + alpha_f,
              DIM_OBS: np.arange(len(obs))}
    with pm.Model(coords=coords) as model:
        thetas = []
        floor = priors[0]["floor"]
        for c, prior in enumerate(priors):
            reference = np.abs(X[bounds[c]:bounds[c + 1]]).sum(axis=0)
            groups = sum_groups(beta_f, reference, floor)
            mean, cov = _moments(to_sum_coordinates(prior["draws"], groups, reference)) \
                if groups else (prior["mean"], prior["cov"])
            z = pm.Normal(f"calib_z_{c}", 0.0, 1.0, dims="coefficient")
            u = mean + pt.dot(np.linalg.cholesky(cov), z)
            thetas.append(from_sum_coordinates(u, groups, reference))
        theta = pt.stack(thetas)
        beta = pm.Deterministic("beta", tie_columns(floor[:n_beta] + pt.exp(theta[:, :n_beta]),
                                                    beta_f), dims=(DIM_CONFIG, DIM_FEATURE))
        alpha = pm.Deterministic("alpha", floor[n_beta:] + pt.exp(theta[:, n_beta:]),
                                 dims=(DIM_CONFIG, DIM_ALPHA_FEATURE))
        sig = np.array([_lognormal(p["sigma_step"]) for p in priors])
        sigma_step = pm.LogNormal("sigma_step", sig[:, 0], sig[:, 1], dims=DIM_CONFIG)
        nu_mu, nu_sd = _lognormal(_stacked(post, "nu") - 2.0)
        nu = pm.Deterministic("nu", 2.0 + pm.LogNormal("nu_excess", nu_mu, nu_sd))
        kind_sigma = None
        if approx:
            model.add_coord("approx_kind", approx)
            parent_kinds = ([str(k) for k in post["approx_kind"].values]
                            if "sigma_kind" in post else [])
            parts = []
            for k in approx:
                if k in parent_kinds:
                    draws = _stacked(post, "sigma_kind")[:, parent_kinds.index(k)]
                    mu, sd = _lognormal(draws)
                    parts.append(pm.LogNormal(f"sigma_kind_{k}", mu, sd))
                else:
                    parts.append(pm.HalfNormal(f"sigma_kind_{k}", hyper["sigma_kind"]))
            sigma_approx = pm.Deterministic("sigma_kind", pt.stack(parts), dims="approx_kind")
            slot = np.array([approx.index(k) if k in approx else 0 for k in kinds])
            exact = np.array([k in EXACT_KINDS for k in kinds])
            kind_sigma = pt.switch(exact, 0.0, sigma_approx[slot])[kind_idx]
        segment = np.asarray(bounds)
        mean = _segment_dot(X, beta, segment, n_cfg)
        if XA.any():
            mean = mean + _segment_dot(XA, alpha, segment, n_cfg)
        cfg = data.index_of(obs)
        rel = relative_scale(sigma_step[cfg], n_steps, kind_sigma)
        pm.CustomDist("y_obs", nu, mean, mean * rel, dist=_student_t, logp=student_t_logp,
                      observed=obs["y_s"].to_numpy(float), dims=DIM_OBS)
    return model, data


def _sample(model, cfg: dict, progressbar: bool) -> tuple[object, dict | None]:
    import nutpie

    from bayesblis.model.laplace import (can_precondition, find_laplace, logp_grad_of,
                                         precondition)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = nutpie.compile_pymc_model(model, backend="jax", gradient_backend="jax")
    info = None
    if cfg.get("laplace", True) and can_precondition(compiled):
        laplace = find_laplace(logp_grad_of(compiled), compiled._make_initial_points(cfg["seed"]))
        info = laplace.summary()
        compiled = precondition(compiled, laplace)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = nutpie.sample(compiled, draws=cfg["draws"], tune=cfg["tune"],
                              chains=cfg["chains"], cores=min(cfg["chains"], 2),
                              target_accept=cfg["target_accept"], seed=cfg["seed"],
                              progress_bar=progressbar, save_warmup=False,
                              maxdepth=cfg["max_treedepth"])
    return idata, info


def _prior_idata(parent, configs, priors, cfg, beta_f, alpha_f):
    """Exact draws of the calibration prior (no data): an InferenceData like a fit's."""
    import arviz as az

    rng = np.random.default_rng(cfg["seed"])
    shape = (cfg["chains"], cfg["draws"])
    n_beta = len(beta_f)
    theta = np.stack([rng.multivariate_normal(p["mean"], p["cov"], size=shape) for p in priors],
                     axis=2)  # chain, draw, config, K
    floor = priors[0]["floor"]
    nu_mu, nu_sd = _lognormal(_stacked(parent.idata.posterior, "nu") - 2.0)
    sig = np.stack([np.exp(rng.normal(*_lognormal(p["sigma_step"]), size=shape))
                    for p in priors], axis=2)
    return az.from_dict(
        posterior={"beta": tie_columns(floor[:n_beta] + np.exp(theta[..., :n_beta]), beta_f),
                   "alpha": floor[n_beta:] + np.exp(theta[..., n_beta:]),
                   "sigma_step": sig, "nu": 2.0 + np.exp(rng.normal(nu_mu, nu_sd, size=shape))},
        coords={DIM_CONFIG: list(configs["config"]), DIM_FEATURE: list(beta_f),
                DIM_ALPHA_FEATURE: list(alpha_f)},
        dims={"beta": [DIM_CONFIG, DIM_FEATURE], "alpha": [DIM_CONFIG, DIM_ALPHA_FEATURE],
              "sigma_step": [DIM_CONFIG]})


def _extra_features(parent, obs: pd.DataFrame) -> tuple[list, list]:
    """(beta, alpha) features the calibration data use (non-zero) that the parent was not
    fitted with; a feature without any prior is an error."""
    from bayesblis.model.priors import merge_priors

    known = merge_priors(None)
    out = []
    for prefix, section, fitted in (("f_", "beta", parent.beta_features),
                                    ("a_", "alpha", parent.alpha_features)):
        names = [c[2:] for c in obs.columns if c.startswith(prefix) and c[2:] not in fitted
                 and obs[c].astype(float).abs().sum() > 0]
        unknown = [f for f in names if f not in known[section]
                   and f not in parent.priors.get(section, {})]
        if unknown:
            raise BayesBlisError(f"no prior for calibration feature(s) {unknown}")
        out.append(names)
    return out[0], out[1]


class Calibration:
    """A calibrated posterior (duck-types the `LatencyModel` fields `save_posterior` reads)."""

    def __init__(self, parent, idata, data: ModelData, fit_info: dict, beta_features,
                 alpha_features):
        self.parent, self.idata, self.data, self.fit_info = parent, idata, data, fit_info
        self.beta_features = list(beta_features)
        self.alpha_features = list(alpha_features)
        self.priors = parent.priors

    def model_config_json(self) -> str:
        return json.dumps({"priors": self.priors, "beta_features": self.beta_features,
                           "alpha_features": self.alpha_features,
                           "calibration_of": self.fit_info["calibration"]["parent"]})

    def view(self):
        """A `store.Posterior` over this calibration (coefficients, simulate in memory)."""
        from bayesblis.model.store import Posterior

        return Posterior.of_fit(self)


def calibrate(parent, configs: pd.DataFrame, obs: pd.DataFrame | None = None, *,
              sampler_config: dict | None = None, progressbar: bool = False,
              seed: int = 0, as_new: bool = False) -> Calibration:
    """Calibrate `parent` (a `store.Posterior` or a path) to `configs` (configuration
    table rows) with observations `obs` (may be None or empty: the prior's draws).
    `as_new`: fitted configurations get the population-level prior too
    (`population_prior`)."""
    from bayesblis.model.diagnostics import diagnose
    from bayesblis.model.store import load_posterior

    started = time.perf_counter()
    if not hasattr(parent, "idata"):
        parent = load_posterior(parent)
    cfg = {**DEFAULT_SAMPLER, **(sampler_config or {})}
    configs = configs[list(CONFIG_COLUMNS)].drop_duplicates("config").reset_index(drop=True)
    obs = (pd.DataFrame() if obs is None or not len(obs)
           else obs[obs["config"].isin(configs["config"])])
    extra_beta, extra_alpha = _extra_features(parent, obs) if len(obs) else ([], [])
    beta_f = list(parent.beta_features) + extra_beta
    alpha_f = list(parent.alpha_features) + extra_alpha
    priors = [population_prior(parent, row, seed=seed + 1000 * i, extra_beta=extra_beta,
                               extra_alpha=extra_alpha, as_new=as_new)
              for i, row in enumerate(configs.to_dict("records"))]
    prior_s = time.perf_counter() - started
    info = {"parent": str(parent.path) if parent.path else None, "prior_wall_s": prior_s,
            "as_new": as_new, "n_obs": int(len(obs)),
            "features_without_fit": extra_beta + extra_alpha,
            "obs_per_config": obs["config"].value_counts().to_dict() if len(obs) else {},
            "seen_config": {k: p["seen_config"] for k, p in zip(configs["config"], priors)},
            "unseen_levels": {k: p["unseen_levels"] for k, p in zip(configs["config"], priors)},
            "prior": {k: {"mean": p["mean"].tolist(),
                          "sd": np.sqrt(np.diag(p["cov"])).tolist(),
                          "floor": p["floor"].tolist()}
                      for k, p in zip(configs["config"], priors)}}
    if len(obs):
        model, data = build_calibration_model(parent, configs, obs, priors, beta_f, alpha_f)
        idata, laplace = _sample(model, cfg, progressbar)
        method = "nuts"
        info["laplace"] = laplace
    else:
        idata = _prior_idata(parent, configs, priors, cfg, beta_f, alpha_f)
        data = None
        method = "prior"
    post = idata.posterior
    if "tau_run" in parent.idata.posterior:  # a simulated new run draws the parent's factor
        tau = _stacked(parent.idata.posterior, "tau_run")
        pick = np.random.default_rng(cfg["seed"]).integers(0, len(tau), (post.sizes["chain"],
                                                                        post.sizes["draw"]))
        post["tau_run"] = (("chain", "draw"), tau[pick])
    wall = time.perf_counter() - started
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        diagnostics = (diagnose(idata, "nuts") if method == "nuts"
                       else {"method": "prior", "passed": None,
                             "note": "no calibration data: exact draws of the prior"})
    fit_info = {"method": f"calibration ({method})", "wall_s": wall, "n_obs": int(len(obs)),
                "obs_per_kind": obs["kind"].value_counts().to_dict() if len(obs) else {},
                "sampler_config": cfg, "diagnostics": diagnostics, "calibration": info,
                "physical_bounds": _bound_report(post, obs, priors[0]["floor"], beta_f)}
    if data is None:  # keep the configurations (and an empty table) for the file
        data = _EmptyData(configs)
    return Calibration(parent, idata, data, fit_info, beta_f, alpha_f)


def _bound_report(post, obs: pd.DataFrame, floor, beta_f) -> list[dict]:
    """`model.bounds.physical_bound_report` of the calibrated coefficients the traffic
    informs (none without observations: the prior is the parent's population)."""
    from bayesblis.model.bounds import physical_bound_report

    if not len(obs):
        return []
    return physical_bound_report(post, obs, floors=dict(zip(beta_f, np.asarray(floor, float))))


class _EmptyData:
    """Configurations without observations (a calibration on zero requests)."""

    def __init__(self, configs):
        self.configs = configs
        self.obs = pd.DataFrame({"config": pd.Series([], dtype=object)})


def save_calibration(calibration: Calibration, path) -> Path:
    """Write a calibrated posterior file (`store.save_posterior` layout, plus the
    `CALIBRATION_ATTR` attribute naming the parent)."""
    from bayesblis.model.store import save_posterior

    parent = calibration.fit_info["calibration"]["parent"]
    calibration.idata.posterior.attrs[CALIBRATION_ATTR] = str(parent)
    return save_posterior(calibration, path)


def format_calibration(calibration: Calibration, prob: float | None = None) -> str:
    """Per configuration: each coefficient's prior (population) and calibrated median and
    interval, and how much the interval narrowed."""
    from scipy.stats import norm

    from bayesblis.coefficients import summarize_draws
    from bayesblis.constants import CI_PROB

    prob = CI_PROB if prob is None else prob
    post = calibration.idata.posterior
    names = calibration.beta_features + calibration.alpha_features
    lines = []
    for key in calibration.data.configs["config"]:
        prior = calibration.fit_info["calibration"]["prior"][key]
        pct = int(round(prob * 100))
        lines.append(f"configuration {key}: "
                     f"{calibration.fit_info['calibration']['obs_per_config'].get(key, 0)} "
                     "calibration windows")
        lines.append(f"  {'coefficient':<22} {'prior median':>12} {f'prior {pct}%':>22} "
                     f"{'calibrated':>11} {f'calibrated {pct}%':>22} {'width':>7}")
        z = float(norm.ppf((1 + prob) / 2))
        for j, name in enumerate(names):
            var, dim = (("beta", DIM_FEATURE) if j < len(calibration.beta_features)
                        else ("alpha", DIM_ALPHA_FEATURE))
            draws = post[var].sel({DIM_CONFIG: key, dim: name}).values
            s = summarize_draws(draws, prob)
            m, sd = prior["mean"][j], prior["sd"][j]
            floor = prior.get("floor", [0.0] * len(names))[j]
            plo, phi = floor + np.exp(m - z * sd), floor + np.exp(m + z * sd)
            ratio = (s["hi"] - s["lo"]) / (phi - plo) if phi > plo else float("nan")
            lines.append(f"  {name:<22} {floor + np.exp(m):>12.4g} "
                         f"{'[' + format(plo, '.3g') + ', ' + format(phi, '.3g') + ']':>22} "
                         f"{s['median']:>11.4g} "
                         f"{'[' + format(s['lo'], '.3g') + ', ' + format(s['hi'], '.3g') + ']':>22}"
                         f" {ratio:>6.2f}x")
    return "\n".join(lines)
