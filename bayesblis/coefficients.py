"""Coefficients for any configuration: posterior draws, summaries, JSON and BLIS export.

A configuration that was fitted uses its own posterior draws. One that was not (a new TP
degree, a new GPU, a new model family) is answered through the hierarchy: the effects of
seen levels come from their posteriors, and an unseen level's effect is drawn from
``Normal(0, tau_level)`` for each posterior draw (a population-level prediction, wider
by construction). Unseen levels are only used when the caller allows them explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bayesblis.constants import CI_PROB, DIM_ALPHA_FEATURE, DIM_CONFIG, DIM_FEATURE
from bayesblis.discrepancy import fitted_load
from bayesblis.errors import UnseenLevelError
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
    weight_stream_factor: float = 1.0  # the deployment's (features.physics.Deployment)
    fitted_load: float | None = None  # requests in flight its windows held (discrepancy.fitted_load)

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
                                self.unseen_levels, self.seen_config, self.weight_stream_factor,
                                self.fitted_load)


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
    off to report the configuration's coefficients).
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
        beta = _population_draws(post, "beta", DIM_FEATURE, values, seen, rng, posterior.priors)
        alpha = _population_draws(post, "alpha", DIM_ALPHA_FEATURE, values, seen, rng,
                                  posterior.priors)
        sigma = sigma_all[np.arange(n_total), rng.integers(0, sigma_all.shape[1], n_total)]
    if new_run and "tau_run" in post:
        factor = np.exp(_stacked(post, "tau_run").values * rng.standard_normal(n_total))
        beta, alpha = beta * factor[:, None], alpha * factor[:, None]
    draws = CoefficientDraws(key, list(posterior.beta_features), list(posterior.alpha_features),
                             beta, alpha, sigma, nu, unseen, seen_config=row is not None)
    if row is not None and getattr(posterior, "data", None) is not None:
        draws.fitted_load = fitted_load(posterior.data.obs, key)
    if n_draws is not None and n_draws < n_total:
        pick = np.sort(rng.choice(n_total, n_draws, replace=False))
        draws.beta, draws.alpha = draws.beta[pick], draws.alpha[pick]
        draws.noise_sigma, draws.noise_nu = draws.noise_sigma[pick], draws.noise_nu[pick]
    return draws


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


def _population_draws(post, name, dim, values, seen, rng, priors):
    """floor + exp(mu + level effects + a fresh config effect) for an unfitted
    configuration (floors: the fit's `priors`, model/priors.py).

    Seen levels contribute their posterior effects (0 when the fit gave that level no
    effect); unseen ones (and the new configuration itself) a fresh Normal(0, tau) draw per
    posterior sample.
    """
    theta = _stacked(post, f"{name}_mu").values.copy()  # [S, K]
    features = [str(f) for f in post[dim].values]
    for short, _, cols, tau, effects in level_effects(post, name, dim):
        if short != "config" and str(values[short]) in seen[short]:
            effect = effects.get(str(values[short]), 0.0)
        else:
            effect = tau * rng.standard_normal(tau.shape)
        theta[:, cols] += effect
    groups = PROPORTIONAL_GROUPS.items() if name == "beta" else ()
    for group_name, members in groups:
        if f"beta_tau_{group_name}" not in post:
            continue
        # a new configuration's group sum (per-step constant, KV cost per token) strays from
        # its physics sum like a fitted one's does (LatencyModel._proportional_groups)
        group = [features.index(f) for f in members if f in features]
        tau = _stacked(post, f"beta_tau_{group_name}").values
        theta[:, group] += (tau * rng.standard_normal(tau.shape))[:, None]
    coef = floors(priors[name], features) + np.exp(theta)
    return tie_columns(coef, features) if name == "beta" else coef


def deployment_draws(posterior, deployment, **kwargs) -> CoefficientDraws:
    """`coefficient_draws` for a `features.physics.Deployment`."""
    levels = config_row(deployment)
    levels.pop("config")
    draws = coefficient_draws(posterior, **levels, **kwargs)
    draws.weight_stream_factor = deployment.weight_stream_factor
    return draws


def posterior_draws(posterior_path, deployment, n_draws=None, *, allow_unseen=False, seed=0,
                    new_run=True):
    """Load a posterior file and return draws for `deployment` (simulator entry point:
    by default the predictive of a new run)."""
    from bayesblis.model.store import load_posterior

    posterior = posterior_path if hasattr(posterior_path, "idata") else load_posterior(posterior_path)
    return deployment_draws(posterior, deployment, n_draws=n_draws,
                            allow_unseen=allow_unseen, seed=seed, new_run=new_run)


# ---------------------------------------------------------------------- export
BLIS_ALPHA_ORDER = ("alpha0_arrival_to_queue_us", "alpha1_post_decode_us", "alpha2_per_output_token_us")
"""BLIS trained-physics `alpha_coeffs` order. bayesblis has no separate post-decode
constant (alpha1 = 0); its per-prompt-token alpha and its per-request-decoding return cost
(`alpha_frontend_s`) have no BLIS slot, so BLIS runs with these coefficients leave out
the API server's load (TTFT at high load a few ms short; the JSON export keeps it)."""


def to_blis_alpha(alpha) -> list[float]:
    """Our alpha coefficients (µs) in BLIS `alpha_coeffs` order."""
    return [float(alpha["alpha_const_s"]), 0.0, float(alpha["alpha_output_s"])]


def export_record(draws: CoefficientDraws, *, prob: float | None = None, context=None) -> dict:
    """The JSON document for one configuration's coefficients (see data_specs/coefficients.md)."""
    from bayesblis.features.beta import BLIS_BETA_ORDER, to_blis_beta

    summary = draws.summary(prob)
    mean_beta = {k: v["mean"] for k, v in summary["beta"].items()}
    mean_alpha = {k: v["mean"] for k, v in summary["alpha"].items()}
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
        "blis": {"beta_order": list(BLIS_BETA_ORDER),
                 "beta_coeffs": to_blis_beta(mean_beta, tp=tp_of(draws.config),
                                             weight_stream_factor=draws.weight_stream_factor),
                 "weight_stream_factor": draws.weight_stream_factor,
                 "alpha_order": list(BLIS_ALPHA_ORDER), "alpha_coeffs": to_blis_alpha(mean_alpha)},
        **({"context": context} if context else {}),
    }


def blis_yaml(record: dict) -> str:
    """BLIS `trained_physics_coefficients`-style YAML, one comment per coefficient."""
    blis = record["blis"]
    lines = [f"# bayesblis posterior-mean coefficients for {record['config']}",
             f"# {int(record['ci_prob'] * 100)}% credible intervals are in the JSON export.",
             "# BLIS has no slot for alpha_frontend_s (API server return cost per request "
             "decoding): see the JSON export.",
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
