"""Laplace preconditioning of NUTS: the mode and curvature it finds, and that the sampled
posterior is unchanged (a real nutpie fit against a closed-form posterior)."""

import numpy as np
import pymc as pm
import pytest

from bayesblis.errors import BayesBlisError
from bayesblis.model.hierarchy import LatencyModel
from bayesblis.model.laplace import (AUTO_MIN_ROWS, can_precondition, find_laplace,
                                     initial_point_of, logp_grad_of, precondition)

from model_helpers import synthetic_data


def _ridge(n: int = 6, seed: int = 0):
    """A Gaussian with standard deviations from 1e-4 to 1 and strong correlations (the
    shape of a large-table posterior): (mean, covariance, precision)."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    sd = np.logspace(-4, 0, n)
    cov = (q * sd**2) @ q.T
    return rng.normal(size=n), cov, np.linalg.inv(cov)


def test_find_laplace_recovers_mode_and_covariance_of_an_ill_conditioned_gaussian():
    mean, cov, prec = _ridge()

    def logp_grad(x):
        d = x - mean
        return -0.5 * d @ prec @ d, -prec @ d

    lap = find_laplace(logp_grad, np.zeros(len(mean)))
    assert lap.converged
    # the mode to a small fraction of each direction's standard deviation
    z = np.linalg.solve(lap.whiten, lap.mode - mean)
    assert np.abs(z).max() < 1e-3
    np.testing.assert_allclose(lap.whiten @ lap.whiten.T, cov, rtol=1e-3, atol=1e-12)
    assert lap.min_curvature == pytest.approx(1.0, rel=1e-3)  # the widest direction: sd 1
    assert lap.n_evals < 200 + 2 * (len(mean) + 1) + 200


def test_find_laplace_floors_flat_directions():
    """A direction without curvature (an improper flat density) gets a finite, wide scale
    instead of a division by zero."""
    def logp_grad(x):
        return -0.5 * x[0] ** 2, np.array([-x[0], 0.0])

    lap = find_laplace(logp_grad, np.array([3.0, 0.5]))
    assert lap.min_curvature == pytest.approx(0.0, abs=1e-6)
    assert np.all(np.isfinite(lap.whiten))
    assert abs(lap.mode[0]) < 1e-4


@pytest.mark.parametrize("backend", ["jax", "numba"])
def test_preconditioned_nutpie_samples_the_same_posterior(backend):
    """Conjugate linear regression with strongly correlated coefficients: the exact
    posterior is Gaussian with known mean and covariance; NUTS in the whitened coordinates
    must reproduce it (original parameterization in the trace), on either backend (numba:
    new C callbacks around nutpie's)."""
    import nutpie

    rng = np.random.default_rng(3)
    x1 = rng.normal(size=400)
    design = np.column_stack([np.ones(400), 1000 + x1, 1000 + x1 + 0.01 * rng.normal(size=400)])
    y = design @ np.array([0.5, 1.0, -1.0]) + rng.normal(0, 0.1, size=400)
    with pm.Model() as model:
        coef = pm.Normal("coef", 0, 10, shape=3)
        pm.Normal("y", design @ coef, 0.1, observed=y)
    prior_prec = np.eye(3) / 100
    post_cov = np.linalg.inv(prior_prec + design.T @ design / 0.01)
    post_mean = post_cov @ (design.T @ y / 0.01)

    extra = {"backend": "jax", "gradient_backend": "jax"} if backend == "jax" else {}
    compiled = nutpie.compile_pymc_model(model, **extra)
    assert can_precondition(compiled)
    lap = find_laplace(logp_grad_of(compiled), initial_point_of(compiled, 0))
    np.testing.assert_allclose(lap.mode, post_mean, atol=1e-3 * np.sqrt(np.diag(post_cov)).max())
    whitened = precondition(compiled, lap)
    # the whitened density is the original's at x = mode + W z, its gradient W^T times
    z = np.array([0.3, -1.2, 0.7])
    value_z, grad_z = logp_grad_of(whitened)(z)
    value_x, grad_x = logp_grad_of(compiled)(lap.mode + lap.whiten @ z)
    assert value_z == pytest.approx(value_x, rel=1e-12)
    np.testing.assert_allclose(grad_z, lap.whiten.T @ grad_x, rtol=1e-9, atol=1e-9)
    idata = nutpie.sample(whitened, draws=1000, tune=100, chains=2, seed=1,
                          progress_bar=False)
    draws = idata.posterior["coef"].values.reshape(-1, 3)
    sd = np.sqrt(np.diag(post_cov))
    # means within 4 Monte Carlo errors (2,000 near-independent draws), sds within 10%
    np.testing.assert_array_less(np.abs(draws.mean(0) - post_mean), 4 * sd / np.sqrt(2000))
    np.testing.assert_allclose(draws.std(0), sd, rtol=0.1)
    # the whitened chains are near-independent: trees of a few leapfrog steps
    assert float(idata.sample_stats["n_steps"].mean()) < 8


def test_latency_model_laplace_settings():
    """laplace=True is used as asked, on either backend; "auto" preconditions large tables
    on JAX only; a wrong setting is refused by name before compiling (no fit needed: the fit
    itself is the next test's)."""
    data, _ = synthetic_data(n_obs=60, hardware=("H100-SXM",), tps=(1, 2))
    lm = LatencyModel(sampler_config={"draws": 40, "tune": 40, "chains": 2, "seed": 1,
                                      "nuts_backend": "jax", "laplace": True,
                                      "max_treedepth": 5})
    lm.build_model(data)
    cfg = lm.sampler_config
    assert lm._use_laplace(cfg)
    assert not lm._use_laplace({**cfg, "laplace": "auto"})  # 120 rows: below AUTO_MIN_ROWS
    assert not lm._use_laplace({**cfg, "laplace": False})
    assert lm._use_laplace({**cfg, "nuts_backend": "numba"})
    lm.data.obs = lm.data.obs.sample(AUTO_MIN_ROWS, replace=True, random_state=0)
    assert lm._use_laplace({**cfg, "laplace": "auto"})  # a large table on JAX
    assert not lm._use_laplace({**cfg, "laplace": "auto", "nuts_backend": "numba"})
    with pytest.raises(BayesBlisError, match="laplace must be"):
        lm.fit(progressbar=False, laplace="yes")
    assert lm._compiled is None and lm.idata is None  # neither compiled nor sampled


@pytest.mark.slow
def test_latency_model_fits_through_the_laplace_preconditioner():
    """laplace=True fits through the preconditioner on the JAX backend and says so in
    fit_info. Slow tier (a JAX compile and two chains, ~18 s): the default suite covers the
    same path, `LatencyModel.fit` with laplace=True on JAX and fit_info["laplace"], through
    the CLI in tests/model/test_cli_fit.py (`bayesblis fit --laplace on`)."""
    data, _ = synthetic_data(n_obs=60, hardware=("H100-SXM",), tps=(1, 2))
    lm = LatencyModel(sampler_config={"draws": 40, "tune": 40, "chains": 2, "seed": 1,
                                      "nuts_backend": "jax", "laplace": True,
                                      "max_treedepth": 5})
    lm.build_model(data)
    with pytest.warns(Warning):  # 40 draws cannot pass the ESS threshold
        idata = lm.fit(progressbar=False)
    info = lm.fit_info["laplace"]
    assert info["n_evals"] > 0 and info["n_dim"] == lm._compiled._n_dim
    assert (idata.posterior["sigma_step"] > 0).all()
    assert idata.posterior["beta"].shape[:2] == (2, 40)


def test_numba_preconditioning_of_the_latency_model_keeps_its_density_and_traced_values(tiny_fit):
    """The whitened numba callbacks around the shared tiny fit's compiled model (no new
    compile of the model): the same log density at ``x = mode + W z``, and chains sampled in
    ``z`` trace every variable in its own coordinates (positive scales, finite values)."""
    import nutpie

    lm, _, _ = tiny_fit
    compiled = lm._compiled
    assert lm._compiled_backend == "numba" and can_precondition(compiled)
    lap = find_laplace(logp_grad_of(compiled), initial_point_of(compiled, 1))
    whitened = precondition(compiled, lap)
    z = np.random.default_rng(0).normal(0, 0.3, compiled.n_dim)
    value_z, grad_z = logp_grad_of(whitened)(z)
    value_x, grad_x = logp_grad_of(compiled)(lap.mode + lap.whiten @ z)
    assert np.isfinite(value_z) and value_z == pytest.approx(value_x, rel=1e-12)
    np.testing.assert_allclose(grad_z, lap.whiten.T @ grad_x, rtol=1e-8, atol=1e-8)
    idata = nutpie.sample(whitened, draws=30, tune=30, chains=1, seed=2, progress_bar=False)
    post = idata.posterior
    assert set(lm.model.coords["config"]) == set(post["beta"].coords["config"].values)
    assert (post["sigma_step"] > 0).all() and np.isfinite(post["beta"]).all()
