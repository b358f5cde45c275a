import numpy as np
import pytest

from bayesblis.errors import BayesBlisError, InputError, ModelVersionError
from bayesblis.model.data import ModelData
from bayesblis.model.hierarchy import LatencyModel
from bayesblis.model.priors import merge_priors
from bayesblis.model.store import load_posterior

from model_helpers import synthetic_data


def test_model_has_finite_logp_and_gradient_at_initial_point():
    data, _ = synthetic_data(n_obs=10)
    model = LatencyModel().build_model(data)
    point = model.initial_point()
    assert np.isfinite(model.compile_logp()(point))
    assert np.all(np.isfinite(model.compile_dlogp()(point)))


def test_config_effects_are_centred_only_where_the_data_pin_them_down():
    def n_effects(model, name):
        return model[name].eval().shape[0] if name in model.named_vars else 0

    # config-level beta effects: prefill compute and kv traffic; alpha: none observed
    few, _ = synthetic_data(n_obs=10, tps=(1,))
    many, _ = synthetic_data(n_obs=400, tps=(1,))
    n_configs = len(few.configs)
    weak = LatencyModel().build_model(few)
    assert n_effects(weak, "beta_theta_config") == 0
    assert n_effects(weak, "beta_z_config") == 2 * n_configs
    strong = LatencyModel().build_model(many)
    assert n_effects(strong, "beta_theta_config") == 2 * n_configs
    assert n_effects(strong, "beta_z_config") == 0
    for model in (weak, strong):  # step data say nothing about alpha: never centred
        assert n_effects(model, "alpha_theta_config") == 0
        assert n_effects(model, "alpha_z_config") == 2 * n_configs


def test_per_step_constant_alone_sets_the_constant_part_of_a_step():
    """The step-constant coefficients of a configuration add up to exp(L[c]) per reference
    step whatever the population coefficients are (no ridge inside a configuration)."""
    from bayesblis.model.hierarchy import _per_step_reference
    from bayesblis.model.priors import STEP_CONSTANT_FEATURES

    data, _ = synthetic_data(n_obs=10)
    lm = LatencyModel()
    model = lm.build_model(data)
    cols = [f"f_{f}" for f in lm.beta_features]
    bounds = data.config_bounds()
    ref = _per_step_reference(data.obs[cols].to_numpy(float), data.obs["n_steps"].to_numpy(float),
                              bounds)
    group = [lm.beta_features.index(f) for f in STEP_CONSTANT_FEATURES if f in lm.beta_features]
    assert len(group) >= 3
    beta_of = model.compile_fn(model.replace_rvs_by_values([model["beta"]])[0],
                               inputs=model.value_vars, on_unused_input="ignore")
    point = model.initial_point()
    log_const = np.log(np.linspace(1e-3, 3e-3, len(data.configs)))
    point["beta_log_step_const"] = log_const
    for shift in (0.0, 0.7):  # move the population means: the per-step constant stays
        point["beta_mu"] = point["beta_mu"] + shift
        beta = beta_of(point)
        np.testing.assert_allclose((beta[:, group] * ref[:, group]).sum(axis=1), np.exp(log_const),
                                   rtol=1e-9)


def test_prior_overrides_merge_and_reject_unknown_keys():
    p = merge_priors({"beta": {"weight_traffic_s": {"median": 1.1}}, "hyper": {"tau_config": 0.1}})
    assert p["beta"]["weight_traffic_s"]["median"] == 1.1
    assert p["beta"]["weight_traffic_s"]["log_sd"] == 0.5
    assert p["hyper"]["tau_config"] == 0.1
    with pytest.raises(KeyError, match="unknown prior"):
        merge_priors({"beta": {"not_a_feature": {"median": 1}}})


def test_model_data_rejects_bad_rows():
    data, _ = synthetic_data(n_obs=5)
    obs = data.obs.copy()
    obs.loc[3, "y_s"] = np.nan
    with pytest.raises(InputError, match="field 'y_s'"):
        ModelData(data.configs, obs)
    obs = data.obs.copy()
    obs.loc[0, "config"] = "nope"
    with pytest.raises(InputError, match="not in the table"):
        ModelData(data.configs, obs)


def test_fit_is_diagnosed_and_round_trips(tiny_fit):
    model, path, _ = tiny_fit
    diag = model.fit_info["diagnostics"]
    assert set(diag) >= {"r_hat_max", "ess_bulk_min", "ess_tail_min", "divergences", "passed"}
    post = load_posterior(path)
    assert list(post.configs["config"]) == list(model.data.configs["config"])
    assert post.fit_info["diagnostics"]["divergences"] == diag["divergences"]
    assert post.versions["pymc"]
    assert "prior" in post.idata.groups()


def test_posterior_predictive_replicates_the_observations(tiny_fit):
    model, _, _ = tiny_fit
    ppc = model.sample_posterior_predictive()
    rep = ppc.posterior_predictive["y_obs"]
    assert rep.sizes["obs"] == len(model.data.obs)
    ratio = float(np.median(rep.mean(("chain", "draw")).values / model.data.obs["y_s"].values))
    assert 0.8 < ratio < 1.25


def test_load_refuses_another_model_version(tiny_fit, tmp_path):
    import arviz as az

    _, path, _ = tiny_fit
    idata = az.from_netcdf(str(path))
    idata.posterior.attrs["bayesblis_model_version"] = "0-old"
    other = tmp_path / "old.nc"
    idata.to_netcdf(str(other))
    with pytest.raises(ModelVersionError, match="model version 0-old"):
        load_posterior(other)


def test_load_names_a_non_netcdf_file(tmp_path):
    bad = tmp_path / "x.nc"
    bad.write_text("not netcdf")
    with pytest.raises(InputError, match="x.nc"):
        load_posterior(bad)


def test_student_t_log_density_equals_pymcs():
    import pymc as pm
    import pytensor.tensor as pt

    from bayesblis.model.hierarchy import student_t_logp

    value = np.array([0.2, 1.0, 1.05, 7.0])
    mu, sigma = np.array([1.0, 1.0, 1.1, 2.0]), np.array([0.1, 0.5, 0.05, 2.0])
    for nu in (2.1, 4.0, 30.0):
        mine = student_t_logp(pt.as_tensor(value), nu, mu, sigma).eval()
        pymc = pm.logp(pm.StudentT.dist(nu=nu, mu=mu, sigma=sigma), value).eval()
        np.testing.assert_allclose(mine, pymc, rtol=1e-12)


def test_step_only_tables_leave_alpha_out_of_the_mean(tiny_fit):
    model, _, _ = tiny_fit
    assert not model.alpha_in_mean
    obs = model.data.obs.copy()
    obs["a_alpha_const_s"] = 1.0
    with pytest.raises(BayesBlisError, match="request-level"):
        model.sample_posterior_predictive(ModelData(model.data.configs, obs))


def test_jax_backend_fits_and_refits_with_weights():
    """nutpie on the JAX backend (data frozen into the program): a real fit, then a weighted
    refit that must compile again with the new weights (here: half the rows dropped)."""
    data, _ = synthetic_data(n_obs=20, hardware=("H100-SXM",), tps=(1,))
    lm = LatencyModel(sampler_config={"draws": 30, "tune": 30, "chains": 1, "seed": 2,
                                      "nuts_backend": "jax"})
    lm.build_model(data, weighted=True)
    with pytest.warns(Warning):  # 30 draws cannot pass the ESS threshold
        first = lm.fit(progressbar=False)
    assert lm._compiled_backend == "jax"
    compiled = lm._compiled
    weight = (np.arange(len(data.obs)) % 2).astype(float)
    with pytest.warns(Warning):
        lm.refit_weighted(weight)
    assert lm._compiled is not compiled
    assert first.posterior["beta"].shape == lm.idata.posterior["beta"].shape
    assert not np.allclose(first.posterior["beta"].values, lm.idata.posterior["beta"].values)
    with pytest.raises(BayesBlisError, match="nuts_backend"):
        lm.fit(progressbar=False, nuts_backend="stan")
