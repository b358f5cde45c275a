"""Per-configuration likelihood summaries: NUTS on large tables at the cost of a small one.

With many rows per configuration, one configuration's likelihood is, as a function of its
own parameters, very nearly Gaussian (Bernstein-von Mises). Those parameters are
``v_c = [coefficients whose column is not all zero (beta, then alpha), log sigma_step_c,
log(nu - 2), log sigma_kind of the approximate kinds it has, log factors of its repeated
runs]``. `summarise` finds each configuration's maximum-likelihood ``v_c`` and the
curvature there once (damped Newton on JAX: one pass over the rows per iteration), and the
fit (``LatencyModel.fit(method="summary")``) samples the whole hierarchy with NUTS against::

    log L(v) ~= sum_c  max_loglik_c - 1/2 (v_c - centre_c)^T precision_c (v_c - centre_c)

whose gradient costs nothing per row: a 5M-row table samples as fast as a small one. The
hierarchy itself (level scales, group effects: the non-Gaussian part) is still sampled
exactly. Shared parameters (nu, sigma_kind) appear in several configurations' terms, which
is exact: the likelihood is a sum over configurations.

The approximation is then checked and corrected: every posterior draw is importance
weighted by ``exact log-likelihood - summary`` over all rows (`log_weights`),
Pareto-smoothed (PSIS) and ``k`` reported; the draws are resampled by their weights.
``k <= 0.7``: the result is the exact posterior up to Monte Carlo error. ``k > 0.7``: the
summaries misdescribe the likelihood (few rows per configuration, a likelihood far from
Gaussian) and the fit fails its diagnostics, saying so: fit with NUTS on every row.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

MAX_NEWTON_STEPS = 60
NEWTON_DECREMENT_MAX = 1e-2
"""A summary is accepted at a point whose Newton decrement ``g^T H^-1 g`` (twice the
log-likelihood still to gain under the quadratic) is below this, with a positive definite
curvature: an interior maximum."""
NULL_CURVATURE = 1e-9
"""Curvatures below this share of the largest are directions the rows carry no information
on (columns exactly proportional inside a configuration): left flat, to the prior."""
PARETO_K_MAX = 0.7
"""PSIS's threshold: above it importance weights are unreliable (Vehtari et al. 2024)."""
DRAW_CHUNK = 32
"""Posterior draws evaluated together per configuration when weighting (memory: rows x chunk)."""


@dataclass
class ConfigSummary:
    """One configuration's likelihood, summarised at its maximum."""

    config: str
    beta: np.ndarray  # beta feature indices in v (nonzero columns)
    alpha: np.ndarray  # alpha feature indices in v
    kinds: np.ndarray  # approximate-kind slots (model's sigma_kind) in v
    runs: np.ndarray  # repeated-run slots (model's run dimension) in v
    centre: np.ndarray  # argmax of v
    precision: np.ndarray  # Hessian of -log likelihood at the centre
    max_loglik: float
    n_rows: int
    newton_steps: int


@dataclass
class _Rows:
    """One configuration's rows as the likelihood sees them (padded, see `_rows`)."""

    Z: np.ndarray  # [rows, beta + alpha features] (all columns)
    y: np.ndarray
    steps_share: np.ndarray  # 1 / n_steps, 0 for request-level rows
    kind: np.ndarray  # [rows, kinds of this configuration] one-hot, approximate kinds
    run: np.ndarray  # [rows, repeated runs of this configuration] one-hot
    mask: np.ndarray  # 1 for real rows, 0 for padding

    def args(self):
        return (self.Z, self.y, self.steps_share, self.kind, self.run, self.mask)


def _jax():
    import jax

    jax.config.update("jax_enable_x64", True)
    return jax


@functools.lru_cache(maxsize=1)
def _functions():
    """(log likelihood, its gradient, its Hessian, log likelihood vectorised over draws) of
    one configuration's rows as jitted JAX functions of the full parameter vector
    ``[coef (all columns), log sigma_step, log(nu - 2), log sigma_kind, run log factors]``."""
    jax = _jax()
    import jax.numpy as jnp
    from jax.scipy.special import gammaln

    def loglik(v, Z, y, steps_share, kind, run, mask):
        k, n_kind = Z.shape[1], kind.shape[1]
        mean = (Z @ v[:k]) * jnp.exp(run @ v[k + 2 + n_kind:])
        nu = 2.0 + jnp.exp(v[k + 1])
        rel2 = jnp.exp(2 * v[k]) * steps_share + kind @ jnp.exp(2 * v[k + 2:k + 2 + n_kind])
        ok = (mean > 0) | (mask == 0)
        scale = jnp.where(mean > 0, mean * jnp.sqrt(rel2), 1.0)
        z = (y - mean) / scale
        const = gammaln((nu + 1) / 2) - gammaln(nu / 2) - 0.5 * jnp.log(jnp.pi * nu)
        rows = const - jnp.log(scale) - (nu + 1) / 2 * jnp.log1p(z * z / nu)
        return jnp.where(jnp.all(ok), (mask * rows).sum(), -jnp.inf)

    return (jax.jit(loglik), jax.jit(jax.grad(loglik)), jax.jit(jax.hessian(loglik)),
            jax.jit(jax.vmap(loglik, in_axes=(0, None, None, None, None, None, None))))


def _pad(a: np.ndarray, size: int, fill: float) -> np.ndarray:
    pad = np.full((size - len(a), *a.shape[1:]), fill)
    return np.concatenate([a, pad]) if len(pad) else a


def _rows(Z, y, n_steps, kind_slot, run_slot, kinds, runs) -> _Rows:
    """Rows padded (masked out) to a multiple of an eighth of the next power of two: at
    most 8 shapes to compile per doubling of the row count, at most 12.5% padding."""
    n = max(len(y), 16)
    unit = 1 << max(int(np.ceil(np.log2(n))) - 3, 0)
    size = -(-n // unit) * unit
    share = np.where(n_steps > 0, 1.0 / np.maximum(n_steps, 1.0), 0.0)
    kind = (kind_slot[:, None] == kinds[None, :]).astype(float)
    run = (run_slot[:, None] == runs[None, :]).astype(float)
    return _Rows(Z=_pad(Z, size, 1.0), y=_pad(y, size, 1.0), steps_share=_pad(share, size, 1.0),
                 kind=_pad(kind, size, 0.0), run=_pad(run, size, 0.0),
                 mask=_pad(np.ones(len(y)), size, 0.0))


def _start(rows: _Rows, n: int, n_coef: int) -> np.ndarray:
    """Weighted least squares on relative errors; the residuals' robust scale for every
    sigma; nu - 2 = 3; run factors 1."""
    Z, y = rows.Z[:n], rows.y[:n]
    used = np.abs(Z).max(axis=0) > 0
    w = 1.0 / y**2
    gram = Z[:, used].T @ (Z[:, used] * w[:, None])
    ridge = 1e-9 * np.trace(gram) / len(gram) * np.eye(len(gram))
    coef = np.zeros(n_coef)
    coef[used] = np.linalg.solve(gram + ridge, Z[:, used].T @ (w * y))
    mean = Z @ coef
    if np.any(mean <= 0):  # a negative start: a common positive scale instead
        coef[used] = y.mean() / Z[:, used].sum(axis=1).mean()
        mean = Z @ coef
    rel = np.abs(y - mean) / mean
    sigma = max(float(np.median(rel)) * 1.4826, 1e-4)
    n_kind, n_run = rows.kind.shape[1], rows.run.shape[1]
    return np.concatenate([coef, [np.log(sigma), np.log(3.0)], np.full(n_kind, np.log(sigma)),
                           np.zeros(n_run)])


def summarise_config(key: str, rows: _Rows, n_rows: int, n_beta: int, kinds: np.ndarray,
                     runs: np.ndarray) -> ConfigSummary:
    """Maximum and curvature of one configuration's likelihood (damped Newton; all-zero
    columns have no curvature and are left out of v)."""
    loglik, grad, hess, _ = _functions()
    args = rows.args()
    n_coef = rows.Z.shape[1]
    used = np.flatnonzero(np.abs(rows.Z[:n_rows]).max(axis=0) > 0)
    kept = np.concatenate([used, n_coef + np.arange(2 + len(kinds) + len(runs))])
    v = _start(rows, n_rows, n_coef)
    current = float(loglik(v, *args))
    damping, steps = 1e-3, 0
    for steps in range(1, MAX_NEWTON_STEPS + 1):
        g, h = np.asarray(grad(v, *args))[kept], -np.asarray(hess(v, *args))[np.ix_(kept, kept)]
        diag = np.maximum(np.diag(h), 1e-12)
        while True:
            step = np.zeros_like(v)
            step[kept] = np.linalg.solve(h + damping * np.diag(diag), g)
            trial = float(loglik(v + step, *args))
            if np.isfinite(trial) and trial >= current - 1e-9 * abs(current):
                break
            damping *= 10.0
            if damping > 1e12:
                step, trial = np.zeros_like(v), current
                break
        v, gain, current = v + step, trial - current, trial
        damping = max(damping / 10.0, 1e-9)
        if gain < 1e-6 and float(g @ step[kept]) < 1e-6:
            break
    g = np.asarray(grad(v, *args))[kept]
    precision = -np.asarray(hess(v, *args))[np.ix_(kept, kept)]
    precision = (precision + precision.T) / 2
    w, basis = np.linalg.eigh(precision)
    flat = np.abs(w) <= NULL_CURVATURE * w.max()  # exactly collinear columns: no information
    decrement = float(((basis.T @ g)[~flat] ** 2 / w[~flat]).sum())
    precision = (basis * np.where(flat, 0.0, w)) @ basis.T
    if not (decrement < NEWTON_DECREMENT_MAX and np.all(w[~flat] > 0)):
        from bayesblis.errors import BayesBlisError

        raise BayesBlisError(
            f"configuration '{key}': its {n_rows} rows' likelihood has no interior maximum "
            "(a coefficient or noise scale runs off to a limit: the rows do not pin its own "
            "parameters down), so no Gaussian summary describes it; fit with method 'nuts'")
    return ConfigSummary(config=key, beta=used[used < n_beta], alpha=used[used >= n_beta] - n_beta,
                         kinds=kinds, runs=runs, centre=v[kept], precision=precision,
                         max_loglik=current,
                         n_rows=n_rows, newton_steps=steps)


class _Table:
    """The observation table split by configuration, as `summarise` and `log_weights` use it."""

    def __init__(self, data, beta_columns: list[str], alpha_features: list[str],
                 approx_kinds: list[str]):
        obs = data.obs
        self.n_beta = len(beta_columns)
        self.Z = np.hstack([obs[beta_columns].to_numpy(float), data.alpha_matrix(alpha_features)])
        self.y = obs["y_s"].to_numpy(float)
        self.n_steps = obs["n_steps"].to_numpy(float)
        self.kind_slot = obs["kind"].astype(str).map({k: i for i, k in enumerate(approx_kinds)}) \
            .fillna(-1).to_numpy(np.int64)
        runs = data.repeated_runs()
        self.run_slot = data.run_slots(runs)  # len(runs): a lone run, no factor
        self.n_runs = len(runs)
        self.bounds = data.config_bounds()
        self.configs = list(data.configs["config"])

    def config(self, c: int, kinds=None, runs=None):
        """(rows, row count, kind slots, run slots) of configuration c."""
        part = slice(self.bounds[c], self.bounds[c + 1])
        kind_slot, run_slot = self.kind_slot[part], self.run_slot[part]
        if kinds is None:
            kinds = np.unique(kind_slot[kind_slot >= 0])
            runs = np.unique(run_slot[run_slot < self.n_runs])
        return (_rows(self.Z[part], self.y[part], self.n_steps[part], kind_slot, run_slot,
                      kinds, runs), part.stop - part.start, kinds, runs)


def summarise(data, beta_columns: list[str], alpha_features: list[str], approx_kinds: list[str],
              progress=None) -> list[ConfigSummary]:
    """One `ConfigSummary` per configuration of `data` (rows sorted by configuration);
    `approx_kinds`: the kinds with a sigma_kind of their own, in the model's order."""
    table = _Table(data, beta_columns, alpha_features, approx_kinds)
    out = []
    for c, key in enumerate(table.configs):
        rows, n, kinds, runs = table.config(c)
        out.append(summarise_config(key, rows, n, table.n_beta, kinds, runs))
        if progress is not None:
            progress(c + 1, len(table.configs))
    return out


def summary_logp(summaries: list[ConfigSummary], beta, alpha, sigma_step, nu, sigma_kind=None,
                 run_log_factor=None):
    """The Gaussian summaries as one PyTensor log density of the model's variables."""
    import pytensor.tensor as pt

    total = 0.0
    log_nu = pt.log(nu - 2.0)[None]
    for c, s in enumerate(summaries):
        parts = [beta[c, s.beta], alpha[c, s.alpha], pt.log(sigma_step[c])[None], log_nu]
        if len(s.kinds):
            parts.append(pt.log(sigma_kind[s.kinds]))
        if len(s.runs):
            parts.append(run_log_factor[s.runs])
        d = pt.concatenate(parts) - s.centre
        total = total + s.max_loglik - 0.5 * pt.dot(d, pt.dot(s.precision, d))
    return total


def _draw_vectors(s: ConfigSummary, c: int, draws: dict) -> np.ndarray:
    """[S, len(v)]: the summary's parameter vector of configuration c in every draw."""
    parts = [draws["beta"][:, c, s.beta], draws["alpha"][:, c, s.alpha],
             np.log(draws["sigma_step"][:, c])[:, None], np.log(draws["nu"] - 2.0)[:, None]]
    if len(s.kinds):
        parts.append(np.log(draws["sigma_kind"][:, s.kinds]))
    if len(s.runs):
        parts.append(draws["run_log_factor"][:, s.runs])
    return np.hstack(parts)


def log_weights(data, beta_columns: list[str], alpha_features: list[str], approx_kinds: list[str],
                summaries: list[ConfigSummary], draws: dict) -> np.ndarray:
    """Importance log weights of S posterior draws (`draws`: beta [S, C, K], alpha
    [S, C, A], sigma_step [S, C], nu [S], and sigma_kind [S, kinds], run_log_factor
    [S, runs] where the model has them): exact log-likelihood over every row minus the
    summaries' value."""
    batched = _functions()[3]
    table = _Table(data, beta_columns, alpha_features, approx_kinds)
    n_draws = len(draws["nu"])
    out = np.zeros(n_draws)
    for c, s in enumerate(summaries):
        rows, _, _, _ = table.config(c, s.kinds, s.runs)
        v = _draw_vectors(s, c, draws)
        d = v - s.centre
        approx = s.max_loglik - 0.5 * np.einsum("si,ij,sj->s", d, s.precision, d)
        full = np.zeros((n_draws, rows.Z.shape[1] + 2 + len(s.kinds) + len(s.runs)))
        used = np.concatenate([s.beta, table.n_beta + s.alpha])
        full[:, used] = v[:, :len(used)]
        full[:, rows.Z.shape[1]:] = v[:, len(used):]
        exact = np.concatenate([np.asarray(batched(full[i:i + DRAW_CHUNK], *rows.args()))
                                for i in range(0, n_draws, DRAW_CHUNK)])
        out += exact - approx
    return out


def psis_resample(posterior, log_w: np.ndarray, seed: int):
    """(posterior resampled by its Pareto-smoothed weights, Pareto k, importance ESS).
    `log_w` is flat in (chain, draw) order."""
    import arviz as az
    import xarray as xr

    n_chain, n_draw = posterior.sizes["chain"], posterior.sizes["draw"]
    finite = np.where(np.isfinite(log_w), log_w, -np.inf)
    if np.ptp(finite) == 0:  # equal weights (the summary is exact): nothing to smooth
        smoothed, k = np.zeros_like(finite), 0.0
    else:
        smoothed, k = az.psislw(finite - finite.max())
    w = np.exp(smoothed - smoothed.max())
    ess = float(w.sum() ** 2 / (w ** 2).sum())
    # systematic resampling of all draws together, in (chain, draw) order: chain c keeps
    # (copies of) its own draws, in proportion to their weights
    index = _systematic(w / w.sum(), np.random.default_rng(seed)).reshape(n_chain, n_draw)
    flat = posterior.stack(sample=("chain", "draw"))
    resampled = xr.concat([flat.isel(sample=index[c]).drop_vars(["sample", "chain", "draw"])
                           .rename({"sample": "draw"}).assign_coords(draw=np.arange(n_draw))
                           for c in range(n_chain)], dim="chain")
    resampled = resampled.assign_coords(chain=posterior["chain"].values)
    return resampled.transpose(*posterior.dims, ...), float(k), ess


def _systematic(p: np.ndarray, rng) -> np.ndarray:
    """Systematic resampling: len(p) indices with expected counts len(p) * p."""
    n = len(p)
    positions = (rng.random() + np.arange(n)) / n
    return np.minimum(np.searchsorted(np.cumsum(p), positions), n - 1)
