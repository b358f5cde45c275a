"""Coefficients for any configuration: posterior draws, summaries, JSON and BLIS export.

A configuration that was fitted uses its own posterior draws. One that was not (a new TP
degree, a new GPU, a new model family) is answered through the hierarchy: the effects of
seen levels come from their posteriors, and an unseen level's effect is drawn from
``Normal(0, tau_level)`` for each posterior draw (a population-level prediction, wider
by construction). Unseen levels are only used when the caller allows them explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bayesblis.catalog.kernel_spread import hardware_scales
from bayesblis.constants import CI_PROB, DIM_ALPHA_FEATURE, DIM_CONFIG, DIM_FEATURE
from bayesblis.discrepancy import fitted_load
from bayesblis.errors import UnseenLevelError
from bayesblis.features.beta import ASYNC_STEP_AGGREGATES, LATE_FEATURES
from bayesblis.model.data import config_key, config_row, tp_of
from bayesblis.model.hierarchy import LEVELS
from bayesblis.model.priors import PROPORTIONAL_GROUPS, floors, tie_columns

LEVEL_COLUMNS = {short: column for short, _, column in LEVELS}


def summarize_draws(draws, prob: float | None = None) -> dict:
    """Mean, median and equal-tailed credible interval of 1-D draws."""
    prob = CI_PROB if prob is None else prob
    draws = np.asarray(draws, float).ravel()
    lo, hi = np.quantile(draws, [(1 - prob) / 2, (1 + prob) / 2])
    return {"mean": float(np.mean(draws)), "median": float(np.median(draws)),
            "lo": float(lo), "hi": float(hi), "ci_prob": float(prob)}


@dataclass
class CoefficientDraws:
    """Posterior draws of one configuration's coefficients (beta in feature order)."""

    config: str
    beta_features: list
    alpha_features: list
    beta: np.ndarray          # [draws, beta features]
    alpha: np.ndarray         # [draws, alpha features], µs-scaled coefficients
    noise_sigma: np.ndarray   # [draws] relative step-time noise
    noise_nu: np.ndarray      # [draws] Student-t degrees of freedom
    unseen_levels: dict = field(default_factory=dict)  # level -> value never fitted
    seen_config: bool = True
    feature_factors: dict = field(default_factory=dict)  # the deployment's kernel-priced factors (Deployment.feature_factors)
    fitted_load: float | None = None  # requests in flight its windows held (discrepancy.fitted_load)
    blis_tp_slot: tuple | None = None  # the deployment's TP all-reduce in BLIS's basis (features.beta.blis_tp_slot)
    blis_async_step: np.ndarray | None = None  # features of the step BLIS's alpha0 waits (features.beta.blis_async_step_features)

    @property
    def n_draws(self) -> int:
        return self.beta.shape[0]

    def summary(self, prob: float | None = None) -> dict:
        """{"beta": {name: summary}, "alpha": {...}} over draws."""
        return {"beta": {f: summarize_draws(self.beta[:, i], prob)
                         for i, f in enumerate(self.beta_features)},
                "alpha": {f: summarize_draws(self.alpha[:, i], prob)
                          for i, f in enumerate(self.alpha_features)}}

    def mean(self) -> "CoefficientDraws":
        """A one-draw set holding the posterior means."""
        return CoefficientDraws(self.config, self.beta_features, self.alpha_features,
                                self.beta.mean(0, keepdims=True), self.alpha.mean(0, keepdims=True),
                                np.array([np.mean(self.noise_sigma)]),
                                np.array([np.median(self.noise_nu)]),
                                self.unseen_levels, self.seen_config, self.feature_factors,
                                self.fitted_load, self.blis_tp_slot, self.blis_async_step)


def _stacked(post, name):
    """Posterior variable with (chain, draw) flattened to a leading sample axis."""
    arr = post[name]
    return arr.stack(sample=("chain", "draw")).transpose("sample", ...)


def step_noise(posterior) -> np.ndarray:
    """[S, config] draws of the per-step noise the simulator should add: the fitted
    ``sigma_step`` less, in variance, each configuration's `client_windows.ttft_phase_share`
    (its TTFT windows' spread from the arrival phase, which the simulator draws itself; in
    the shared runs nearly all of ``sigma_step``: with it twice, TTFT p90 came out 7-13%
    high). Unchanged for configurations without client TTFT windows."""
    from bayesblis.client_windows import ttft_phase_share

    sigma = _stacked(posterior.idata.posterior, "sigma_step").values
    data = getattr(posterior, "data", None)
    if data is None or "phase_var" not in data.obs:
        return sigma
    post = posterior.idata.posterior
    beta = post["beta"].mean(("chain", "draw")).sel({DIM_FEATURE: list(posterior.beta_features)})
    alpha = post["alpha"].mean(("chain", "draw")).sel(
        {DIM_ALPHA_FEATURE: list(posterior.alpha_features)})
    obs = data.obs
    X = obs[[f"f_{f}" for f in posterior.beta_features]].to_numpy(float)
    XA = data.alpha_matrix(list(posterior.alpha_features))
    configs = obs["config"].astype(str).to_numpy()
    busy = (obs["phase_var"].fillna(0.0) > 0).to_numpy()
    share = np.zeros(sigma.shape[1])
    for ci, key in enumerate(posterior.configs["config"].astype(str)):
        mine = configs == key
        if not busy[mine].any():
            continue
        steps = X[mine] @ beta.isel({DIM_CONFIG: ci}).values
        mean = steps + XA[mine] @ alpha.isel({DIM_CONFIG: ci}).values
        share[ci] = ttft_phase_share(obs[mine], steps, mean)
    return np.sqrt(np.maximum(sigma ** 2 - share[None, :], 0.0))


def coefficient_draws(posterior, *, model: str, model_family: str, arch: str, hardware: str,
                      tp: int = 1, ep: int = 1, dtype: str = "bf16",
                      allow_unseen: bool = False, n_draws: int | None = None,
                      seed: int = 0, new_run: bool = False) -> CoefficientDraws:
    """Draws of alpha and beta for one configuration, seen or (if allowed) unseen.

    ``new_run=True`` multiplies each draw by a fresh run factor ``exp(tau_run z)``: the
    predictive for a new experiment on this configuration (use it to simulate; leave it
    off to report the configuration's coefficients). An unseen configuration's fresh
    effects come in antithetic pairs (`antithetic_normal`), which `n_draws` keeps together.
    """
    post = posterior.idata.posterior
    key = config_key(model, hardware, tp, ep, dtype)
    rng = np.random.default_rng(seed)
    values = {"arch": arch, "hardware": hardware, "family": model_family}
    row = posterior.config_row(key)
    sigma_all = step_noise(posterior)  # [S, config]
    nu = _stacked(post, "nu").values
    n_total = nu.shape[0]
    if row is not None:
        ci = int(np.flatnonzero(posterior.configs["config"].to_numpy() == key)[0])
        beta = _stacked(post, "beta").isel({DIM_CONFIG: ci}).values
        alpha = _stacked(post, "alpha").isel({DIM_CONFIG: ci}).values
        sigma = sigma_all[:, ci]
        unseen = {}
    else:
        unseen = {}
        for short, column in LEVEL_COLUMNS.items():
            seen_values = set(posterior.configs[column].astype(str))
            if str(values[short]) not in seen_values:
                unseen[column] = values[short]
        if unseen and not allow_unseen:
            raise UnseenLevelError(
                "configuration " + key + " has levels the posterior never saw: "
                + ", ".join(f"{k}={v}" for k, v in unseen.items())
                + "; pass allow_unseen (CLI: --allow-unseen) for a population-level answer")
        if "beta_mu" not in post:  # a calibrated file (bayesblis calibrate): no population
            raise UnseenLevelError(
                f"configuration {key} is not in this posterior, which holds only "
                + ", ".join(posterior.configs["config"]) + " (a calibration of "
                + str(post.attrs.get("bayesblis_calibration_of", "another posterior"))
                + "; ask that posterior for other configurations)")
        seen = {short: set(posterior.configs[column].astype(str)) for short, column in LEVEL_COLUMNS.items()}
        scales = {"hardware": hardware_scales(str(hardware))}
        beta = _population_draws(post, "beta", DIM_FEATURE, values, seen, rng, posterior.priors,
                                 scales)
        alpha = _population_draws(post, "alpha", DIM_ALPHA_FEATURE, values, seen, rng,
                                  posterior.priors)
        sigma = sigma_all[np.arange(n_total), rng.integers(0, sigma_all.shape[1], n_total)]
    if new_run and "tau_run" in post:
        factor = np.exp(_stacked(post, "tau_run").values * antithetic_normal(rng, (n_total,)))
        beta, alpha = beta * factor[:, None], alpha * factor[:, None]
    draws = CoefficientDraws(key, list(posterior.beta_features), list(posterior.alpha_features),
                             beta, alpha, sigma, nu, unseen, seen_config=row is not None)
    if row is not None and getattr(posterior, "data", None) is not None:
        draws.fitted_load = fitted_load(posterior.data.obs, key)
    if n_draws is not None and n_draws < n_total:
        pick = antithetic_pick(rng, n_total, n_draws) if row is None else \
            np.sort(rng.choice(n_total, n_draws, replace=False))
        draws.beta, draws.alpha = draws.beta[pick], draws.alpha[pick]
        draws.noise_sigma, draws.noise_nu = draws.noise_sigma[pick], draws.noise_nu[pick]
    return draws


def antithetic_normal(rng, shape) -> np.ndarray:
    """Standard normals whose rows come in antithetic pairs: row ``i + half`` is minus row
    ``i`` (half = rows // 2; an odd last row is drawn alone). A configuration never fitted
    draws its fresh level effects this way, so its predictive median does not wander with
    the draws picked: the sampled effects are symmetric about zero by construction."""
    shape = tuple(shape)
    half = shape[0] // 2
    z = rng.standard_normal((shape[0] - half, *shape[1:]))
    return np.concatenate([z, -z[:half]])


def antithetic_pick(rng, n_total: int, n_draws: int) -> np.ndarray:
    """`n_draws` sorted rows of `n_total` that keep `antithetic_normal`'s pairs together
    (an odd `n_draws` adds one row alone)."""
    half = n_total // 2
    first = rng.choice(half, n_draws // 2, replace=False)
    rows = np.concatenate([first, first + half])
    if n_draws % 2:
        rest = np.setdiff1d(np.arange(n_total), rows)
        rows = np.append(rows, rng.choice(rest))
    return np.sort(rows)


def level_effects(post, name: str, dim: str):
    """Yield (level short name, level column, columns of `dim`, tau [S, k], effects) for every
    pooling level with a scale in the posterior (config included, last); `effects` maps each
    fitted level value to its [S, k] effect draws tau * z (empty when the fit gave the level
    no effect: a single group, or a grouping identical to a finer level's)."""
    features = [str(f) for f in post[dim].values]
    for short, level_dim, column in (*LEVELS, ("config", DIM_CONFIG, "config")):
        if f"{name}_tau_{short}" not in post:
            continue
        tau_da = _stacked(post, f"{name}_tau_{short}")
        cols = [features.index(str(f)) for f in tau_da[f"{name}_{short}_feature"].values]
        tau = tau_da.values
        effects = {}
        if short != "config" and f"{name}_z_{short}" in post:
            z = _stacked(post, f"{name}_z_{short}")
            effects = {str(v): tau * z.isel({level_dim: i}).values
                       for i, v in enumerate(z[level_dim].values)}
        yield short, column, cols, tau, effects


def _population_draws(post, name, dim, values, seen, rng, priors, scales=None):
    """floor + exp(mu + level effects + a fresh config effect) for an unfitted
    configuration (floors: the fit's `priors`, model/priors.py).

    Seen levels contribute their posterior effects (0 when the fit gave that level no
    effect); unseen ones (and the new configuration itself) a fresh Normal(0, tau) draw per
    posterior sample, tau capped per coefficient by `scales` ({level: {feature: sd}}: a new
    GPU's kernel-measured coefficients, `catalog.kernel_spread.hardware_scales`).
    """
    theta = _stacked(post, f"{name}_mu").values.copy()  # [S, K]
    features = [str(f) for f in post[dim].values]
    for short, _, cols, tau, effects in level_effects(post, name, dim):
        if short != "config" and str(values[short]) in seen[short]:
            effect = effects.get(str(values[short]), 0.0)
        else:
            effect = _capped(tau, [features[c] for c in cols], (scales or {}).get(short)) \
                * antithetic_normal(rng, tau.shape)
        theta[:, cols] += effect
    groups = PROPORTIONAL_GROUPS.items() if name == "beta" else ()
    for group_name, members in groups:
        if f"beta_tau_{group_name}" not in post:
            continue
        # a new configuration's group sum (per-step constant, KV cost per token) strays from
        # its physics sum like a fitted one's does (LatencyModel._proportional_groups)
        group = [features.index(f) for f in members if f in features]
        tau = _stacked(post, f"beta_tau_{group_name}").values
        theta[:, group] += (tau * antithetic_normal(rng, tau.shape))[:, None]
    coef = floors(priors[name], features) + np.exp(theta)
    return tie_columns(coef, features) if name == "beta" else coef


def _capped(tau: np.ndarray, features: list[str], caps: dict | None) -> np.ndarray:
    """Level scales tau [S, k] with column j at most caps[features[j]] where given."""
    if not caps:
        return tau
    cap = np.array([caps.get(f, np.inf) for f in features])
    return np.minimum(tau, cap[None, :])


def deployment_draws(posterior, deployment, **kwargs) -> CoefficientDraws:
    """`coefficient_draws` for a `features.physics.Deployment`."""
    from bayesblis.features.beta import blis_async_step_features, blis_tp_slot

    levels = config_row(deployment)
    levels.pop("config")
    draws = coefficient_draws(posterior, **levels, **kwargs)
    draws.feature_factors = deployment.feature_factors
    draws.blis_tp_slot = blis_tp_slot(deployment)
    draws.blis_async_step = blis_async_step_features(deployment)
    return draws


def posterior_draws(posterior_path, deployment, n_draws=None, *, allow_unseen=False, seed=0,
                    new_run=True):
    """Load a posterior file and return draws for `deployment` (simulator entry point:
    by default the predictive of a new run)."""
    from bayesblis.model.store import load_posterior

    if isinstance(posterior_path, CoefficientsFile):   # fixed coefficients: no hierarchy
        return posterior_path.draws_for(deployment, n_draws, seed=seed)
    posterior = posterior_path if hasattr(posterior_path, "idata") else load_posterior(posterior_path)
    return deployment_draws(posterior, deployment, n_draws=n_draws,
                            allow_unseen=allow_unseen, seed=seed, new_run=new_run)


# ---------------------------------------------------------------------- reading files
POINT_STATISTIC = "median"
"""The value of a coefficient a coefficients file summarises with mean, median and interval
(`bayesblis coefficients` JSON) that `simulate --coefficients` and `plan --coefficients`
run with: each coefficient's posterior median (the vector of medians; not a joint draw)."""

COEFFICIENTS_EXPECTED = "coefficients (data_specs/coefficients-input.md)"

OPTIONAL_BETA = ("kv_token_layer_s", "tp_sync_s", *LATE_FEATURES)
"""Step terms an exported JSON may lack (a posterior fitted without them; 0 = the term is
absent), as `simulate.results.OPTIONAL_ALPHA` for alpha."""


@dataclass
class CoefficientsFile:
    """Fixed coefficients read from a file (`read_coefficients_file`): one set, or the draws
    a file carries, in BETA_FEATURES / ALPHA_FEATURES order (alpha in µs).

    `posterior_draws` and `bayesblis.plan.run_plan` take it where they take a posterior
    (it has no population: every deployment gets these coefficients)."""

    path: str
    format: str             # bayesblis-json | bayesblis-yaml | export-json | blis-yaml
    beta: np.ndarray        # [sets, beta features] (None for blis-yaml: see blis)
    alpha: np.ndarray       # [sets, alpha features]
    noise_sigma: np.ndarray  # [sets]
    noise_nu: np.ndarray     # [sets]
    point: str              # what one set is: "values", "median", "draws"
    config: str | None = None            # configuration the file was written for
    intervals: dict | None = None        # {"beta"|"alpha": {name: {mean, median, lo, hi, ci_prob}}}
    notes: list = field(default_factory=list)
    blis: dict | None = None             # blis-yaml without its JSON: the BLIS-order lists
    companion: str | None = None         # the JSON a BLIS YAML was read through
    idata = None   # not a posterior file: `run_plan` takes it as already loaded

    @property
    def n_sets(self) -> int:
        return 1 if self.beta is None else self.beta.shape[0]

    def metadata(self) -> dict:
        """What RESULT.json and PLAN.json record of the file (`metadata.coefficients`)."""
        meaning = {"values": "the file's values",
                   "median": f"each coefficient's posterior {POINT_STATISTIC} (the file's "
                             "intervals are kept below; they carry no joint draws, so result "
                             "intervals are the step noise's only)",
                   "draws": "the file's coefficient draws (result intervals include the "
                            "coefficients' uncertainty)",
                   "mean": "each coefficient's posterior mean (a bayesblis-go file)",
                   "draw": "one predictive draw of the coefficients (a bayesblis-go file)",
                   "blis": "BLIS trained-physics coefficients mapped slot by slot onto "
                           "bayesblis's features (approximate: the bases differ)"}[self.point]
        out = {"path": self.path, "format": self.format, "point": self.point,
               "meaning": meaning, "config": self.config, "n_sets": self.n_sets,
               "notes": list(self.notes)}
        if self.companion:
            out["read_through"] = self.companion
        if self.intervals:
            out["intervals"] = self.intervals
        return out

    def source(self) -> str:
        via = f" via {Path(self.companion).name}" if self.companion else ""
        return f"coefficients file {self.path}{via} ({self.point})"

    def draws_for(self, deployment, n_draws: int | None = None, seed: int = 0) -> CoefficientDraws:
        """`CoefficientDraws` for `deployment`: the file's sets (a seeded subset when it has
        more than `n_draws`; one set repeated to `n_draws`: draws then differ only in their
        step noise). A file written for another configuration is used as it is, with a
        warning."""
        import warnings

        from bayesblis.errors import InputWarning
        from bayesblis.features.alpha import ALPHA_FEATURES
        from bayesblis.features.beta import BETA_FEATURES

        key = deployment.config_key
        if self.config and self.config != key:
            warnings.warn(f"{self.path}: coefficients of {self.config} applied to {key}",
                          InputWarning, stacklevel=2)
        if self.blis is not None:
            beta, alpha = _from_blis(self.blis, deployment)
            beta, alpha = beta[None, :], alpha[None, :]
        else:
            beta, alpha = self.beta, self.alpha
        sigma, nu = self.noise_sigma, self.noise_nu
        d = beta.shape[0]
        if n_draws is not None and d > 1 and n_draws < d:
            pick = np.sort(np.random.default_rng(seed).choice(d, n_draws, replace=False))
            beta, alpha, sigma, nu = beta[pick], alpha[pick], sigma[pick], nu[pick]
        elif n_draws is not None and d == 1 and n_draws > 1:
            beta, alpha = beta.repeat(n_draws, 0), alpha.repeat(n_draws, 0)
            sigma, nu = sigma.repeat(n_draws), nu.repeat(n_draws)
        return CoefficientDraws(self.config or key, list(BETA_FEATURES), list(ALPHA_FEATURES),
                                np.asarray(beta, float), np.asarray(alpha, float),
                                np.asarray(sigma, float), np.asarray(nu, float),
                                feature_factors=deployment.feature_factors)


def read_coefficients_file(path) -> CoefficientsFile:
    """Read any coefficients file `simulate --coefficients` and `plan --coefficients` take
    (data_specs/coefficients-input.md):

    - the JSON `bayesblis coefficients` writes: every value a summary {mean, median, lo, hi,
      ci_prob}; one set of medians (`POINT_STATISTIC`), the intervals kept; with a `draws`
      object, its draws;
    - the BLIS YAML it writes (`trained_physics_coefficients: {alpha_coeffs, beta_coeffs}`,
      BLIS order): read through the JSON written beside it (same name, .json) when that
      JSON's `blis` lists are the YAML's (exact: bayesblis's own coefficients); otherwise
      BLIS's slots mapped back onto bayesblis's features (`blis_to_bayesblis`;
      approximate, a warning says so);
    - hand-written files: JSON {alpha: {name: µs}, beta: {name: value}} and YAML lists
      `alpha_coeffs` / `beta_coeffs` in bayesblis order (`simulate.results.load_coefficients`).

    Errors (`InputError`) name the file, the field and what was expected."""
    from bayesblis.errors import InputError
    from bayesblis.io.text import parse_json_text, parse_yaml_text, read_text_checked
    from bayesblis.simulate.results import load_coefficients

    path = Path(path)
    text = read_text_checked(path, expected=COEFFICIENTS_EXPECTED)
    if path.suffix.lower() in (".yaml", ".yml"):
        data = parse_yaml_text(text, path, expected=COEFFICIENTS_EXPECTED)
        if isinstance(data, dict) and "trained_physics_coefficients" in data:
            return _read_blis_yaml(path, data, text)
        fmt = "bayesblis-yaml"
    else:
        data = parse_json_text(text, path, expected=COEFFICIENTS_EXPECTED)
        if isinstance(data, dict) and data.get("format") == "bayesblis-go":
            return _read_go(path)
        if isinstance(data, dict) and (_is_export(data) or "draws" in data):
            return _read_export_json(path, data)
        fmt = "bayesblis-json"
    if not isinstance(data, dict):
        raise InputError(path, "not a mapping", expected=COEFFICIENTS_EXPECTED)
    d = load_coefficients(path)
    return CoefficientsFile(str(path), fmt, d.beta, d.alpha, d.noise_sigma, d.noise_nu, "values",
                            config=data.get("config") if isinstance(data.get("config"), str) else None)


def read_coefficient_files(paths) -> CoefficientsFile:
    """One file (`read_coefficients_file`), or several as the draws of one set: e.g. the
    `<stem>.draw000.json` ... (bayesblis-go) or `.yaml` files `bayesblis coefficients
    --draws N` writes, one draw each. Every file must be written for the same configuration
    (when it names one); the sets are stacked in the order given."""
    from bayesblis.errors import InputError

    files = [read_coefficients_file(p) for p in paths]
    if len(files) == 1:
        return files[0]
    first = files[0]
    configs = {f.config for f in files if f.config}
    if len(configs) > 1:
        other = next(f for f in files if f.config and f.config != first.config)
        raise InputError(other.path, f"written for {other.config}, {first.path} for {first.config}",
                         field="config", expected="coefficient files of one configuration")
    notes = sorted({n for f in files for n in f.notes})
    paths = ", ".join(f.path for f in files)
    config = next(iter(configs), None)
    if any(f.blis is not None for f in files):   # slot mappings need the deployment
        return _BlisSets(paths, "blis-yaml", None, None, np.zeros(len(files)),
                         np.full(len(files), 30.0), "blis", config=config, notes=notes,
                         sets=files)
    return CoefficientsFile(paths, first.format, np.concatenate([f.beta for f in files]),
                            np.concatenate([f.alpha for f in files]),
                            np.concatenate([f.noise_sigma for f in files]),
                            np.concatenate([f.noise_nu for f in files]), "draws",
                            config=config, notes=notes)


@dataclass
class _BlisSets(CoefficientsFile):
    """Several BLIS YAML files read without their JSON: each mapped for the deployment."""

    sets: list = field(default_factory=list)

    @property
    def n_sets(self) -> int:
        return len(self.sets)

    def draws_for(self, deployment, n_draws: int | None = None, seed: int = 0) -> CoefficientDraws:
        parts = [f.draws_for(deployment) for f in self.sets]
        merged = CoefficientsFile(self.path, self.format, np.concatenate([c.beta for c in parts]),
                                  np.concatenate([c.alpha for c in parts]),
                                  np.concatenate([c.noise_sigma for c in parts]),
                                  np.concatenate([c.noise_nu for c in parts]), "draws",
                                  config=self.config)
        return merged.draws_for(deployment, n_draws, seed)


def _read_go(path: Path) -> CoefficientsFile:
    """A `bayesblis-go` file (`blis_export.read_go_file`): bayesblis's own coefficients of
    one set (`draw` null: the posterior mean; else one predictive draw)."""
    from bayesblis.blis_export import read_go_file
    from bayesblis.errors import InputError
    from bayesblis.features.alpha import ALPHA_FEATURES
    from bayesblis.features.beta import BETA_FEATURES

    data = read_go_file(path)
    for key, names, values in (("beta_features", BETA_FEATURES, "beta"),
                               ("alpha_features", ALPHA_FEATURES, "alpha_us")):
        if list(data.get(key) or []) != list(names):
            raise InputError(path, f"{data.get(key)!r}", field=key,
                             expected=f"this version's features {list(names)}")
        vals = data.get(values)
        if not isinstance(vals, list) or len(vals) != len(names):
            raise InputError(path, f"invalid value {vals!r}", field=values,
                             expected=f"a list of {len(names)} numbers")
    beta = np.array([_number(v, path, "beta") for v in data["beta"]])
    alpha = np.array([_number(v, path, "alpha_us") for v in data["alpha_us"]])
    sigma = _number(data.get("noise_sigma", 0.0), path, "noise_sigma", "a number >= 0", 0.0)
    nu = _number(data.get("noise_nu", 30.0), path, "noise_nu", "a number > 0", 1e-12)
    draw = data.get("draw")
    notes = [] if draw is None else [f"draw {draw} of the predictive draws it was written with"]
    return CoefficientsFile(str(path), "bayesblis-go", beta[None, :], alpha[None, :],
                            np.array([sigma]), np.array([nu]), "mean" if draw is None else "draw",
                            config=data.get("config") if isinstance(data.get("config"), str) else None,
                            notes=notes)


def _is_export(data: dict) -> bool:
    """Values are summaries (dicts), as `bayesblis coefficients` writes them."""
    blocks = [data.get(key) for key in ("beta", "alpha")]
    return any(isinstance(b, dict) and any(isinstance(v, dict) for v in b.values()) for b in blocks)


def _number(value, path, field_name, expected="a finite number", minimum=None):
    from bayesblis.errors import InputError

    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) \
            or (minimum is not None and value < minimum):
        raise InputError(path, f"invalid value {value!r}", field=field_name, expected=expected)
    return float(value)


def _read_export_json(path: Path, data: dict, companion_of: Path | None = None) -> CoefficientsFile:
    """The JSON `bayesblis coefficients` writes (see `read_coefficients_file`)."""
    from bayesblis.errors import InputError
    from bayesblis.features.alpha import ALPHA_FEATURES
    from bayesblis.features.beta import BETA_FEATURES
    from bayesblis.simulate.results import OPTIONAL_ALPHA

    names = {"beta": BETA_FEATURES, "alpha": ALPHA_FEATURES}
    optional = {"beta": OPTIONAL_BETA, "alpha": OPTIONAL_ALPHA}
    medians, intervals, absent = {}, {}, []
    for key in ("beta", "alpha"):
        block = data.get(key)
        if not isinstance(block, dict):
            raise InputError(path, "missing or not an object", field=key,
                             expected=f"{{name: {{mean, median, lo, hi}}}} with names {list(names[key])}")
        unknown = sorted(set(block) - set(names[key]))
        missing = [n for n in names[key] if n not in block and n not in optional[key]]
        if unknown or missing:
            bad = (unknown or missing)[0]
            raise InputError(path, f"unknown {unknown} / missing {missing} coefficient(s)",
                             field=f"{key}.{bad}", expected=f"the names {list(names[key])}")
        vec, kept = [], {}
        for n in names[key]:
            s = block.get(n)
            if s is None:          # an optional term the posterior was fitted without
                vec.append(0.0)
                absent.append(f"{key}.{n}")
                continue
            if not isinstance(s, dict):
                raise InputError(path, f"invalid value {s!r}", field=f"{key}.{n}",
                                 expected="a summary {mean, median, lo, hi, ci_prob} (a "
                                          "bayesblis coefficients export)")
            if "median" not in s:
                raise InputError(path, "no median", field=f"{key}.{n}.median",
                                 expected="a summary {mean, median, lo, hi, ci_prob}")
            vec.append(_number(s["median"], path, f"{key}.{n}.median"))
            kept[n] = {k: _number(s[k], path, f"{key}.{n}.{k}") for k in
                       ("mean", "median", "lo", "hi", "ci_prob") if k in s}
        medians[key] = np.array(vec)
        intervals[key] = kept
    sigma = _summary_value(data.get("noise_sigma", 0.0), path, "noise_sigma", 0.0)
    nu = _summary_value(data.get("noise_nu", 30.0), path, "noise_nu", None)
    if nu <= 0:
        raise InputError(path, f"invalid value {nu!r}", field="noise_nu", expected="a number > 0")
    beta, alpha, point = medians["beta"][None, :], medians["alpha"][None, :], "median"
    sigmas, nus = np.array([sigma]), np.array([nu])
    notes = []
    if "draws" in data:
        beta, alpha, sigmas, nus = _export_draws(path, data["draws"], sigma, nu)
        point = "draws"
    if data.get("population_level"):
        notes.append("population-level coefficients (levels the posterior never saw: "
                     + ", ".join(f"{k}={v}" for k, v in (data.get("unseen_levels") or {}).items())
                     + ")")
    if absent:
        notes.append("terms the file does not carry (the posterior was fitted without them), "
                     "simulated as absent (0): " + ", ".join(absent))
    if sigma == 0 and "noise_sigma" not in data:
        notes.append("the file has no step noise (noise_sigma): runs are deterministic")
    cfg = data.get("config") if isinstance(data.get("config"), str) else None
    src = companion_of or path
    return CoefficientsFile(str(src), "blis-yaml" if companion_of else "export-json", beta, alpha,
                            sigmas, nus, point, config=cfg, intervals=intervals, notes=notes,
                            companion=str(path) if companion_of else None)


def _summary_value(value, path, name, minimum):
    if isinstance(value, dict):
        if "median" not in value:
            from bayesblis.errors import InputError

            raise InputError(path, "no median", field=f"{name}.median",
                             expected="a number or a summary {mean, median, lo, hi}")
        value = value["median"]
    return _number(value, path, name, "a number >= 0" if minimum is not None else "a number > 0",
                   minimum)


def _export_draws(path, draws, sigma, nu):
    """The `draws` object of an export: {"beta": {name: [D]}, "alpha": {name: [D]},
    optional "noise_sigma": [D], "noise_nu": [D]} -> arrays."""
    from bayesblis.errors import InputError
    from bayesblis.features.alpha import ALPHA_FEATURES
    from bayesblis.features.beta import BETA_FEATURES
    from bayesblis.simulate.results import OPTIONAL_ALPHA

    if not isinstance(draws, dict):
        raise InputError(path, "not an object", field="draws",
                         expected='{"beta": {name: [values]}, "alpha": {name: [values]}}')
    out, n = {}, None
    for key, names in (("beta", BETA_FEATURES), ("alpha", ALPHA_FEATURES)):
        block = draws.get(key)
        if not isinstance(block, dict):
            raise InputError(path, "missing or not an object", field=f"draws.{key}",
                             expected="{name: [one value per draw]}")
        cols = []
        for name in names:
            vals = block.get(name)
            if vals is None and name in (OPTIONAL_ALPHA if key == "alpha" else OPTIONAL_BETA):
                vals = [0.0] * (n or len(next(iter(block.values()), [0.0])))
            if not isinstance(vals, list) or not vals:
                raise InputError(path, f"invalid value {vals!r}", field=f"draws.{key}.{name}",
                                 expected="a list of numbers, one per draw")
            n = len(vals) if n is None else n
            if len(vals) != n:
                raise InputError(path, f"{len(vals)} values, other coefficients have {n}",
                                 field=f"draws.{key}.{name}", expected="one value per draw")
            cols.append([_number(v, path, f"draws.{key}.{name}") for v in vals])
        out[key] = np.array(cols).T
    sig = draws.get("noise_sigma", [sigma] * n)
    nus = draws.get("noise_nu", [nu] * n)
    for name, vals in (("noise_sigma", sig), ("noise_nu", nus)):
        if not isinstance(vals, list) or len(vals) != n:
            raise InputError(path, f"invalid value {vals!r}", field=f"draws.{name}",
                             expected=f"a list of {n} numbers")
    sig = np.array([_number(v, path, "draws.noise_sigma", "a number >= 0", 0.0) for v in sig])
    nus = np.array([_number(v, path, "draws.noise_nu", "a number > 0", 1e-12) for v in nus])
    return out["beta"], out["alpha"], sig, nus


def _read_blis_yaml(path: Path, data: dict, text: str = "") -> CoefficientsFile:
    """A BLIS `trained_physics_coefficients` YAML (see `read_coefficients_file`)."""
    import re
    import warnings

    from bayesblis.errors import InputError, InputWarning
    from bayesblis.features.beta import BLIS_BETA_ORDER
    from bayesblis.io.text import load_json_checked

    block = data["trained_physics_coefficients"]
    if not isinstance(block, dict):
        raise InputError(path, "not a mapping", field="trained_physics_coefficients",
                         expected="alpha_coeffs and beta_coeffs lists")
    lists = {}
    for name, sizes in (("alpha_coeffs", (len(BLIS_ALPHA_ORDER),)),
                        ("beta_coeffs", (len(BLIS_BETA_ORDER) - 1, len(BLIS_BETA_ORDER)))):
        vals = block.get(name)
        if not isinstance(vals, list) or len(vals) not in sizes:
            raise InputError(path, f"invalid value {vals!r}",
                             field=f"trained_physics_coefficients.{name}",
                             expected=f"a list of {' or '.join(map(str, sizes))} numbers (BLIS order)")
        lists[name] = [_number(v, path, f"trained_physics_coefficients.{name}") for v in vals]
    if len(lists["beta_coeffs"]) < len(BLIS_BETA_ORDER):   # BLIS: beta_EP defaults to beta4
        lists["beta_coeffs"].append(lists["beta_coeffs"][3])
    companion = path.with_suffix(".json")
    if companion.is_file():
        doc = load_json_checked(companion, expected="the JSON written beside the BLIS YAML")
        blis = doc.get("blis") if isinstance(doc, dict) else None
        if isinstance(blis, dict) and _same(blis.get("beta_coeffs"), lists["beta_coeffs"]) \
                and _same(blis.get("alpha_coeffs"), lists["alpha_coeffs"]):
            return _read_export_json(companion, doc, companion_of=path)
        written_for = re.search(r"^#.*coefficients for (\S+)", text, re.MULTILINE)
        if isinstance(blis, dict) and written_for and written_for.group(1) == doc.get("config"):
            # a YAML `coefficients` wrote beside the JSON in other than BLIS's slots (e.g.
            # projected onto BLIS's basis, --project-on): the JSON holds what it came from
            warnings.warn(f"{path}: its lists are not the BLIS slots of {companion.name} (a "
                          "projection onto BLIS's basis, or edited); bayesblis simulates the "
                          f"coefficients of {companion.name}, BLIS runs the YAML's",
                          InputWarning, stacklevel=3)
            read = _read_export_json(companion, doc, companion_of=path)
            read.notes.append(f"the YAML's lists differ from {companion.name}'s BLIS slots "
                              "(a projection, or edited): the JSON's coefficients simulated")
            return read
        note = f"{companion.name} beside it holds other coefficients"
    else:
        note = f"no {companion.name} beside it"
    warnings.warn(f"{path}: BLIS trained-physics coefficients ({note}) mapped slot by slot onto "
                  "bayesblis's features: approximate, the two step-time formulas differ "
                  "(data_specs/coefficients-input.md)", InputWarning, stacklevel=3)
    notes = [f"read without its JSON ({note}): BLIS slots mapped onto bayesblis features"]
    return CoefficientsFile(str(path), "blis-yaml", None, None, np.array([0.0]), np.array([30.0]),
                            "blis", notes=notes, blis=lists)


def _same(a, b, rtol: float = 1e-5) -> bool:
    """The YAML's lists (printed to 6 significant digits) are the JSON's."""
    if not isinstance(a, list) or len(a) != len(b):
        return False
    try:
        return bool(np.allclose(np.asarray(a, float), np.asarray(b, float), rtol=rtol, atol=1e-12))
    except (TypeError, ValueError):
        return False


def blis_to_bayesblis(blis: dict, *, factors: dict | None = None,
                      tp_slot: tuple[float, float, float] | None = None,
                      async_step=None) -> tuple[dict, dict]:
    """BLIS trained-physics lists ({"alpha_coeffs": [3], "beta_coeffs": [11]}) mapped onto
    bayesblis's coefficients ({beta name: value}, {alpha name: µs}): the inverse of the
    slot mapping `features.beta.to_blis_beta` / `to_blis_alpha` applies, where one exists.
    Each coefficient is divided by its kernel-priced factor (`factors`, as
    `Deployment.feature_factors`: the ones the export multiplied in); beta5 becomes the
    per-layer overhead (tp_sync_s 0: the export folds it into beta5 at its TP); beta1b and beta2b (KV memory,
    one coefficient here) their mean; beta8 (per MoE layer) has no bayesblis slot and is
    dropped; alpha1 (post-decode) is the return cost at `BLIS_TYPICAL_REQUEST`'s decoding
    requests, and alpha0 holds it once more (the prompt cost stays in alpha0: alpha_prompt_s
    0); kv_token_layer_s is 0 (no BLIS slot), offload_s 1 (the physics estimate), sampling_s
    0 (beta6, per request, holds the sampler's cost); a beta2a of 0
    (the export's: decode compute under the roofline) reads as the prefill compute's, to which
    the fit ties it. `tp_slot`
    (`features.beta.blis_tp_slot`): beta4 is tp_comm times its slope factor, and beta7 holds
    tp_comm times its per-step µs besides the step overhead."""
    b, a = blis["beta_coeffs"], blis["alpha_coeffs"]
    tp_per_token, tp_step_us = (tp_slot or (1.0, 0.0, 0.0))[:2]
    tp_comm = b[3] / tp_per_token
    beta = {"prefill_compute_s": b[0], "decode_compute_s": b[1] or b[0],
            "weight_traffic_s": b[2], "kv_traffic_s": 0.5 * (b[8] + b[9]),
            "kv_token_layer_s": 0.0, "tp_comm_s": tp_comm, "tp_sync_s": 0.0, "ep_comm_s": b[10],
            "offload_s": 1.0, "layer_overhead_s": b[4], "request_overhead_s": b[5],
            "step_overhead_s": b[6] - tp_comm * tp_step_us, "sampling_s": 0.0,
            "gemm_fixed_s": 0.0}
    beta = {k: v / float((factors or {}).get(k, 1.0)) for k, v in beta.items()}
    wait_us = async_wait_us(beta, async_step)
    decoding = BLIS_TYPICAL_REQUEST["decoding_requests"]
    alpha = {"alpha_const_s": max(a[0] - wait_us - a[1], 0.0), "alpha_prompt_s": 0.0,
             "alpha_output_s": a[2], "alpha_frontend_s": a[1] / decoding}
    return beta, alpha


def async_wait_us(beta: dict, async_step) -> float:
    """µs of the async-scheduling wait a slot-mapped BLIS alpha0 holds: the step of
    `async_step` (`features.beta.blis_async_step_features`; None: 0) at `beta` ({name:
    value}; a feature it lacks counts 0)."""
    if async_step is None:
        return 0.0
    from bayesblis.features.beta import BETA_FEATURES

    values = np.array([float(beta.get(f, 0.0)) for f in BETA_FEATURES])
    return float(np.dot(np.asarray(async_step, float), values) * 1e6)


def _from_blis(blis: dict, deployment) -> tuple[np.ndarray, np.ndarray]:
    from bayesblis.features.alpha import ALPHA_FEATURES
    from bayesblis.features.beta import BETA_FEATURES, blis_async_step_features, blis_tp_slot

    beta, alpha = blis_to_bayesblis(blis, factors=deployment.feature_factors,
                                    tp_slot=blis_tp_slot(deployment),
                                    async_step=blis_async_step_features(deployment))
    return (np.array([beta[f] for f in BETA_FEATURES], float),
            np.array([alpha[f] for f in ALPHA_FEATURES], float))


# ---------------------------------------------------------------------- export
BLIS_ALPHA_ORDER = ("alpha0_arrival_to_queue_us", "alpha1_post_decode_us", "alpha2_per_output_token_us")
"""BLIS trained-physics `alpha_coeffs` order. BLIS has no slot for bayesblis's
per-prompt-token alpha nor for its per-request-decoding return cost (`alpha_frontend_s`):
a slot-mapped export prices both at `BLIS_TYPICAL_REQUEST` (the JSON export keeps them)."""

BLIS_TYPICAL_REQUEST = {"prompt_tokens": 512,
                        "decoding_requests": ASYNC_STEP_AGGREGATES["num_decode_reqs"]}
"""The request a slot-mapped BLIS alpha prices bayesblis's load-dependent request costs at:
a 512-token prompt (`alpha_prompt_s`, in alpha0), returned while the 16 requests of the step
BLIS's alpha0 waits decode (`features.beta.ASYNC_STEP_AGGREGATES`): `alpha_frontend_s` x 16
once in alpha0 (its first token) and once in alpha1, BLIS's post-decode overhead (its last
token)."""


def to_blis_alpha(alpha, wait_us: float = 0.0) -> list[float]:
    """Our alpha coefficients (µs) in BLIS `alpha_coeffs` order; `wait_us` (`async_wait_us`)
    joins alpha0: BLIS's step model has no async-scheduling wait of its own. The prompt and
    return costs are priced at `BLIS_TYPICAL_REQUEST`."""
    typical = BLIS_TYPICAL_REQUEST
    return_us = float(alpha.get("alpha_frontend_s", 0.0)) * typical["decoding_requests"]
    prompt_us = float(alpha.get("alpha_prompt_s", 0.0)) * typical["prompt_tokens"]
    return [float(alpha["alpha_const_s"]) + float(wait_us) + prompt_us + return_us, return_us,
            float(alpha["alpha_output_s"])]


def blis_slots(beta: dict, alpha: dict, *, tp: int, factors: dict | None = None,
               tp_slot=None, async_step=None) -> tuple[list[float], list[float]]:
    """(alpha_coeffs, beta_coeffs) of a slot-mapped BLIS export of one coefficient set
    ({name: value}): `to_blis_alpha` with the async wait of `async_step` (None: none) and
    `features.beta.to_blis_beta` with the deployment's `factors` and `tp_slot`."""
    from bayesblis.features.beta import to_blis_beta

    return (to_blis_alpha(alpha, async_wait_us(beta, async_step)),
            to_blis_beta(beta, tp=tp, factors=factors, tp_slot=tp_slot))


def export_record(draws: CoefficientDraws, *, prob: float | None = None, context=None,
                  async_scheduling: bool = True) -> dict:
    """The JSON document for one configuration's coefficients (see data_specs/coefficients.md);
    its BLIS slots hold the async-scheduling wait in alpha0 unless `async_scheduling` is off."""
    from bayesblis.features.beta import BLIS_BETA_ORDER

    summary = draws.summary(prob)
    mean_beta = {k: v["mean"] for k, v in summary["beta"].items()}
    mean_alpha = {k: v["mean"] for k, v in summary["alpha"].items()}
    alpha_coeffs, beta_coeffs = blis_slots(
        mean_beta, mean_alpha, tp=tp_of(draws.config), factors=draws.feature_factors,
        tp_slot=draws.blis_tp_slot, async_step=draws.blis_async_step if async_scheduling else None)
    return {
        "config": draws.config,
        "seen_config": draws.seen_config,
        "unseen_levels": draws.unseen_levels,
        "population_level": bool(draws.unseen_levels) or not draws.seen_config,
        "n_draws": draws.n_draws,
        "ci_prob": CI_PROB if prob is None else prob,
        "units": {"beta": "dimensionless multiplier of a feature in seconds; *_overhead_s "
                          "coefficients in µs per layer/request/step",
                  "alpha": "µs per request (alpha_const_s), per token, or per request "
                           "decoding when a token is returned (alpha_frontend_s)"},
        "beta": summary["beta"],
        "alpha": summary["alpha"],
        "blis": {"beta_order": list(BLIS_BETA_ORDER), "beta_coeffs": beta_coeffs,
                 "feature_factors": draws.feature_factors,
                 "alpha_order": list(BLIS_ALPHA_ORDER), "alpha_coeffs": alpha_coeffs},
        **({"context": context} if context else {}),
    }


SLOT_MAPPING_NOTE = ("slot mapping, no scenario: on 12 shared runs BLIS ran these 0.3-3.9% "
                     "short of bayesblis simulate in E2E, TTFT within -5.7..+2.4% (prompt and "
                     "return costs at a 512-token prompt, 16 requests decoding); --project-on "
                     "SCENARIO or --format bayesblis-go reproduce it (docs/blis.md)")
"""What a slot-mapped BLIS YAML says about itself (measured: docs/blis.md)."""


def blis_yaml(record: dict) -> str:
    """BLIS `trained_physics_coefficients`-style YAML, one comment per coefficient."""
    blis = record["blis"]
    lines = [f"# bayesblis posterior-mean coefficients for {record['config']}",
             f"# {int(record['ci_prob'] * 100)}% credible intervals are in the JSON export.",
             "# BLIS has no slot for alpha_prompt_s or alpha_frontend_s (API server return "
             "cost per request decoding): priced at a typical request, the JSON export has them.",
             f"# {SLOT_MAPPING_NOTE}",
             "trained_physics_coefficients:", "  alpha_coeffs:"]
    for name, value in zip(blis["alpha_order"], blis["alpha_coeffs"]):
        lines.append(f"    - {value:.6g}  # {name}")
    lines.append("  beta_coeffs:")
    for name, value in zip(blis["beta_order"], blis["beta_coeffs"]):
        lines.append(f"    - {value:.6g}  # {name}")
    if record.get("population_level"):
        lines.insert(1, "# population-level answer: unseen levels "
                     + json_levels(record["unseen_levels"]))
    return "\n".join(lines) + "\n"


def json_levels(levels: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in levels.items()) or "(new configuration of seen levels)"


def format_table(record: dict) -> str:
    """A terminal table: coefficient, mean, median, interval."""
    pct = int(round(record["ci_prob"] * 100))
    head = f"{'coefficient':<22} {'mean':>11} {'median':>11} {f'{pct}% interval':>26}"
    rows = [f"configuration {record['config']}"
            + ("" if not record["population_level"] else
               f"  [population-level: {json_levels(record['unseen_levels'])}]"), head]
    for kind in ("beta", "alpha"):
        for name, s in record[kind].items():
            rows.append(f"{name:<22} {s['mean']:>11.4g} {s['median']:>11.4g} "
                        f"{'[' + format(s['lo'], '.4g') + ', ' + format(s['hi'], '.4g') + ']':>26}")
    return "\n".join(rows)
