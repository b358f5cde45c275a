"""The hierarchical latency model: construct, build, prior predictive, fit, posterior predictive.

For configuration ``c`` and coefficient ``k``::

    theta[c, k] = mu[k] + tau_arch[k] z_arch[a(c), k] + tau_hw[k] z_hw[h(c), k]
                + tau_family[k] z_family[f(c), k] + tau_config[k] z_config[c, k]
    beta[c, k]  = floor[k] + exp(theta[c, k])              (non-centred, positive)

``floor`` is the physical limit a prior sets (model/priors.py: 1 for the compute
coefficients, whose features are FLOP time at datasheet peak, and for TP all-reduce, bytes
over the datasheet link), 0 elsewhere. Tied
coefficients (``TIED_BETA``: decode compute) then take their source's value (one GEMM
efficiency per step).

Some features are exactly proportional inside a configuration (``PROPORTIONAL_GROUPS``: the
per-step constants, i.e. weight streaming, all-reduce latency, per-layer and per-step
overheads; and the two per-KV-token costs), so the data of that configuration fix only their sum. Each
configuration therefore gets one centred log sum per group
``L[c] ~ Normal(log P[c], tau_<group>)``, ``P[c]`` being the sum the population
coefficients predict, and the group's coefficients are scaled by ``exp(L[c]) / P[c]``
(`LatencyModel._proportional_groups`): no ridge inside a configuration, and the split is
learnt from how the sums vary across configurations.

A window observation of ``n`` summed steps with summed features ``F`` has expected
duration ``m = F . beta[c]`` and likelihood::

    y ~ StudentT(nu, mu=m, sigma=m * sqrt(sigma_step[c]^2 / n + sigma_kind[kind]^2))

A run (one traced experiment) scales every expected duration by ``exp(tau_run z_run)``:
machines, drivers and days differ, and a prediction for a new run draws a new factor.
Only runs of configurations traced several times get a factor, and the factors of one
configuration's runs sum to zero on the log scale (``r = r_free - mean over the
configuration``, ``r_free ~ Normal(0, tau_run)``, centred because each run's windows pin
its factor; ``z_run = r / tau_run``): a lone run's effect, or the mean effect of a
configuration's runs, would be the configuration's own level, a ridge (chains drifted
along it: r_hat 1.3).
``sigma_kind`` (0 for kinds in EXACT_KINDS) is the error of the window's source (a reconstructed client-side
window is less exact than a traced step gap) and does not shrink with ``n``; its
HalfNormal prior is sampled as ``hyper * |z|`` with z standard normal, because a kind whose
windows the steps' own noise explains puts it near 0, where a log-scale variable mixes
slowly (model version 16). Alpha
features enter the same mean (``m = F . beta[c] + A . alpha[c]``), so a TTFT window holds
both the request-level delay and the steps it waited for.

The Student-t sits on the natural scale with a scale proportional to its location, so
``m`` is the *mean* step-time sum (finite for nu > 1; we use nu > 2). That is the choice
that keeps sums of step times unbiased: the simulator adds mean-one multiplicative noise to
``beta . f`` and E2E, a sum of steps, has mean ``sum beta . f``. (A Student-t on log time
has no finite mean once exponentiated.) Alpha (request-level delays) follows the same
hierarchy in the same likelihood.

Observations are sorted by configuration, so the means are one matrix-vector product per
configuration (`_segment_dot`), not a coefficient row gathered per observation (3x faster
gradients at 200k rows); minibatched ADVI, whose rows are random, gathers. The Student-t
density is written out (`student_t_logp`, equal to PyMC's) with its constant computed once,
a table without request-level rows leaves the alpha product out of the mean, and a table
of exact kinds only skips the per-kind error: the same posterior with a cheaper gradient
and a smaller graph to compile. nutpie evaluates it with numba or JAX (``nuts_backend``).
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
from bayesblis.model.priors import (PROPORTIONAL_GROUPS, SHEARED_GROUPS, floors, log_excess_median,
                                    merge_priors, tie_columns)

LEVELS = (("arch", DIM_ARCH, "arch"), ("hardware", DIM_HARDWARE, "hardware"),
          ("family", DIM_FAMILY, "model_family"))
"""(short name, dimension, configuration column) of each pooled level above `config`."""

EXACT_KINDS = frozenset({"window", "step", "step_gap", "decode_window"})
"""Observation kinds that are exact sums of traced steps: their only error is step noise.
Every other kind (client-side reconstructions, request-level delays) gets its own
non-shrinking relative error ``sigma_kind``."""

DEFAULT_SAMPLER = {"draws": 500, "tune": 500, "chains": 2, "target_accept": 0.9,
                   "low_rank_mass_matrix": True, "max_treedepth": 10,
                   "seed": 1, "advi_iterations": 30000, "advi_learning_rate": 0.01,
                   "store_obs_means": False, "advi_mode": None, "nuts_backend": "numba",
                   "laplace": "auto", "importance_draws": 1000, "max_draws": None,
                   "extend_draws": None}
"""``advi_mode``: pytensor compile mode of the ADVI step (None: pytensor's default, C;
"NUMBA": longer compile, about 6x faster steps on this model); ``store_obs_means``: keep
the per-observation ``mean_s`` draws in the in-memory trace (draws x observations numbers,
never written to a posterior file: `store.without_observation_draws`; `bayesblis.ppc`
recomputes them); ``nuts_backend``: how nutpie evaluates the
log density, "numba" (compiled once, reused by weighted refits) or "jax" (the data frozen
into an XLA program: compiles in seconds instead of minutes and has the faster gradient on
large tables, see benchmarks/fit_speed.py; a weighted refit compiles again); ``laplace``:
precondition NUTS at the posterior mode (`bayesblis.model.laplace`; either backend):
"auto" on JAX from `laplace.AUTO_MIN_ROWS` rows, True always, False never;
``importance_draws``: method 'summary' weighs the chains thinned evenly to at most this
many draws by the exact likelihood (its cost: draws x rows) and keeps that many;
``max_draws`` (nutpie NUTS): above ``draws``, sample on past ``draws`` until the
diagnostics pass, checked every ``extend_draws`` (default ``draws // 2``) draws per chain,
at most ``max_draws`` (`sample_until_diagnosed`); None: exactly ``draws``."""


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
        self._compiled_backend: str | None = None
        self._weighted_data: dict | None = None  # data a weighted refit swaps in
        self.minibatch_size: int | None = None
        self._laplace_info: dict | None = None  # the last NUTS fit's preconditioning
        self._importance: dict | None = None  # the last summary fit's PSIS check
        self._draw_checks: list | None = None  # the last adaptive NUTS run's checkpoints
        self._compile_s = 0.0  # the last fit's time in nutpie's compile step (0: reused)
        self.summaries = None  # per-configuration likelihood summaries (likelihood="summary")
        self._chains = None  # a summary fit's NUTS draws before importance resampling
        self.idata = None
        self.fit_info: dict = {}

    # ------------------------------------------------------------------ build
    def build_model(self, data: ModelData, weighted: bool = False,
                    minibatch_size: int | None = None, likelihood: str = "rows",
                    progress=None) -> pm.Model:
        """Create the PyMC model for `data` (no sampling).

        ``weighted=True`` multiplies each observation's log-likelihood by the data
        variable ``weight`` (initially 1): folds of a cross-validation then reuse one
        compiled model, held-out rows getting weight 0 (see `refit_weighted`).

        ``minibatch_size=B`` (for ``fit(method="advi")`` on large tables): the likelihood
        sees a random minibatch of B observations per evaluation (``pm.Minibatch``), scaled
        to the whole table by ``total_size``; the per-observation ``mean_s`` is not kept and
        the model cannot be used with NUTS or the posterior predictive.

        ``likelihood="summary"`` (for ``fit(method="summary")`` on large step tables): each
        configuration's rows enter through a Gaussian summary of their likelihood
        (`bayesblis.model.summary`, computed here; ``progress(done, total)`` is called per
        configuration); no per-observation ``mean_s``, no posterior predictive.
        """
        if minibatch_size is not None and weighted:
            raise BayesBlisError("a weighted model cannot be minibatched")
        if likelihood not in ("rows", "summary"):
            raise BayesBlisError(f"likelihood must be 'rows' or 'summary', not {likelihood!r}")
        if likelihood == "summary" and (weighted or minibatch_size is not None):
            raise BayesBlisError("a summary likelihood cannot be weighted or minibatched")
        self.minibatch_size = minibatch_size
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
        alpha_matrix = data.alpha_matrix(self.alpha_features)
        # step-only tables (no request-level delays) skip the alpha product: a smaller graph
        # (faster compile) and a cheaper gradient; alpha then keeps its prior
        self.alpha_in_mean = bool(alpha_matrix.any())
        kinds = data.kinds()
        approx_kinds = [k for k in kinds if k not in EXACT_KINDS]  # each with its own sigma_kind
        self.summaries = None
        if likelihood == "summary":
            from bayesblis.model.summary import summarise

            self.summaries = summarise(data, beta_cols, self.alpha_features, approx_kinds, progress)
        runs = data.repeated_runs()
        run_idx = data.run_slots(runs)
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
        bounds = data.config_bounds()
        informed = _well_informed(beta_matrix, alpha_matrix, obs["n_steps"].to_numpy(float), bounds,
                                  self.priors, self.beta_features, self.alpha_features)
        with pm.Model(coords=coords) as model:
            theta_beta = self._log_linear_coefficients(
                "beta", DIM_FEATURE, self.priors["beta"], self.beta_features, level_index,
                hyper, informed["beta"], self.redundant_levels)
            beta = pm.Deterministic("beta", self._proportional_groups(
                theta_beta, _per_step_reference(beta_matrix, obs["n_steps"].to_numpy(float), bounds),
                hyper), dims=(DIM_CONFIG, DIM_FEATURE))
            alpha = pm.Deterministic("alpha", floors(self.priors["alpha"], self.alpha_features)
                                     + pt.exp(self._log_linear_coefficients(
                "alpha", DIM_ALPHA_FEATURE, self.priors["alpha"], self.alpha_features,
                level_index, hyper, informed["alpha"], self.redundant_levels)),
                dims=(DIM_CONFIG, DIM_ALPHA_FEATURE))

            sigma_step = pm.HalfNormal("sigma_step", hyper["sigma_step"], dims=DIM_CONFIG)
            approx = np.array([k not in EXACT_KINDS for k in kinds], float)
            if approx.any():
                model.add_coord("approx_kind", approx_kinds)
                # HalfNormal(hyper) as hyper * |z|: a kind's error can sit near 0 (the steps'
                # own noise explains its windows), where a log-scale variable has a long,
                # slowly sampled tail (tail ESS 193 of 8,000 draws); z crosses 0 smoothly.
                sigma_kind_z = pm.Normal("sigma_kind_z", 0.0, 1.0, dims="approx_kind")
                sigma_approx = pm.Deterministic("sigma_kind", hyper["sigma_kind"]
                                                * pt.abs(sigma_kind_z), dims="approx_kind")
                slot = np.cumsum(approx).astype(np.int64) - 1
                kind_sigma = pt.switch(approx > 0, sigma_approx[np.maximum(slot, 0)], 0.0)
            nu = pm.Deterministic(
                "nu", 2.0 + pm.Exponential("nu_excess", 1.0 / hyper["nu_excess_mean"]))

            run_log_factor = None
            if data.has_repeated_runs():
                tau_run = pm.HalfNormal("tau_run", hyper["tau_run"])
                # centred: hundreds of windows pin each run's factor, so a non-centred
                # z_run made tau_run the slowest direction of the quick tour (model version 3)
                free = pm.Normal("run_log_free", 0.0, tau_run, dims="run")
                centring = pm.Data("run_centring", data.run_centring(runs))
                run_log_factor = free - pt.dot(centring, free)
                pm.Deterministic("z_run", run_log_factor / tau_run, dims="run")

            if self.summaries is not None:
                from bayesblis.model.summary import summary_logp

                pm.Potential("y_summary", summary_logp(
                    self.summaries, beta, alpha, sigma_step, nu,
                    sigma_approx if approx.any() else None, run_log_factor))
            else:
                self._row_likelihood(data, beta, alpha, sigma_step,
                                     kind_sigma if approx.any() else None, nu, run_log_factor,
                                     beta_matrix, alpha_matrix, cfg_idx, kind_idx, run_idx, bounds,
                                     weighted, minibatch_size)
        self.model = model
        self._compiled = None
        self._weighted_data = None
        return model

    def _row_likelihood(self, data, beta, alpha, sigma_step, kind_sigma, nu, run_log_factor,
                        beta_matrix, alpha_matrix, cfg_idx, kind_idx, run_idx, bounds, weighted,
                        minibatch_size):
        """Every observation row's Student-t likelihood (inside the model context)."""
        obs, configs = data.obs, data.configs
        X = pm.Data("X", beta_matrix, dims=(DIM_OBS, DIM_FEATURE))
        XA = pm.Data("XA", alpha_matrix, dims=(DIM_OBS, DIM_ALPHA_FEATURE))
        n_steps = pm.Data("n_steps", obs["n_steps"].to_numpy(float), dims=DIM_OBS)
        cfg = pm.Data("config_idx", cfg_idx, dims=DIM_OBS)
        kind = pm.Data("kind_idx", kind_idx, dims=DIM_OBS)
        y = pm.Data("y_s", obs["y_s"].to_numpy(float), dims=DIM_OBS)
        columns = [X, XA, n_steps, cfg, kind, y]
        if data.has_repeated_runs():
            columns.append(pm.Data("run_idx", run_idx, dims=DIM_OBS))
        if minibatch_size is not None:  # one random subset of rows for every column
            columns = pm.Minibatch(*columns, batch_size=int(minibatch_size))
            X, XA, n_steps, cfg, kind, y = columns[:6]
            mean = (X * beta[cfg]).sum(axis=-1) + (XA * alpha[cfg]).sum(axis=-1)
        else:  # rows sorted by configuration: one matrix-vector product per configuration
            segment = pm.Data("config_bounds", bounds)
            mean = _segment_dot(X, beta, segment, len(configs))
            if self.alpha_in_mean:
                mean = mean + _segment_dot(XA, alpha, segment, len(configs))
        if run_log_factor is not None:
            factor = pt.concatenate([pt.exp(run_log_factor), pt.ones(1)])  # lone runs: 1
            mean = mean * factor[columns[6]]
        if minibatch_size is None:
            mean = pm.Deterministic("mean_s", mean, dims=DIM_OBS)
        rel = relative_scale(sigma_step[cfg], n_steps,
                             kind_sigma[kind] if kind_sigma is not None else None)
        if weighted:
            weight = pm.Data("weight", np.ones(len(obs)), dims=DIM_OBS)
            loglik = student_t_logp(y, nu, mean, mean * rel)
            pm.Potential("y_loglik", (weight * loglik).sum())
        else:
            pm.CustomDist("y_obs", nu, mean, mean * rel, dist=_student_t, logp=student_t_logp,
                          observed=y,
                          **({"total_size": len(obs)} if minibatch_size is not None
                             else {"dims": DIM_OBS}))

    def _proportional_groups(self, theta, reference, hyper):
        """Coefficients [config, feature] with one centred log sum per configuration and
        PROPORTIONAL_GROUPS group.

        The features of a group are proportional inside a configuration: its data pin their
        weighted sum down tightly while the split between them is free (a ridge). So the
        model samples the configuration's log sum ``L[c]`` directly,
        ``L[c] ~ Normal(log P[c], tau_<group>)`` where ``P[c] = sum_k exp(theta[c, k])
        ref[c, k]`` is the population prediction (``ref``: the configuration's mean per-step
        feature value), and scales the group's coefficients by ``exp(L[c]) / P[c]``: the
        mean step time depends on ``L[c]`` alone and the population coefficients learn the
        split from how ``L`` varies across configurations.

        A group in SHEARED_GROUPS trades its sum against another coefficient's log excess
        ``theta[c, j]``: the data fix ``L[c] - b[c] theta[c, j]`` (`shear_slopes`). Its sum is
        sampled as ``L'[c] ~ Normal(log P[c] - shift[c], tau)`` with ``L = L' + shift``,
        ``shift = b (theta[:, j] - centre_j)``: the same distribution of ``L`` (a shear, unit
        Jacobian), with ``L'`` less correlated with ``theta[c, j]`` than ``L`` is.
        """
        coef = tie_columns(floors(self.priors["beta"], self.beta_features) + pt.exp(theta),
                           self.beta_features)
        for group_name, members in PROPORTIONAL_GROUPS.items():
            group = [j for j, f in enumerate(self.beta_features) if f in members]
            if not group:
                continue
            physics = (coef[:, group] * reference[:, group]).sum(axis=1)
            tau = _level_scale(f"beta_tau_{group_name}", group_name, hyper,
                               n_groups=len(self.data.configs))
            traded = SHEARED_GROUPS.get(group_name)
            if traded in self.beta_features:
                j = self.beta_features.index(traded)
                slope = shear_slopes(self.priors["beta"], self.beta_features, group, j, reference)
                shift = slope * (theta[:, j] - log_excess_median(self.priors["beta"][traded]))
                sheared = pm.Normal(f"beta_log_{group_name}_sheared", mu=pt.log(physics) - shift,
                                    sigma=tau, dims=DIM_CONFIG)
                log_sum = pm.Deterministic(f"beta_log_{group_name}", sheared + shift, dims=DIM_CONFIG)
            else:
                log_sum = pm.Normal(f"beta_log_{group_name}", mu=pt.log(physics), sigma=tau,
                                    dims=DIM_CONFIG)
            scale = pt.exp(log_sum) / physics
            coef = pt.set_subtensor(coef[:, group], coef[:, group] * scale[:, None])
        return coef

    @staticmethod
    def _log_linear_coefficients(name, dim, priors, features, level_index, hyper, informed,
                                 redundant=()):
        """theta = mu + sum of level effects (log coefficients), shape [config, feature].

        Each coefficient gets the effects of the levels in its prior's `levels`; a level's
        effects live in ``{name}_z_{level}`` (non-centred, summing to zero over the level so
        that ``mu`` is the population mean and not traded against the effects' mean) over
        the subset dimension ``{name}_{level}_feature``. The configuration level is centred where the
        configuration's data inform the coefficient (`informed`): there the data pin
        theta down and a non-centred form would make a narrow ridge; elsewhere it stays
        non-centred (``{name}_z_config``) to avoid a funnel.
        """
        centre = np.array([log_excess_median(priors[f]) for f in features], float)
        log_sd = np.array([priors[f]["log_sd"] for f in features], float)
        mu = pm.Normal(f"{name}_mu", centre, log_sd, dims=dim)
        theta = pt.zeros((len(level_index["config"]), len(features))) + mu[None, :]
        for short, level_dim, _ in (*LEVELS, ("config", DIM_CONFIG, "config")):
            subset = [i for i, f in enumerate(features) if short in priors[f].get("levels", ())]
            if not subset:
                continue
            sub_dim = f"{name}_{short}_feature"
            pm.modelcontext(None).add_coord(sub_dim, [features[i] for i in subset])
            n_groups = len(pm.modelcontext(None).coords[level_dim])
            tau = _level_scale(f"{name}_tau_{short}", short, hyper, sub_dim, n_groups)
            if short == "config":
                theta = _config_level(name, theta, subset, tau, informed[:, subset])
                continue
            if len(pm.modelcontext(None).coords[level_dim]) < 2 or short in redundant:
                continue  # one group, or the same grouping as a finer level: no own effect
            z = pm.ZeroSumNormal(f"{name}_z_{short}", sigma=1.0, dims=(level_dim, sub_dim),
                                 n_zerosum_axes=1)
            effect = (tau[None, :] * z)[level_index[short]]
            theta = pt.inc_subtensor(theta[:, subset], effect)
        return theta

    def floors(self) -> dict:
        """{beta feature: physical floor} of the floored coefficients (model/priors.py)."""
        values = floors(self.priors["beta"], self.beta_features)
        return {f: float(v) for f, v in zip(self.beta_features, values) if v > 0}

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

    def fit(self, method: str = "nuts", progressbar: bool | None = None, **overrides):
        """Sample the posterior: ``method='nuts'`` (nutpie, or 'pymc' NUTS) or 'advi'.

        Diagnostics are computed, printed by the caller, and kept in `fit_info`.
        ``progressbar=None``: the sampler's display only for a person at a terminal
        (`bayesblis.console.show_progress`).
        """
        self._require_model()
        if progressbar is None:
            from bayesblis.console import show_progress

            progressbar = show_progress()
        cfg = {**self.sampler_config, **overrides}
        self._importance = None
        self._compile_s = 0.0
        started = time.perf_counter()
        if method in ("nuts", "nutpie"):
            idata = self._fit_nutpie(cfg, progressbar)
        elif method == "pymc":
            with self.model:
                idata = pm.sample(draws=cfg["draws"], tune=cfg["tune"], chains=cfg["chains"],
                                  cores=min(cfg["chains"], 2), target_accept=cfg["target_accept"],
                                  random_seed=cfg["seed"], progressbar=progressbar,
                                  compute_convergence_checks=False,
                                  var_names=self._trace_names(cfg))
        elif method == "advi":
            idata = self._fit_advi(cfg, progressbar)
        elif method == "summary":
            idata = self._fit_summary(cfg, progressbar)
        else:
            raise BayesBlisError(f"unknown fit method '{method}' (use nuts, pymc, advi or summary)")
        wall_s = time.perf_counter() - started
        if self.idata is not None and "prior" in self.idata.groups():
            idata.extend(self.idata)
        self.idata = idata
        from bayesblis.model.diagnostics import diagnose

        self.fit_info = {"method": method, "wall_s": wall_s, "compile_s": self._compile_s,
                         "n_obs": int(len(self.data.obs)),
                         "obs_per_kind": self.data.obs["kind"].value_counts().to_dict(),
                         "sampler_config": {k: v for k, v in cfg.items()},
                         "diagnostics": diagnose(self._chains if method == "summary" else idata,
                                                 method, self._importance)}
        from bayesblis.model.bounds import physical_bound_report

        self.fit_info["physical_bounds"] = physical_bound_report(
            idata.posterior, self.data.obs, floors=self.floors())
        if method in ("nuts", "nutpie", "summary"):
            self.fit_info["laplace"] = self._laplace_info
            self.fit_info["draw_checks"] = self._draw_checks
        if method == "summary":
            self.fit_info["importance"] = self._importance
        if method == "advi":  # the last 100 losses (set by _fit_advi; kept past the reset)
            self.fit_info["advi_loss"] = self._advi_loss
        return idata

    def refit_weighted(self, weight: np.ndarray, method: str = "nuts", progressbar: bool = False,
                       **overrides):
        """Fit again with per-observation log-likelihood weights (model built weighted),
        reusing the compiled nutpie model."""
        if "weight" not in self.model.named_vars:
            raise BayesBlisError("refit_weighted needs build_model(data, weighted=True)")
        weight = np.asarray(weight, float)
        self._weighted_data = {"weight": weight}
        if "run_centring" in self.model.named_vars:  # centre on the runs that keep data
            self._weighted_data["run_centring"] = self.data.run_centring(
                list(self.model.coords["run"]), weight=weight)
        with self.model:
            pm.set_data(self._weighted_data)
        if self._compiled_backend == "jax":  # the weights are frozen in: compile again
            self._compiled = None
        self.idata = None
        return self.fit(method=method, progressbar=progressbar, **overrides)

    def _fit_nutpie(self, cfg, progressbar):
        import nutpie

        if self.minibatch_size is not None:
            raise BayesBlisError("NUTS needs the whole likelihood: build without minibatch_size")
        use_laplace = self._use_laplace(cfg)  # before compiling: a wrong setting fails fast
        if self._compiled is None or self._compiled_backend != cfg["nuts_backend"]:
            compile_started = time.perf_counter()
            self.compile_nuts(cfg)
            self._compile_s = time.perf_counter() - compile_started
        compiled = self._compiled
        if self._weighted_data is not None and self._compiled_backend == "numba":
            compiled = compiled.with_data(**self._weighted_data)
        self._laplace_info = None
        if use_laplace:
            compiled = self._precondition(compiled, cfg, progressbar)
        settings = dict(tune=cfg["tune"], chains=cfg["chains"], cores=min(cfg["chains"], 2),
                        target_accept=cfg["target_accept"], seed=cfg["seed"],
                        progress_bar=progressbar, save_warmup=False,
                        low_rank_modified_mass_matrix=cfg["low_rank_mass_matrix"],
                        maxdepth=cfg["max_treedepth"])
        self._draw_checks = None
        max_draws = int(cfg.get("max_draws") or cfg["draws"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if max_draws <= cfg["draws"]:
                return nutpie.sample(compiled, draws=cfg["draws"], **settings)
            sampler = nutpie.sample(compiled, draws=max_draws, blocking=False, **settings)
            try:
                idata, self._draw_checks = sample_until_diagnosed(
                    sampler, cfg["draws"], max_draws,
                    int(cfg.get("extend_draws") or max(cfg["draws"] // 2, 1)))
            except BaseException:
                sampler.cancel()
                raise
            return idata

    def _fit_summary(self, cfg, progressbar):
        """NUTS against the likelihood summaries (JAX: a small graph), then every draw
        importance weighted by the exact likelihood of all rows, PSIS, resampled."""
        import arviz as az

        from bayesblis.model import summary

        if self.summaries is None:
            raise BayesBlisError("method 'summary' needs build_model(data, likelihood='summary')")
        idata = self._fit_nutpie({**cfg, "nuts_backend": "jax"}, progressbar)
        n_draws = post_draws(idata)
        if progressbar:
            import sys

            print(f"weighting {min(n_draws, cfg['importance_draws'])} draws by the "
                  f"exact likelihood of {len(self.data.obs):,} rows ...", file=sys.stderr,
                  flush=True)
        thin = -(-n_draws // cfg["importance_draws"])  # weigh at most importance_draws draws
        post = idata.posterior.isel(draw=slice(None, None, thin))
        flat = post.stack(s=("chain", "draw"))
        started = time.perf_counter()
        draws = {"beta": flat["beta"].transpose("s", DIM_CONFIG, DIM_FEATURE).values,
                 "alpha": flat["alpha"].transpose("s", DIM_CONFIG, DIM_ALPHA_FEATURE).values,
                 "sigma_step": flat["sigma_step"].transpose("s", DIM_CONFIG).values,
                 "nu": flat["nu"].values}
        if "sigma_kind" in flat:
            draws["sigma_kind"] = flat["sigma_kind"].transpose("s", "approx_kind").values
        if "z_run" in flat:
            draws["run_log_factor"] = (flat["tau_run"] * flat["z_run"]).transpose("s", "run").values
        log_w = summary.log_weights(self.data, [f"f_{f}" for f in self.beta_features],
                                    self.alpha_features, list(self.model.coords.get("approx_kind", ())),
                                    self.summaries, draws)
        resampled, k, ess = summary.psis_resample(post, log_w, cfg["seed"])
        self._importance = {"pareto_k": k, "ess": ess, "n_draws": int(len(log_w)),
                            "weighting_s": round(time.perf_counter() - started, 2),
                            "newton_steps_max": max(s.newton_steps for s in self.summaries)}
        self._chains = idata  # the sampler's own chains: their convergence is diagnosed
        return az.InferenceData(posterior=resampled, sample_stats=idata.sample_stats)

    def _use_laplace(self, cfg) -> bool:
        from bayesblis.model.laplace import AUTO_MIN_ROWS

        setting = cfg.get("laplace", "auto")
        if setting not in ("auto", True, False):
            raise BayesBlisError(f"laplace must be 'auto', True or False, not {setting!r}")
        if setting == "auto":  # measured on JAX (benchmarks/fit_speed.py); numba when asked
            return cfg["nuts_backend"] == "jax" and len(self.data.obs) >= AUTO_MIN_ROWS
        return setting

    def _precondition(self, compiled, cfg, progressbar):
        """nutpie model sampled around the posterior mode (`bayesblis.model.laplace`)."""
        import sys

        import nutpie

        from bayesblis.model.laplace import (can_precondition, find_laplace, initial_point_of,
                                             logp_grad_of, precondition)

        if not can_precondition(compiled):
            message = (f"nutpie {nutpie.__version__} does not expose its compiled model's "
                       "log density as bayesblis expects")
            if cfg["laplace"] is True:
                raise BayesBlisError(message + ": fit with laplace=False")
            warnings.warn(message + "; sampling without Laplace preconditioning", stacklevel=3)
            return compiled
        if progressbar:
            print(f"Laplace preconditioning: posterior mode and curvature of "
                  f"{compiled.n_dim} parameters ...", file=sys.stderr, flush=True)
        laplace = find_laplace(logp_grad_of(compiled), initial_point_of(compiled, cfg["seed"]))
        self._laplace_info = laplace.summary()
        if progressbar:
            print(f"  {laplace.n_evals} gradients, {laplace.wall_s:.1f} s", file=sys.stderr,
                  flush=True)
        return precondition(compiled, laplace)

    def compile_nuts(self, cfg: dict | None = None) -> None:
        """Compile the log density and its gradient for nutpie, with the backend named by
        ``nuts_backend`` (`fit` does this when needed; call it to time compiling apart)."""
        import nutpie

        cfg = {**self.sampler_config, **(cfg or {})}
        backend = cfg["nuts_backend"]
        if backend not in ("numba", "jax"):
            raise BayesBlisError(f"unknown nuts_backend '{backend}' (use numba or jax)")
        extra = {"backend": "jax", "gradient_backend": "jax"} if backend == "jax" else {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._compiled = nutpie.compile_pymc_model(self.model, var_names=self._trace_names(cfg),
                                                       **extra)
        self._compiled_backend = backend

    def _trace_names(self, cfg) -> list[str] | None:
        """Variables a trace keeps: all (None) with ``store_obs_means``, else all but the
        per-observation ``mean_s`` (its trace is draws x observations numbers: 1.6 GB for
        1,000 draws of 200k observations)."""
        if cfg.get("store_obs_means", False) or "mean_s" not in self.model.named_vars:
            return None
        return [v.name for v in self.model.free_RVs + self.model.deterministics
                if v.name != "mean_s"]

    def _fit_advi(self, cfg, progressbar):
        with self.model:
            mode = {"fn_kwargs": {"mode": cfg["advi_mode"]}} if cfg.get("advi_mode") else {}
            approx = pm.fit(n=cfg["advi_iterations"], method="advi",
                            obj_optimizer=pm.adam(learning_rate=cfg["advi_learning_rate"]),
                            random_seed=cfg["seed"], progressbar=progressbar,
                            callbacks=[pm.callbacks.CheckParametersConvergence(tolerance=1e-3)],
                            **mode)
            idata = approx.sample(cfg["draws"] * cfg["chains"], random_seed=cfg["seed"])
        if not cfg.get("store_obs_means", False) and "mean_s" in idata.posterior:
            del idata.posterior["mean_s"]
        self._advi_loss = [float(x) for x in approx.hist[-100:]]
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
                or not set(data.repeated_runs()) <= set(self.model.coords["run"])):
            raise BayesBlisError("posterior predictive needs the fitted configurations; "
                                 "use coefficients for new ones")
        obs = data.obs
        alpha_matrix = data.alpha_matrix(self.alpha_features)
        if alpha_matrix.any() and not self.alpha_in_mean:
            raise BayesBlisError("these observations have request-level (alpha) features but "
                                 "the model was built on step observations only; build it on them")
        kinds = list(self.model.coords["kind"])
        with self.model:
            pm.set_data({"X": obs[[f"f_{f}" for f in self.beta_features]].to_numpy(float),
                         "XA": alpha_matrix, "n_steps": obs["n_steps"].to_numpy(float),
                         "config_idx": data.index_of(obs),
                         "config_bounds": data.config_bounds(),
                         "kind_idx": obs["kind"].astype(str).map(kinds.index).to_numpy(np.int64),
                         **({"run_idx": data.run_slots(list(self.model.coords["run"]))}
                            if "run_idx" in self.model.named_vars else {}),
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


POLL_S, POLL_MAX_S = 1.0, 30.0
"""Shortest and longest wait of `sample_until_diagnosed` between looks at the draws of a
running sampler (s)."""


def sample_until_diagnosed(sampler, draws: int, max_draws: int, extend_draws: int):
    """Draws from a running nutpie sampler (`nutpie.sample(..., blocking=False)` of
    `max_draws` per chain), stopped at the first checkpoint whose diagnostics pass.

    Checkpoints are `draws`, `draws + extend_draws`, ... up to `max_draws`: once every
    chain has that many draws, the first that many of each chain are diagnosed
    (`diagnostics.diagnose`: r_hat, bulk and tail ESS, divergences, E-BFMI); the first
    checkpoint that passes, or has divergent transitions (which more draws do not remove),
    ends the run. Each chain's draws depend on the seed only, so the result does not depend
    on when the draws are looked at. Returns (InferenceData of the kept draws, [{draws,
    passed, problems}] per checkpoint)."""
    from bayesblis.model.diagnostics import diagnose

    checks = []
    checkpoint = min(draws, max_draws)
    while True:
        trace = _trace_with_draws(sampler, checkpoint)
        head = trace.isel(draw=slice(0, checkpoint))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            diag = diagnose(head, "nuts")
        checks.append({"draws": checkpoint, "passed": diag["passed"],
                       "problems": diag["problems"]})
        if diag["passed"] or diag["divergences"] > 0 or checkpoint >= max_draws:
            sampler.cancel()  # stop the chains (nothing left to stop when finished)
            return head, checks
        checkpoint = min(checkpoint + extend_draws, max_draws)


def _trace_with_draws(sampler, n_draws: int):
    """The sampler's trace once every chain has `n_draws` draws after tuning. Looks again
    after about 90% of the time the draws so far say is left (at least `POLL_S`, at most
    `POLL_MAX_S`): copying the trace costs time the chains share."""
    import time as _time

    last = None
    while True:
        finished = _finished(sampler)
        trace = sampler.inspect()  # after `is_finished`, nutpie's `wait` has no results
        done, now = _complete_draws(trace), _time.perf_counter()
        if finished or done >= n_draws:
            return trace
        wait_s = POLL_S
        if last is not None and done > last[0]:
            wait_s = 0.9 * (n_draws - done) * (now - last[1]) / (done - last[0])
        last = (done, now)
        _time.sleep(min(max(wait_s, POLL_S), POLL_MAX_S))


def _finished(sampler) -> bool:
    """Whether a nutpie background sampler is done (nutpie 0.16 raises TimeoutError from
    `is_finished` while it is running)."""
    try:
        return bool(sampler.is_finished)
    except TimeoutError:
        return False


def _complete_draws(trace) -> int:
    """Draws every chain of a (partial, NaN-padded) trace holds."""
    post = trace.posterior
    if not post.data_vars or post.sizes.get("draw", 0) == 0:
        return 0
    var = post[next(iter(post.data_vars))]
    finite = np.isfinite(var.values.reshape(var.shape[0], var.shape[1], -1)).all(axis=2)
    return int(finite.sum(axis=1).min())


MIN_GROUPS_TO_LEARN_SCALE = 5
"""A level with fewer groups (GPUs, families, dense/MoE, or configurations) keeps its prior
scale fixed: a spread cannot be learnt from 2-4 group effects (its posterior is the prior),
and a free scale over so few effects makes a funnel the sampler diverges in (on the 4
configurations of the real H100 runs, chains disagreed on the alpha configuration scale:
r_hat 1.6)."""

CONFIG_SCALE_LOG_SD = 0.5
"""Log sd of a learnt configuration scale's prior: 90% [0.44, 2.3] x ``tau_config``."""


def post_draws(idata) -> int:
    """Draws in all chains of a posterior."""
    return int(idata.posterior.sizes["chain"] * idata.posterior.sizes["draw"])


def _level_scale(name, short, hyper, dims=None, n_groups=None):
    """The scale of a level's effects (log scale).

    Fixed (a Deterministic at its hyper value ``tau_<level>``: for the arch, hardware and
    family levels the HalfNormal's root mean square, the same prior variance of an effect)
    where it cannot be learnt:

    - a level with fewer than MIN_GROUPS_TO_LEARN_SCALE groups;
    - the spread of a PROPORTIONAL_GROUPS sum around its physics sum, always: the population
      coefficients have as many level effects as there are configurations to explain, so a
      learnt spread collapses towards 0 (the demo fleet's divergences all sat at
      ``tau_step_const`` 0.004-0.03 and ``tau_kv`` 0.02, docs/sampler.md, model version 6).

    A learnt configuration scale gets a log-normal prior (median the hyper value, log sd
    CONFIG_SCALE_LOG_SD), which, unlike the zero-avoiding Gamma(2) it replaced, has no mass
    near 0 (where the centred effects make a funnel: divergences at 0.009-0.013); the
    other levels a HalfNormal scale.
    """
    fixed = (n_groups is not None and n_groups < MIN_GROUPS_TO_LEARN_SCALE) \
        or short in PROPORTIONAL_GROUPS
    if fixed:
        shape = (len(pm.modelcontext(None).coords[dims]),) if dims is not None else ()
        return pm.Deterministic(name, pt.as_tensor_variable(np.full(shape, hyper[f"tau_{short}"])),
                                dims=dims)
    if short == "config":
        return pm.LogNormal(name, mu=np.log(hyper["tau_config"]), sigma=CONFIG_SCALE_LOG_SD,
                            dims=dims)
    return pm.HalfNormal(name, hyper[f"tau_{short}"], dims=dims)


def _student_t(nu, mu, sigma, size):
    """The likelihood's generative form (posterior predictive draws)."""
    return pm.StudentT.dist(nu=nu, mu=mu, sigma=sigma, size=size)


def student_t_logp(value, nu, mu, sigma):
    """Student-t log density, equal to ``pm.logp(pm.StudentT.dist(nu, mu, sigma), value)``.

    Written out with the normalising constant as one scalar expression and without
    PyMC's per-row parameter checks: a faster log-density gradient at 200k rows
    (benchmarks/fit_speed.py).
    """
    z = (value - mu) / sigma
    const = pt.gammaln((nu + 1.0) / 2.0) - pt.gammaln(nu / 2.0) - 0.5 * pt.log(np.pi * nu)
    return const - pt.log(sigma) - (nu + 1.0) / 2.0 * pt.log1p(z ** 2 / nu)


def relative_scale(sigma_step_obs, n_steps, kind_sigma_obs=None):
    """Each observation's relative scale ``sqrt(sigma_step^2 / n + sigma_kind^2)`` (the
    likelihood's sigma is ``mean * relative_scale``); ``kind_sigma_obs=None``: exact kinds
    only, no per-kind error to gather and add."""
    # 1/n for step windows, 0 for request-level rows (n = 0); a float mask: a bool
    # numerator made pytensor's local_greedy_distributor rewrite fail (logged errors)
    steps_share = pt.switch(n_steps > 0, 1.0 / pt.maximum(n_steps, 1.0), 0.0)
    if kind_sigma_obs is None:
        return sigma_step_obs * pt.sqrt(steps_share)
    return pt.sqrt(sigma_step_obs ** 2 * steps_share + kind_sigma_obs ** 2)


def _segment_dot(matrix, coef, bounds, n_config: int):
    """Each row's dot product with its configuration's coefficients, ``(matrix * coef[c(i)]).sum(1)``,
    for rows sorted by configuration (`bounds`: first row of each configuration, then the
    row count). One matrix-vector product per configuration instead of gathering a
    coefficient row per observation: about 3x faster log-density gradients at 200k rows."""
    return pt.concatenate([matrix[bounds[c]:bounds[c + 1]] @ coef[c] for c in range(n_config)])


def shear_slopes(priors: dict, features: list, group: list, traded: int,
                 reference: np.ndarray) -> np.ndarray:
    """[config]: how a proportional group's log sum moves with the log excess of the
    `traded` coefficient when a configuration's data fix their sum, at the prior medians:
    ``-(median - floor) ref[c, traded] / sum_k median_k ref[c, k]`` (0 where either is absent)."""
    median = np.array([priors[f]["median"] for f in features], float)
    excess = median[traded] - floors(priors, [features[traded]])[0]
    group_sum = reference[:, group] @ median[group]
    traded_sum = excess * reference[:, traded]
    present = (group_sum > 1e-9) & (traded_sum > 1e-9)
    return np.where(present, -traded_sum / np.where(present, group_sum, 1.0), 0.0)


def _per_step_reference(matrix: np.ndarray, n_steps: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """[config, feature]: mean feature value per step of each configuration (the mean over
    configurations that have steps for a configuration without any)."""
    n_config = len(bounds) - 1
    ref = np.zeros((n_config, matrix.shape[1]))
    for c in range(n_config):
        steps = n_steps[bounds[c]:bounds[c + 1]].sum()
        if steps > 0:
            ref[c] = matrix[bounds[c]:bounds[c + 1]].sum(axis=0) / steps
    has = ref.sum(axis=1) > 0
    if has.any() and not has.all():
        ref[~has] = ref[has].mean(axis=0)
    # a constant absent from a configuration still needs a positive reference for P[c]
    return np.where(ref > 0, ref, 1e-12)


CENTRE_SD_RATIO = 0.5
"""A configuration effect is centred when the data alone would pin it to a log-scale sd
below this fraction of the effect's prior scale (`tau_config`); otherwise non-centred."""


def _well_informed(beta_matrix, alpha_matrix, n_steps, bounds, priors, beta_features,
                   alpha_features) -> dict:
    """{"beta", "alpha"}: [config, feature] True where one configuration's data pin the
    coefficient's log down tightly (centred parameterisation), False where they do not
    (non-centred: a centred effect the data barely inform makes a funnel with its scale).

    The rule is the Fisher information of log(coef) at the prior medians with the prior
    step noise: ``I = sum_i n_i (f_ik c_k / m_i)^2 / sigma_step^2`` (``m_i``: the window's
    prior-median mean), centred when ``1 / sqrt(I) < CENTRE_SD_RATIO * tau_config``.
    """
    beta0 = np.array([priors["beta"][f]["median"] for f in beta_features], float)
    alpha0 = np.array([priors["alpha"][f]["median"] for f in alpha_features], float)
    mean = beta_matrix @ beta0 + alpha_matrix @ alpha0
    # d mean / d theta_k = f_k (coef_k - floor_k): the part above the floor moves with theta
    parts = {"beta": beta_matrix * (beta0 - floors(priors["beta"], beta_features)),
             "alpha": alpha_matrix * (alpha0 - floors(priors["alpha"], alpha_features))}
    weight = np.maximum(n_steps, 1.0) / priors["hyper"]["sigma_step"] ** 2
    limit = (CENTRE_SD_RATIO * priors["hyper"]["tau_config"]) ** -2
    out = {}
    for name, part in parts.items():
        share2 = (part / np.where(mean > 0, mean, 1.0)[:, None]) ** 2 * weight[:, None]
        info = np.zeros((len(bounds) - 1, part.shape[1]))
        for c in range(len(bounds) - 1):
            info[c] = share2[bounds[c]:bounds[c + 1]].sum(axis=0)
        out[name] = info > limit
    return out


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
