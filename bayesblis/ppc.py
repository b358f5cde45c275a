"""Posterior-predictive checks per configuration and observation kind (`bayesblis check`).

The fitted model is rebuilt from the observation table stored in the posterior file
(`model.store.OBS_GROUP`; older files: rebuilt from the dataset folder) and, for a
thinned set of posterior draws,

- replicated observations ``y_rep`` come from `LatencyModel.sample_posterior_predictive`
  (the ``y_obs`` likelihood, Student-t on the natural scale);
- the pointwise log-likelihood from `pm.compute_log_likelihood` feeds PSIS-LOO (ArviZ).

Per configuration (all kinds together, and each kind apart) the summary holds: the
observed mean against the replicated means (posterior-predictive p-value), the coverage
of the central 50% and 90% predictive intervals, the PIT values (fraction of replicated
draws below the observation) and their Kolmogorov-Smirnov distance from uniform, the
LOO elpd and the share of observations whose Pareto k exceeds 0.7. A row is *flagged*
when (with at least `MIN_OBS_FLAG` observations) its 90% coverage falls outside
`COVERAGE90_RANGE`, its PIT KS distance is both large (> `PIT_KS_MIN`) and significant
(> the 1% critical value 1.63/sqrt(n)), its observed mean lies outside the central 99%
of the replicated means and more than 5% off their mean, or more than `PARETO_K_SHARE_MAX` of its Pareto k exceed 0.7.
The PIT here is in-sample (the observations were fitted): a good fit gives roughly
uniform PIT, over-dispersion shows as too high coverage and a central PIT bump. Per
configuration, the load response (`load_response`) bins the step windows by requests in
flight and compares the observed time per step with the replicated one: how well the step
features price the growth of the step with the batch. The prior predictive check
(`prior_predictive_rows`) replicates the observations from the prior draws `fit` stores:
where each configuration's observed median falls among the prior's. The JSON layout is in
data_specs/check.md.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone

import numpy as np
import pandas as pd

from bayesblis.constants import DIM_OBS
from bayesblis.errors import BayesBlisError, InputError

CHECK_VERSION = "1"

COVERAGE_PROBS = (0.5, 0.9)
"""Central predictive intervals whose coverage is reported."""

COVERAGE90_RANGE = (0.80, 0.97)
"""A row is flagged when the coverage of its 90% predictive interval falls outside this."""

PIT_KS_MIN = 0.10
"""PIT KS distance below this is never flagged (with many observations a tiny but
significant deviation is not a poor fit)."""

PIT_KS_CRIT = 1.63
"""KS critical value factor at the 1% level: D > PIT_KS_CRIT / sqrt(n) is significant."""

PPP_MEAN_RANGE = (0.005, 0.995)
MEAN_RATIO_TOL = 0.05
"""Flag when the observed mean lies outside this central range of replicated means *and*
differs from their mean by more than MEAN_RATIO_TOL (relative): a 1% bias that many
observations make significant is not a poor fit."""

PARETO_K_BAD = 0.7
PARETO_K_SHARE_MAX = 0.10
"""Flag when more than this share of a row's observations have Pareto k > PARETO_K_BAD."""

MIN_OBS_FLAG = 10
"""Rows with fewer observations are reported but never flagged."""

ALL_KINDS = "all"

LOAD_BINS = 6
"""Bins (equal counts) of a configuration's step windows by requests in flight."""

LOAD_RATIO_TOL = 0.01
"""A load-response bin is marked only when its observed median lies outside the replicated
90% interval *and* more than this (relative) from it: with hundreds of windows a 0.5% bias
is significant but prices nothing."""

PRIOR_P_RANGE = (0.005, 0.995)
"""A prior predictive row is a *conflict* when its observed median lies outside this central
range of the prior's replicated medians: the priors put almost no mass on the data's scale."""

LOAD_MIN_STEPS = 8
"""Windows of fewer engine steps are left out of the load response: a TTFT window (~2.5
steps) is mostly request-level delay, not step time."""


class CheckError(BayesBlisError):
    """A posterior-predictive check cannot be run (e.g. no observations stored)."""


# ---------------------------------------------------------------------- statistics
def pit_values(y, y_rep) -> np.ndarray:
    """PIT of each observation: fraction of replicated draws below it (ties count half).

    `y`: [N]; `y_rep`: [S, N]. Returns [N] in [0, 1].
    """
    y = np.asarray(y, float)
    y_rep = np.asarray(y_rep, float)
    below = (y_rep < y[None, :]).mean(axis=0)
    equal = (y_rep == y[None, :]).mean(axis=0)
    return below + 0.5 * equal


def interval_coverage(y, y_rep, prob: float) -> np.ndarray:
    """Per observation: inside the central `prob` interval of its replicated draws (bool [N])."""
    y = np.asarray(y, float)
    lo, hi = np.quantile(np.asarray(y_rep, float), [(1 - prob) / 2, (1 + prob) / 2], axis=0)
    return (y >= lo) & (y <= hi)


def ks_uniform(pit) -> float:
    """Kolmogorov-Smirnov distance of the empirical CDF of `pit` from Uniform(0, 1)."""
    u = np.sort(np.clip(np.asarray(pit, float), 0.0, 1.0))
    n = len(u)
    if n == 0:
        return float("nan")
    i = np.arange(1, n + 1)
    return float(max(np.max(i / n - u), np.max(u - (i - 1) / n)))


def ks_pvalue(distance: float, n: int) -> float:
    """Asymptotic-exact p-value of a one-sample KS distance (scipy's kstwo)."""
    from scipy.stats import kstwo

    if n == 0 or not np.isfinite(distance):
        return float("nan")
    return float(kstwo.sf(distance, n))


def _finite(v):
    v = float(v)
    return v if np.isfinite(v) else None


# ---------------------------------------------------------------------- draws
@dataclass
class PredictiveDraws:
    """Everything a check or a report needs: observations, replicated draws, LOO."""

    data: object  # ModelData
    y_rep: np.ndarray  # [S, N]
    log_lik: object = None  # xarray DataArray (chain, draw, obs) or None
    loo: object = None  # arviz ELPDData (pointwise) or None
    source: str = "stored"  # where the observations came from
    seed: int = 0
    notes: list = field(default_factory=list)
    y_prior: np.ndarray | None = None  # [S, N] replicates from the stored prior draws

    @property
    def y(self) -> np.ndarray:
        return self.data.obs["y_s"].to_numpy(float)

    @property
    def pareto_k(self):
        return None if self.loo is None else np.asarray(self.loo.pareto_k).ravel()


def observation_data(posterior, dataset=None, *, hardware: str | None = None, seed: int = 0,
                     max_obs_per_config: int | None = None):
    """The fitted `ModelData`: stored in the file, else rebuilt from `dataset` (a folder).

    A rebuilt table uses the kinds the fit saw (fit_info) and may differ from the fitted
    rows when the fit subsampled; the check then says so in its notes.
    """
    if getattr(posterior, "data", None) is not None:
        return posterior.data, "stored", []
    if dataset is None:
        raise CheckError(
            f"{posterior.path}: the posterior file holds no observation table (written before "
            "bayesblis stored it); refit, or pass the dataset folder it was fitted on "
            "(CLI: --dataset DATASET)")
    from bayesblis.design import build_model_data
    from bayesblis.io.dataset import Dataset

    ds = Dataset.load(dataset)
    kinds = sorted((posterior.fit_info.get("obs_per_kind") or {}).keys()) or None
    data = build_model_data(ds, hardware=hardware, kinds=kinds, seed=seed,
                            max_obs_per_config=max_obs_per_config)
    fitted = list(posterior.configs["config"])
    data_cfg = set(data.configs["config"])
    if set(fitted) - data_cfg:
        raise InputError(dataset, "the dataset lacks configurations the posterior was fitted on: "
                         f"{sorted(set(fitted) - data_cfg)[:3]}")
    from bayesblis.model.data import ModelData

    obs = data.obs[data.obs["config"].isin(fitted)]
    data = ModelData(configs=posterior.configs.copy(), obs=obs)
    notes = [f"observations rebuilt from {dataset} (kinds {kinds}); "
             f"{len(obs)} rows vs {posterior.fit_info.get('n_obs')} fitted"]
    return data, f"rebuilt from {dataset}", notes


def rebuild_model(posterior, data):
    """A `LatencyModel` built on `data` with the posterior's priors (no sampling)."""
    from bayesblis.model.hierarchy import LatencyModel

    sampler = (posterior.fit_info or {}).get("sampler_config") or {}
    model = LatencyModel(priors=posterior.priors, sampler_config=sampler)
    model.build_model(data)
    if list(model.beta_features) != list(posterior.beta_features):
        raise CheckError(f"{posterior.path}: rebuilt model has beta features "
                         f"{model.beta_features}, the posterior {posterior.beta_features}")
    post = posterior.idata.posterior
    missing = [rv.name for rv in model.model.free_RVs if rv.name not in post]
    if missing:  # PyMC would silently draw them from their priors
        raise CheckError(f"{posterior.path}: the file lacks draws of {missing[:4]} that this "
                         "bayesblis's model has: it was written by another model layout; refit it")
    return model


def thin_posterior(post, n_draws: int | None):
    """At most about `n_draws` draws in total (evenly spaced per chain); variables over
    the observation dimension are dropped (they are recomputed for the checked data)."""
    drop = [v for v in post.data_vars if DIM_OBS in post[v].dims]
    post = post.drop_vars(drop)
    n_chain, n_draw = int(post.sizes["chain"]), int(post.sizes["draw"])
    if n_draws and n_chain * n_draw > n_draws:
        per_chain = max(1, n_draws // n_chain)
        idx = np.unique(np.linspace(0, n_draw - 1, per_chain).round().astype(int))
        post = post.isel(draw=idx)
    return post


def predictive_draws(posterior, *, n_draws: int = 200, seed: int = 0, loo: bool = True,
                     dataset=None, hardware: str | None = None,
                     max_obs_per_config: int | None = None) -> PredictiveDraws:
    """Replicated observations and (if `loo`) PSIS-LOO for the fitted observations."""
    import arviz as az
    import pymc as pm

    data, source, notes = observation_data(posterior, dataset, hardware=hardware, seed=seed,
                                           max_obs_per_config=max_obs_per_config)
    model = rebuild_model(posterior, data)
    thin = thin_posterior(posterior.idata.posterior, n_draws)
    try:
        y_rep = replicate(model, thin, seed)
    except (TypeError, ValueError, KeyError) as exc:
        raise CheckError(
            f"{posterior.path}: the stored draws do not fit the model this bayesblis builds "
            f"({type(exc).__name__}: {str(exc)[:200]}); the file was written by another "
            "model layout: refit it") from exc
    out = PredictiveDraws(data=data, y_rep=y_rep, source=source, seed=seed, notes=notes)
    out.y_prior = _prior_replicates(posterior, model, seed, out.notes)
    if loo:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                ll = pm.compute_log_likelihood(az.InferenceData(posterior=thin),
                                               var_names=["y_obs"], model=model.model,
                                               extend_inferencedata=False, progressbar=False)
            except (KeyError, ValueError, TypeError) as exc:  # e.g. no transformed values stored
                out.notes.append(f"PSIS-LOO not computed: the log-likelihood could not be "
                                 f"evaluated ({type(exc).__name__}: {str(exc)[:120]})")
                return out
            ll = getattr(ll, "log_likelihood", ll)  # a Dataset when not extending
            out.log_lik = ll["y_obs"]
            out.loo = az.loo(az.InferenceData(posterior=thin, log_likelihood=ll), pointwise=True)
    return out


def replicate(model, draws, seed: int) -> np.ndarray:
    """Replicated observations [S, N] of `model`'s ``y_obs`` for every draw of `draws` (an
    xarray Dataset over chain x draw holding the model's free variables)."""
    import arviz as az

    model.idata = az.InferenceData(posterior=draws)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ppc = model.sample_posterior_predictive(seed=seed)
    rep = ppc.posterior_predictive["y_obs"] if hasattr(ppc, "posterior_predictive") else ppc["y_obs"]
    return np.asarray(rep.stack(sample=("chain", "draw")).transpose("sample", ...).values, float)


def _prior_replicates(posterior, model, seed: int, notes: list) -> np.ndarray | None:
    """Replicates from the prior draws `fit` stored (group ``prior``); None, with a note,
    when the file has none or they lack a free variable of the model."""
    if "prior" not in posterior.idata.groups():
        notes.append("no prior predictive check: the posterior file holds no prior draws "
                     "(`bayesblis fit` stores 100)")
        return None
    prior = posterior.idata.prior
    prior = prior.drop_vars([v for v in prior.data_vars if DIM_OBS in prior[v].dims])
    missing = [rv.name for rv in model.model.free_RVs if rv.name not in prior]
    if missing:
        notes.append(f"no prior predictive check: the stored prior draws lack {missing[:4]}")
        return None
    return replicate(model, prior, seed)


# ---------------------------------------------------------------------- summary
def _row(config, kind, y, y_rep, idx, pareto_k, elpd_i) -> dict:
    yy, rep = y[idx], y_rep[:, idx]
    n = len(idx)
    pit = pit_values(yy, rep)
    rep_means = rep.mean(axis=1)
    obs_mean = float(yy.mean())
    row = {"config": config, "kind": kind, "n_obs": int(n),
           "observed_mean_s": obs_mean,
           "replicated_mean_s": float(rep_means.mean()),
           "replicated_mean_lo_s": float(np.quantile(rep_means, 0.05)),
           "replicated_mean_hi_s": float(np.quantile(rep_means, 0.95)),
           "mean_ratio": _finite(obs_mean / rep_means.mean()) if rep_means.mean() else None,
           "ppp_mean": float(np.mean(rep_means >= obs_mean)),
           "pit_mean": float(pit.mean()),
           "pit_ks": ks_uniform(pit)}
    row["pit_ks_p"] = ks_pvalue(row["pit_ks"], n)
    for prob in COVERAGE_PROBS:
        row[f"coverage_{int(round(prob * 100))}"] = float(interval_coverage(yy, rep, prob).mean())
    if pareto_k is not None:
        k = pareto_k[idx]
        row["elpd_loo"] = float(np.sum(elpd_i[idx]))
        row["pareto_k_max"] = float(np.max(k))
        row["pareto_k_bad_share"] = float(np.mean(k > PARETO_K_BAD))
    else:
        row["elpd_loo"] = row["pareto_k_max"] = row["pareto_k_bad_share"] = None
    row["reasons"] = flag_reasons(row)
    row["flagged"] = bool(row["reasons"])
    return row


def flag_reasons(row: dict) -> list[str]:
    """Why a summary row indicates a poor fit (empty: no flag)."""
    n = row["n_obs"]
    if n < MIN_OBS_FLAG:
        return []
    reasons = []
    cov = row["coverage_90"]
    if not COVERAGE90_RANGE[0] <= cov <= COVERAGE90_RANGE[1]:
        reasons.append(f"90% interval coverage {cov:.3f} outside "
                       f"[{COVERAGE90_RANGE[0]:.2f}, {COVERAGE90_RANGE[1]:.2f}]")
    limit = max(PIT_KS_MIN, PIT_KS_CRIT / np.sqrt(n))
    if row["pit_ks"] > limit:
        reasons.append(f"PIT KS distance {row['pit_ks']:.3f} > {limit:.3f}")
    ratio = row.get("mean_ratio")
    if (not PPP_MEAN_RANGE[0] <= row["ppp_mean"] <= PPP_MEAN_RANGE[1]
            and (ratio is None or abs(ratio - 1.0) > MEAN_RATIO_TOL)):
        reasons.append(f"observed mean {row['observed_mean_s']:.4g} s is {ratio:.2f}x the "
                       f"replicated mean, outside the central 99% of replicated means "
                       f"(p={row['ppp_mean']:.3f})")
    share = row.get("pareto_k_bad_share")
    if share is not None and share > PARETO_K_SHARE_MAX:
        reasons.append(f"{share:.0%} of Pareto k > {PARETO_K_BAD} (LOO unreliable)")
    return reasons


def row_groups(data):
    """(configuration, kind, observation indices) of every summary row: per configuration
    its observations of all kinds (kind 'all'), then each kind in sorted order."""
    configs = data.obs["config"].astype(str).to_numpy()
    kinds = data.obs["kind"].astype(str).to_numpy()
    for cfg in data.configs["config"].astype(str):
        in_cfg = configs == cfg
        if not in_cfg.any():
            continue
        yield cfg, ALL_KINDS, np.flatnonzero(in_cfg)
        for kind in sorted(set(kinds[in_cfg])):
            yield cfg, kind, np.flatnonzero(in_cfg & (kinds == kind))


def summarize_checks(draws: PredictiveDraws) -> list[dict]:
    """One row per configuration (kind 'all') and per configuration x kind."""
    k = draws.pareto_k
    elpd_i = None if draws.loo is None else np.asarray(draws.loo.loo_i).ravel()
    return [_row(cfg, kind, draws.y, draws.y_rep, idx, k, elpd_i)
            for cfg, kind, idx in row_groups(draws.data)]


def prior_predictive_rows(draws: PredictiveDraws) -> list[dict]:
    """Per configuration (kind 'all') and configuration x kind: the observed median against
    the medians of the prior's replicates (robust: a prior draw with few degrees of freedom
    has a heavy-tailed mean). Empty without prior replicates."""
    if draws.y_prior is None:
        return []
    rows = []
    for cfg, kind, idx in row_groups(draws.data):
        observed = float(np.median(draws.y[idx]))
        medians = np.median(draws.y_prior[:, idx], axis=1)
        medians = medians[np.isfinite(medians)]
        p = float(np.mean(medians <= observed))
        centre = float(np.median(medians))
        rows.append({"config": cfg, "kind": kind, "n_obs": int(len(idx)),
                     "observed_median_s": observed, "prior_median_s": centre,
                     "prior_median_lo_s": float(np.quantile(medians, 0.05)),
                     "prior_median_hi_s": float(np.quantile(medians, 0.95)),
                     "median_ratio": _finite(observed / centre) if centre > 0 else None,
                     "prior_p": p,
                     "conflict": not PRIOR_P_RANGE[0] <= p <= PRIOR_P_RANGE[1]})
    return rows


def format_prior_predictive(doc: dict) -> list[str]:
    """The prior predictive lines `bayesblis check` prints."""
    prior = doc.get("prior_predictive")
    if not prior:
        return []
    lines = [f"prior predictive ({prior['n_draws']} prior draws): observed median against the "
             "prior's replicated medians",
             f"{'configuration':<40}{'kind':<18}{'observed':>10}{'prior median [5%, 95%]':>30}"
             f"{'p':>7}"]
    for r in prior["rows"]:
        name = r["config"] if r["kind"] == ALL_KINDS else ""
        span = (f"{r['prior_median_s']:.4g} [{r['prior_median_lo_s']:.3g}, "
                f"{r['prior_median_hi_s']:.3g}]")
        lines.append(f"{name[:39]:<40}{r['kind'][:17]:<18}{r['observed_median_s']:>10.4g}"
                     f"{span:>30}{r['prior_p']:>7.3f}" + ("  CONFLICT" if r["conflict"] else ""))
    return lines


def load_response(draws: PredictiveDraws, n_bins: int = LOAD_BINS,
                  min_steps: int = LOAD_MIN_STEPS) -> list[dict]:
    """Per configuration, its windows of at least `min_steps` engine steps in `n_bins`
    equal-count bins of mean requests in flight (`discrepancy.window_batch`): the observed
    median time per step against the replicated one (median over the bin per draw; its
    median and 90% interval over draws). Linear step features that mis-price how the step
    grows with the batch leave a pattern in `ratio` (observed / replicated) along the bins,
    and `outside` marks a bin whose observed median lies outside the replicated 90%
    interval by more than LOAD_RATIO_TOL. `fitted_load`: the configuration's
    `discrepancy.fitted_load`, where its predictions start to extrapolate."""
    from bayesblis.discrepancy import fitted_load, window_batch

    obs = draws.data.obs
    batch = window_batch(obs)
    steps = obs["n_steps"].to_numpy(float)
    usable = np.isfinite(batch) & (batch > 0) & (steps >= min_steps)
    per_step_obs = np.where(usable, draws.y / np.where(usable, steps, 1.0), np.nan)
    configs = obs["config"].astype(str).to_numpy()
    out = []
    for cfg in dict.fromkeys(configs):
        idx = np.flatnonzero(usable & (configs == cfg))
        if len(idx) < 3 * n_bins:
            continue
        edges = np.unique(np.quantile(batch[idx], np.linspace(0.0, 1.0, n_bins + 1)))
        if len(edges) < 2:  # one batch size throughout: no load response to show
            continue
        which = np.clip(np.searchsorted(edges, batch[idx], side="right") - 1, 0, len(edges) - 2)
        replicated = draws.y_rep[:, idx] / steps[idx]
        bins = []
        for b in range(len(edges) - 1):
            sel = which == b
            if sel.sum() < 3:
                continue
            rep = np.median(replicated[:, sel], axis=1)
            observed = float(np.median(per_step_obs[idx][sel]))
            lo, mid, hi = (float(v) for v in np.quantile(rep, [0.05, 0.5, 0.95]))
            bins.append({"in_flight_lo": float(edges[b]), "in_flight_hi": float(edges[b + 1]),
                         "in_flight": float(np.median(batch[idx][sel])), "n_obs": int(sel.sum()),
                         "observed_step_s": observed, "replicated_step_s": mid,
                         "replicated_lo_s": lo, "replicated_hi_s": hi,
                         "ratio": observed / mid,
                         "outside": bool(not lo <= observed <= hi
                                         and abs(observed / mid - 1) > LOAD_RATIO_TOL)})
        out.append({"config": cfg, "fitted_load": fitted_load(obs, cfg), "bins": bins})
    return out


def format_load_response(entries: list[dict]) -> list[str]:
    """Text lines of `load_response`: per configuration, observed / replicated time per step
    by requests in flight (* a marked bin)."""
    if not entries:
        return []
    lines = ["load response: observed / replicated time per step, by requests in flight "
             f"(* outside the replicated 90% interval and over {LOAD_RATIO_TOL:.0%} off)"]
    for e in entries:
        cells = " | ".join(f"{b['in_flight_lo']:.0f}-{b['in_flight_hi']:.0f}: {b['ratio']:.3f}"
                           + ("*" if b["outside"] else "") for b in e["bins"])
        load = "" if e["fitted_load"] is None else f" (fitted load {e['fitted_load']:.0f})"
        lines.append(f"  {e['config'][:38]:<39}{cells}{load}")
    return lines


def check_posterior(posterior, *, n_draws: int = 200, seed: int = 0, loo: bool = True,
                    dataset=None, hardware: str | None = None,
                    max_obs_per_config: int | None = None, return_draws: bool = False):
    """The CHECK.json document of a posterior (a path or a loaded `Posterior`)."""
    from bayesblis import __version__
    from bayesblis.model.store import load_posterior, package_versions

    if not hasattr(posterior, "idata"):
        posterior = load_posterior(posterior)
    draws = predictive_draws(posterior, n_draws=n_draws, seed=seed, loo=loo, dataset=dataset,
                             hardware=hardware, max_obs_per_config=max_obs_per_config)
    rows = summarize_checks(draws)
    flagged = sorted({r["config"] for r in rows if r["flagged"]})
    prior_rows = prior_predictive_rows(draws)
    loo_doc = None
    if draws.loo is not None:
        k = draws.pareto_k
        loo_doc = {"elpd_loo": float(draws.loo.elpd_loo), "se": float(draws.loo.se),
                   "p_loo": float(draws.loo.p_loo), "n_obs": int(len(k)),
                   "pareto_k_bad": int(np.sum(k > PARETO_K_BAD)),
                   "pareto_k_bad_share": float(np.mean(k > PARETO_K_BAD)),
                   "pareto_k_max": float(np.max(k))}
    doc = {
        "check_version": CHECK_VERSION,
        "posterior": posterior.path,
        "observations": draws.source,
        "n_obs": int(len(draws.y)),
        "n_draws": int(draws.y_rep.shape[0]),
        "seed": int(seed),
        "thresholds": {"coverage_90_range": list(COVERAGE90_RANGE), "pit_ks_min": PIT_KS_MIN,
                       "pit_ks_crit": PIT_KS_CRIT, "ppp_mean_range": list(PPP_MEAN_RANGE),
                       "mean_ratio_tol": MEAN_RATIO_TOL,
                       "pareto_k_bad": PARETO_K_BAD, "pareto_k_share_max": PARETO_K_SHARE_MAX,
                       "min_obs_flag": MIN_OBS_FLAG},
        "loo": loo_doc,
        "rows": rows,
        "flagged_configs": flagged,
        "passed": not flagged,
        "load_response": load_response(draws),
        "prior_predictive": None if draws.y_prior is None else {
            "n_draws": int(draws.y_prior.shape[0]), "p_range": list(PRIOR_P_RANGE),
            "rows": prior_rows,
            "conflicts": sorted({r["config"] for r in prior_rows if r["conflict"]})},
        "notes": list(draws.notes),
        "metadata": {"package_version": __version__, "versions": package_versions(),
                     "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds")},
    }
    return (doc, draws) if return_draws else doc


def format_check(doc: dict) -> str:
    """The table `bayesblis check` prints."""
    head = (f"{'configuration':<40}{'kind':<18}{'n':>6}{'obs/rep mean':>13}{'cov50':>7}"
            f"{'cov90':>7}{'PIT KS':>8}{'k>0.7':>7}  flag")
    lines = [head, "-" * len(head)]
    for r in doc["rows"]:
        name = r["config"] if r["kind"] == ALL_KINDS else ""
        ratio = "-" if r["mean_ratio"] is None else f"{r['mean_ratio']:.3f}"
        kbad = "-" if r["pareto_k_bad_share"] is None else f"{r['pareto_k_bad_share']:.0%}"
        flag = "POOR: " + "; ".join(r["reasons"]) if r["flagged"] else "ok"
        lines.append(f"{name[:39]:<40}{r['kind'][:17]:<18}{r['n_obs']:>6}{ratio:>13}"
                     f"{r['coverage_50']:>7.2f}{r['coverage_90']:>7.2f}{r['pit_ks']:>8.3f}"
                     f"{kbad:>7}  {flag}")
    if doc["loo"] is not None:
        lo = doc["loo"]
        lines.append(f"PSIS-LOO: elpd {lo['elpd_loo']:.1f} (se {lo['se']:.1f}), p_loo "
                     f"{lo['p_loo']:.1f}, Pareto k > {PARETO_K_BAD}: {lo['pareto_k_bad']} of "
                     f"{lo['n_obs']} ({lo['pareto_k_bad_share']:.1%})")
    lines.extend(format_load_response(doc.get("load_response") or []))
    lines.extend(format_prior_predictive(doc))
    lines.append(f"{doc['n_draws']} posterior draws, observations {doc['observations']}")
    for note in doc.get("notes", []):
        lines.append(f"note: {note}")
    if doc["flagged_configs"]:
        lines.append("poor fit: " + ", ".join(doc["flagged_configs"]))
    else:
        lines.append("no configuration flagged")
    return "\n".join(lines)


def rows_frame(doc: dict) -> pd.DataFrame:
    """The summary rows of a CHECK document as a DataFrame."""
    return pd.DataFrame(doc["rows"])
