"""The hierarchical latency model: construct, build, prior predictive, fit, posterior predictive.

For configuration ``c`` and coefficient ``k``::

    theta[c, k] = mu[k] + tau_arch[k] z_arch[a(c), k] + tau_hw[k] z_hw[h(c), k]
                + tau_family[k] z_family[f(c), k] + tau_config[k] z_config[c, k]
    beta[c, k]  = exp(theta[c, k])                         (non-centred, positive)

A window observation of ``n`` summed steps with summed features ``F`` has expected
duration ``m = F . beta[c]`` and likelihood::

    y ~ StudentT(nu, mu=m, sigma=m * sqrt(sigma_step[c]^2 / n + sigma_kind[kind]^2))

A run (one traced experiment) scales every expected duration by ``exp(tau_run z_run)``:
machines, drivers and days differ, and a prediction for a new run draws a new factor.
(Only when some configuration has several runs; otherwise a run is its configuration.)
``sigma_kind`` (0 for kinds in EXACT_KINDS) is the error of the window's source (a reconstructed client-side
window is less exact than a traced step gap) and does not shrink with ``n``. Alpha
features enter the same mean (``m = F . beta[c] + A . alpha[c]``), so a TTFT window holds
both the request-level delay and the steps it waited for.

The Student-t sits on the natural scale with a scale proportional to its location, so
``m`` is the *mean* step-time sum (finite for nu > 1; we use nu > 2). That is the choice
that keeps sums of step times unbiased: the simulator adds mean-one multiplicative noise to
``beta . f`` and E2E, a sum of steps, has mean ``sum beta . f``. (A Student-t on log time
has no finite mean once exponentiated.) Alpha (request-level delays) follows the same
hierarchy in the same likelihood.
"""

from __future__ import annotations

import json
import time
import warnings

import numpy as np
import pandas as pd
import pymc as pm
import pytensor.tensor as pt

from bayesblis.constants import (DIM_ALPHA_FEATURE, DIM_ARCH, DIM_CONFIG, DIM_FAMILY,
                                 DIM_FEATURE, DIM_HARDWARE, DIM_OBS)
from bayesblis.errors import BayesBlisError, FitNotDoneError
from bayesblis.model.data import ModelData
from bayesblis.model.priors import merge_priors

LEVELS = (("arch", DIM_ARCH, "arch"), ("hardware", DIM_HARDWARE, "hardware"),
          ("family", DIM_FAMILY, "model_family"))
"""(short name, dimension, configuration column) of each pooled level above `config`."""

EXACT_KINDS = frozenset({"window", "step", "step_gap", "decode_window"})
"""Observation kinds that are exact sums of traced steps: their only error is step noise.
Every other kind (client-side reconstructions, request-level delays) gets its own
non-shrinking relative error ``sigma_kind``."""

DEFAULT_SAMPLER = {"draws": 500, "tune": 500, "chains": 2, "target_accept": 0.9,
                   "low_rank_mass_matrix": False, "max_treedepth": 10,
                   "seed": 1, "advi_iterations": 30000, "advi_learning_rate": 0.01}


class LatencyModel:
    """Hierarchical alpha/beta latency model (see module docstring).

    Life cycle: ``LatencyModel(priors, sampler_config)`` -> ``build_model(data)`` ->
    ``sample_prior_predictive()`` -> ``fit()`` -> ``sample_posterior_predictive()``.
    Nothing samples in the constructor.
    """

    def __init__(self, priors: dict | None = None, sampler_config: dict | None = None):
        self.priors = merge_priors(priors)
        self.sampler_config = {**DEFAULT_SAMPLER, **(sampler_config or {})}
        self.data: ModelData | None = None
        self.model: pm.Model | None = None
        self._compiled = None
        self.idata = None
        self.fit_info: dict = {}

    # ------------------------------------------------------------------ build
    def build_model(self, data: ModelData, weighted: bool = False) -> pm.Model:
        """Create the PyMC model for `data` (no sampling).

        ``weighted=True`` multiplies each observation's log-likelihood by the data
        variable ``weight`` (initially 1): folds of a cross-validation then reuse one
        compiled model, held-out rows getting weight 0 (see `refit_weighted`).
        """
        self.data = data
        configs = data.configs
        obs = data.obs
        beta_cols = data.feature_columns(obs, "f_")
        self.beta_features = [c[2:] for c in beta_cols]
        self.alpha_features = list(self.priors["alpha"])
        unknown = [f for f in self.beta_features if f not in self.priors["beta"]]
        unknown += [c[2:] for c in data.feature_columns(obs, "a_") if c[2:] not in self.alpha_features]
        if unknown:
            raise BayesBlisError(f"no prior for feature(s) {unknown}; pass them in priors")
        alpha_matrix = np.zeros((len(obs), len(self.alpha_features)))
        for j, name in enumerate(self.alpha_features):
            if f"a_{name}" in obs.columns:
                alpha_matrix[:, j] = obs[f"a_{name}"].to_numpy(float)
        kinds = data.kinds()
        runs = data.runs()
        run_idx = obs["run"].astype(str).map({r: i for i, r in enumerate(runs)}).to_numpy(np.int64)
        kind_idx = obs["kind"].astype(str).map({k: i for i, k in enumerate(kinds)}).to_numpy(np.int64)

        coords = {
            DIM_FEATURE: self.beta_features,
            DIM_ALPHA_FEATURE: self.alpha_features,
            DIM_CONFIG: list(configs["config"]),
            DIM_OBS: np.arange(len(obs)),
            "kind": kinds,
            "run": runs,
        }
        level_index = {}
        for short, dim, column in LEVELS:
            labels = data.levels(column)
            coords[dim] = labels
            lookup = {v: i for i, v in enumerate(labels)}
            level_index[short] = configs[column].astype(str).map(lookup).to_numpy(np.int64)
        level_index["config"] = np.arange(len(configs))
        self.redundant_levels = redundant_levels(level_index)

        hyper = self.priors["hyper"]
        cfg_idx = data.index_of(obs)
        beta_matrix = obs[beta_cols].to_numpy(float)
        bounds = np.searchsorted(cfg_idx, np.arange(len(configs) + 1))  # obs sorted by config
        informed = {"beta": _informed(beta_matrix, bounds), "alpha": _informed(alpha_matrix, bounds)}
        with pm.Model(coords=coords) as model:
            beta = self._log_linear_coefficients("beta", DIM_FEATURE, self.priors["beta"],
                                                 self.beta_features, level_index, hyper,
                                                 informed["beta"], self.redundant_levels)
            alpha = self._log_linear_coefficients("alpha", DIM_ALPHA_FEATURE, self.priors["alpha"],
                                                  self.alpha_features, level_index, hyper,
                                                  informed["alpha"], self.redundant_levels)

            sigma_step = pm.HalfNormal("sigma_step", hyper["sigma_step"], dims=DIM_CONFIG)
            approx = np.array([k not in EXACT_KINDS for k in kinds], float)
            if approx.any():
                model.add_coord("approx_kind", [k for k in kinds if k not in EXACT_KINDS])
                sigma_approx = pm.HalfNormal("sigma_kind", hyper["sigma_kind"], dims="approx_kind")
                slot = np.cumsum(approx).astype(np.int64) - 1
                kind_sigma = pt.switch(approx > 0, sigma_approx[np.maximum(slot, 0)], 0.0)
            else:
                kind_sigma = pt.zeros(len(kinds))
            nu = pm.Deterministic(
                "nu", 2.0 + pm.Exponential("nu_excess", 1.0 / hyper["nu_excess_mean"]))

            X = pm.Data("X", beta_matrix, dims=(DIM_OBS, DIM_FEATURE))
            XA = pm.Data("XA", alpha_matrix, dims=(DIM_OBS, DIM_ALPHA_FEATURE))
            n_steps = pm.Data("n_steps", obs["n_steps"].to_numpy(float), dims=DIM_OBS)
            cfg = pm.Data("config_idx", cfg_idx, dims=DIM_OBS)
            kind = pm.Data("kind_idx", kind_idx, dims=DIM_OBS)
            y = pm.Data("y_s", obs["y_s"].to_numpy(float), dims=DIM_OBS)
            mean = (X * beta[cfg]).sum(axis=-1) + (XA * alpha[cfg]).sum(axis=-1)
            if data.has_repeated_runs():
                run = pm.Data("run_idx", run_idx, dims=DIM_OBS)
                tau_run = pm.HalfNormal("tau_run", hyper["tau_run"])
                z_run = pm.Normal("z_run", 0.0, 1.0, dims="run")
                mean = mean * pt.exp(tau_run * z_run)[run]
            mean = pm.Deterministic("mean_s", mean, dims=DIM_OBS)
            step_var = sigma_step[cfg] ** 2 / pt.maximum(n_steps, 1.0) * (n_steps > 0)
            rel = pt.sqrt(step_var + kind_sigma[kind] ** 2)
            if weighted:
                weight = pm.Data("weight", np.ones(len(obs)), dims=DIM_OBS)
                loglik = pm.logp(pm.StudentT.dist(nu=nu, mu=mean, sigma=mean * rel), y)
                pm.Potential("y_loglik", (weight * loglik).sum())
            else:
                pm.StudentT("y_obs", nu=nu, mu=mean, sigma=mean * rel, observed=y, dims=DIM_OBS)
        self.model = model
        self._compiled = None
        return model

    @staticmethod
    def _log_linear_coefficients(name, dim, priors, features, level_index, hyper, informed,
                                 redundant=()):
        """exp(mu + sum of level effects), shape [config, feature].

        Each coefficient gets the effects of the levels in its prior's `levels`; a level's
        effects live in ``{name}_z_{level}`` (non-centred, summing to zero over the level so
        that ``mu`` is the population mean and not traded against the effects' mean) over
        the subset dimension ``{name}_{level}_feature``. The configuration level is centred where the
        configuration's data inform the coefficient (`informed`): there the data pin
        theta down and a non-centred form would make a narrow ridge; elsewhere it stays
        non-centred (``{name}_z_config``) to avoid a funnel.
        """
        median = np.array([priors[f]["median"] for f in features], float)
        log_sd = np.array([priors[f]["log_sd"] for f in features], float)
        mu = pm.Normal(f"{name}_mu", np.log(median), log_sd, dims=dim)
        theta = pt.zeros((len(level_index["config"]), len(features))) + mu[None, :]
        for short, level_dim, _ in (*LEVELS, ("config", DIM_CONFIG, "config")):
            subset = [i for i, f in enumerate(features) if short in priors[f].get("levels", ())]
            if not subset:
                continue
            sub_dim = f"{name}_{short}_feature"
            pm.modelcontext(None).add_coord(sub_dim, [features[i] for i in subset])
            tau = pm.HalfNormal(f"{name}_tau_{short}", hyper[f"tau_{short}"], dims=sub_dim)
            if short == "config":
                theta = _config_level(name, theta, subset, tau, informed[:, subset])
                continue
            if len(pm.modelcontext(None).coords[level_dim]) < 2 or short in redundant:
                continue  # one group, or the same grouping as a finer level: no own effect
            z = pm.ZeroSumNormal(f"{name}_z_{short}", sigma=1.0, dims=(level_dim, sub_dim),
                                 n_zerosum_axes=1)
            effect = (tau[None, :] * z)[level_index[short]]
            theta = pt.inc_subtensor(theta[:, subset], effect)
        return pm.Deterministic(name, pt.exp(theta), dims=(DIM_CONFIG, dim))

    # ------------------------------------------------------------------ sample
    def _require_model(self):
        if self.model is None:
            raise FitNotDoneError("no model built: call build_model(data) first")

    def sample_prior_predictive(self, samples: int = 200):
        """Prior predictive draws of the observations (stored in `idata`)."""
        self._require_model()
        with self.model:
            prior = pm.sample_prior_predictive(draws=samples,
                                               random_seed=self.sampler_config["seed"])
        if self.idata is None:
            self.idata = prior
        else:
            self.idata.extend(prior)
        return prior

    def fit(self, method: str = "nuts", progressbar: bool = True, **overrides):
        """Sample the posterior: ``method='nuts'`` (nutpie, or 'pymc' NUTS) or 'advi'.

        Diagnostics are computed, printed by the caller, and kept in `fit_info`.
        """
        self._require_model()
        cfg = {**self.sampler_config, **overrides}
        started = time.perf_counter()
        if method in ("nuts", "nutpie"):
            idata = self._fit_nutpie(cfg, progressbar)
        elif method == "pymc":
            with self.model:
                idata = pm.sample(draws=cfg["draws"], tune=cfg["tune"], chains=cfg["chains"],
                                  cores=min(cfg["chains"], 2), target_accept=cfg["target_accept"],
                                  random_seed=cfg["seed"], progressbar=progressbar,
                                  compute_convergence_checks=False)
        elif method == "advi":
            idata = self._fit_advi(cfg, progressbar)
        else:
            raise BayesBlisError(f"unknown fit method '{method}' (use nuts, pymc or advi)")
        wall_s = time.perf_counter() - started
        if self.idata is not None and "prior" in self.idata.groups():
            idata.extend(self.idata)
        self.idata = idata
        from bayesblis.model.diagnostics import diagnose

        self.fit_info = {"method": method, "wall_s": wall_s,
                         "n_obs": int(len(self.data.obs)),
                         "obs_per_kind": self.data.obs["kind"].value_counts().to_dict(),
                         "sampler_config": {k: v for k, v in cfg.items()},
                         "diagnostics": diagnose(idata, method)}
        return idata

    def refit_weighted(self, weight: np.ndarray, method: str = "nuts", progressbar: bool = False,
                       **overrides):
        """Fit again with per-observation log-likelihood weights (model built weighted),
        reusing the compiled nutpie model."""
        if "weight" not in self.model.named_vars:
            raise BayesBlisError("refit_weighted needs build_model(data, weighted=True)")
        self._weights = np.asarray(weight, float)
        with self.model:
            pm.set_data({"weight": self._weights})
        self.idata = None
        return self.fit(method=method, progressbar=progressbar, **overrides)

    def _fit_nutpie(self, cfg, progressbar):
        import nutpie

        if self._compiled is None:
            self._compiled = nutpie.compile_pymc_model(self.model)
        compiled = self._compiled
        if getattr(self, "_weights", None) is not None:
            compiled = compiled.with_data(weight=self._weights)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return nutpie.sample(compiled, draws=cfg["draws"], tune=cfg["tune"],
                                 chains=cfg["chains"], cores=min(cfg["chains"], 2),
                                 target_accept=cfg["target_accept"], seed=cfg["seed"],
                                 progress_bar=progressbar, save_warmup=False,
                                 low_rank_modified_mass_matrix=cfg["low_rank_mass_matrix"],
                                 maxdepth=cfg["max_treedepth"])

    def _fit_advi(self, cfg, progressbar):
        with self.model:
            approx = pm.fit(n=cfg["advi_iterations"], method="advi",
                            obj_optimizer=pm.adam(learning_rate=cfg["advi_learning_rate"]),
                            random_seed=cfg["seed"], progressbar=progressbar,
                            callbacks=[pm.callbacks.CheckParametersConvergence(tolerance=1e-3)])
            idata = approx.sample(cfg["draws"] * cfg["chains"], random_seed=cfg["seed"])
        self.fit_info["advi_loss"] = [float(x) for x in approx.hist[-100:]]
        return idata

    def sample_posterior_predictive(self, data: ModelData | None = None, seed: int | None = None):
        """Replicated observations from the posterior, for `data` (default: the fit data)."""
        if self.idata is None or "posterior" not in self.idata.groups():
            raise FitNotDoneError("no posterior: call fit() or load() first")
        if data is not None:
            self._swap_data(data)
        with self.model:
            ppc = pm.sample_posterior_predictive(
                self.idata, var_names=["y_obs"],
                random_seed=self.sampler_config["seed"] if seed is None else seed,
                progressbar=False)
        self.idata.extend(ppc, join="right")
        return ppc

    def _swap_data(self, data: ModelData):
        known = list(self.data.configs["config"])
        data_cfg = list(data.configs["config"])
        if (data_cfg != known or not set(data.kinds()) <= set(self.model.coords["kind"])
                or not set(data.runs()) <= set(self.model.coords["run"])):
            raise BayesBlisError("posterior predictive needs the fitted configurations; "
                                 "use coefficients for new ones")
        obs = data.obs
        alpha_matrix = np.column_stack([obs[f"a_{f}"].to_numpy(float) if f"a_{f}" in obs
                                        else np.zeros(len(obs)) for f in self.alpha_features])
        kinds = list(self.model.coords["kind"])
        with self.model:
            pm.set_data({"X": obs[[f"f_{f}" for f in self.beta_features]].to_numpy(float),
                         "XA": alpha_matrix, "n_steps": obs["n_steps"].to_numpy(float),
                         "config_idx": data.index_of(obs),
                         "kind_idx": obs["kind"].astype(str).map(kinds.index).to_numpy(np.int64),
                         **({"run_idx": obs["run"].astype(str).map(list(self.model.coords["run"]).index)
                             .to_numpy(np.int64)} if "run_idx" in self.model.named_vars else {}),
                         "y_s": obs["y_s"].to_numpy(float)},
                        coords={DIM_OBS: np.arange(len(obs))})
        self.data = data

    # ------------------------------------------------------------------ summaries
    def coefficient_table(self, prob: float | None = None) -> pd.DataFrame:
        """Posterior mean, median and credible interval of every per-config coefficient."""
        from bayesblis.coefficients import summarize_draws

        if self.idata is None or "posterior" not in self.idata.groups():
            raise FitNotDoneError("no posterior: call fit() or load() first")
        post = self.idata.posterior
        rows = []
        for kind, dim in (("beta", DIM_FEATURE), ("alpha", DIM_ALPHA_FEATURE)):
            arr = post[kind].stack(sample=("chain", "draw"))
            for cfg in arr[DIM_CONFIG].values:
                for feat in arr[dim].values:
                    draws = arr.sel({DIM_CONFIG: cfg, dim: feat}).values
                    rows.append({"config": cfg, "kind": kind, "coefficient": feat,
                                 **summarize_draws(draws, prob)})
        return pd.DataFrame(rows)

    def model_config_json(self) -> str:
        """What is needed to rebuild and interpret the model, as JSON."""
        return json.dumps({"priors": self.priors, "sampler_config": self.sampler_config,
                           "beta_features": self.beta_features,
                           "alpha_features": self.alpha_features})


def _informed(matrix: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """[config, feature]: True where some row of the configuration has the feature > 0."""
    sums = np.add.reduceat(matrix, bounds[:-1], axis=0) if len(matrix) else np.zeros((0, matrix.shape[1]))
    sizes = np.diff(bounds)
    sums[sizes == 0] = 0.0
    return sums > 0


def _config_level(name, theta, subset, tau, informed):
    """Add configuration effects: centred where informed, non-centred elsewhere."""
    n_config = informed.shape[0]
    base = theta[:, subset]
    flat_base = base.reshape((-1,))
    tau_flat = pt.tile(tau, n_config)
    on = np.flatnonzero(informed.ravel())
    off = np.flatnonzero(~informed.ravel())
    values = flat_base
    if len(on):
        centred = pm.Normal(f"{name}_theta_config", mu=flat_base[on], sigma=tau_flat[on], shape=len(on))
        values = pt.set_subtensor(values[on], centred)
    if len(off):
        z = pm.Normal(f"{name}_z_config", 0.0, 1.0, shape=len(off))
        values = pt.set_subtensor(values[off], flat_base[off] + tau_flat[off] * z)
    return pt.set_subtensor(theta[:, subset], values.reshape((n_config, len(subset))))


def redundant_levels(level_index: dict) -> tuple:
    """Levels whose grouping of the configurations equals a finer level's (e.g. `arch` when
    every family is its own arch): their effects would be confounded with it, a ridge the
    sampler must crawl along for nothing. They keep their tau (for unseen levels) but no
    effect of their own in this fit."""
    order = ["arch", "family", "hardware"]
    out = []
    for i, short in enumerate(order):
        groups = level_index[short]
        for other in ["family", "hardware"]:
            if other == short or other in out:
                continue
            if _same_partition(groups, level_index[other]) and order.index(other) > i:
                out.append(short)
                break
    return tuple(out)


def _same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    pairs = set(zip(a.tolist(), b.tolist()))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))
