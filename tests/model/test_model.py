import numpy as np
import pytest

from bayesblis.errors import BayesBlisError, InputError, ModelVersionError
from bayesblis.model.data import ModelData
from bayesblis.model.hierarchy import LatencyModel
from bayesblis.model.priors import merge_priors
from bayesblis.model.store import load_posterior

from model_helpers import synthetic_data


def test_model_has_finite_logp_and_gradient_at_initial_point(tiny_fit):
    """At PyMC's initial point, through the log density and gradient nutpie samples: the
    shared tiny fit's compiled numba C callback, called the way nutpie calls it (already
    compiled; compiling PyMC's own logp and dlogp functions for this alone took 15 s)."""
    import ctypes

    lm, _, _ = tiny_fit
    assert lm._compiled_backend == "numba"
    compiled, point = lm._compiled, lm.model.initial_point()
    x = np.full(compiled.n_dim, np.nan)
    for name, where, _ in zip(*compiled.shape_info):
        if name in point:
            x[where] = np.ravel(point[name])
    assert not np.isnan(x).any()  # every free variable placed
    grad, logp = np.full_like(x, np.nan), np.full((), np.nan)
    as_ptr = lambda a: a.ctypes.data_as(ctypes.POINTER(ctypes.c_double))  # noqa: E731
    status = compiled.compiled_logp_func.ctypes(len(x), as_ptr(x), as_ptr(grad), as_ptr(logp),
                                                compiled.user_data.ctypes.data)
    assert status == 0  # nutpie's codes: 3 a non-finite gradient, 4 a non-finite logp
    assert np.isfinite(logp)
    assert np.all(np.isfinite(grad))


def test_config_effects_are_centred_only_where_the_data_pin_them_down():
    def n_effects(model, name):
        return model[name].eval().shape[0] if name in model.named_vars else 0

    # config-level beta effects: prefill compute (kv traffic deviates through its group's
    # sum, PROPORTIONAL_GROUPS); alpha: none observed. Prefill's theta is log(coef - 1)
    # (a floored coefficient whose prior excess is 0.35): the data pin it down about
    # (1.35 / 0.35)^2 = 15x less tightly than log(coef)
    few, _ = synthetic_data(n_obs=10, tps=(1,))
    many, _ = synthetic_data(n_obs=3000, tps=(1,))
    n_configs = len(few.configs)
    weak = LatencyModel().build_model(few)
    assert n_effects(weak, "beta_theta_config") == 0
    assert n_effects(weak, "beta_z_config") == n_configs
    strong = LatencyModel().build_model(many)
    assert n_effects(strong, "beta_theta_config") == n_configs
    assert n_effects(strong, "beta_z_config") == 0
    for model in (weak, strong):  # step data say nothing about alpha: never centred
        assert n_effects(model, "alpha_theta_config") == 0
        assert n_effects(model, "alpha_z_config") == 2 * n_configs


def test_group_sums_alone_set_their_part_of_a_step():
    """The coefficients of each proportional group (per-step constants, KV cost per token)
    of a configuration add up to exp(L[c]) per reference step whatever the population
    coefficients are (no ridge inside a configuration)."""
    from bayesblis.model.hierarchy import _per_step_reference
    from bayesblis.model.priors import PROPORTIONAL_GROUPS, SHEARED_GROUPS

    data, _ = synthetic_data(n_obs=10)
    lm = LatencyModel()
    model = lm.build_model(data)
    cols = [f"f_{f}" for f in lm.beta_features]
    bounds = data.config_bounds()
    ref = _per_step_reference(data.obs[cols].to_numpy(float), data.obs["n_steps"].to_numpy(float),
                              bounds)
    outputs = [model["beta"], *(model[f"beta_log_{name}"] for name in PROPORTIONAL_GROUPS)]
    values_of = model.compile_fn(model.replace_rvs_by_values(outputs), inputs=model.value_vars,
                                 on_unused_input="ignore")
    point = model.initial_point()
    for i, name in enumerate(PROPORTIONAL_GROUPS):
        value = f"beta_log_{name}" + ("_sheared" if name in SHEARED_GROUPS else "")
        point[value] = np.log(np.linspace(1e-3, 3e-3, len(data.configs)) * (i + 1))
    for shift in (0.0, 0.7):  # move the population means: every group sum is exp(L[c])
        point["beta_mu"] = point["beta_mu"] + shift
        beta, *log_sums = values_of(point)
        for (name, members), log_sum in zip(PROPORTIONAL_GROUPS.items(), log_sums):
            group = [lm.beta_features.index(f) for f in members if f in lm.beta_features]
            assert len(group) >= (3 if name == "step_const" else 1)
            np.testing.assert_allclose((beta[:, group] * ref[:, group]).sum(axis=1),
                                       np.exp(log_sum), rtol=1e-9)


def test_a_sheared_group_sum_is_the_same_model_in_other_coordinates(monkeypatch):
    """The KV sum sampled sheared along the per-request cost (SHEARED_GROUPS) has the log
    density the unsheared model has at the same sum: a change of coordinates with unit
    Jacobian, not another model. Its slopes are the per-request share of each
    configuration's request and KV cost at the prior medians."""
    from bayesblis.model import hierarchy
    from bayesblis.model.hierarchy import _per_step_reference, shear_slopes
    from bayesblis.model.priors import PROPORTIONAL_GROUPS, SHEARED_GROUPS, default_priors

    data, _ = synthetic_data(n_obs=10)
    lm = LatencyModel()
    sheared = lm.build_model(data)
    monkeypatch.setattr(hierarchy, "SHEARED_GROUPS", {})
    plain = LatencyModel().build_model(data)
    features = lm.beta_features
    ref = _per_step_reference(data.obs[[f"f_{f}" for f in features]].to_numpy(float),
                              data.obs["n_steps"].to_numpy(float), data.config_bounds())
    priors = default_priors()["beta"]
    (group_name, traded), = SHEARED_GROUPS.items()
    members = [f for f in PROPORTIONAL_GROUPS[group_name] if f in features]
    group = [features.index(f) for f in members]
    slope = shear_slopes(priors, features, group, features.index(traded), ref)
    median = {f: priors[f]["median"] for f in features}
    expected = -(median[traded] * ref[:, features.index(traded)]
                 / sum(median[f] * ref[:, features.index(f)] for f in members))
    np.testing.assert_allclose(slope, expected, rtol=1e-12)
    assert (slope < 0).all()

    log_sum = sheared.compile_fn(sheared.replace_rvs_by_values([sheared[f"beta_log_{group_name}"]])[0],
                                 inputs=sheared.value_vars, on_unused_input="ignore")
    logp_sheared, logp_plain = sheared.compile_logp(), plain.compile_logp()
    rng = np.random.default_rng(3)
    for _ in range(3):
        point = {k: v + rng.normal(0, 0.3, np.shape(v)) for k, v in sheared.initial_point().items()}
        same = {k: v for k, v in point.items() if k != f"beta_log_{group_name}_sheared"}
        same[f"beta_log_{group_name}"] = log_sum(point)
        assert not np.allclose(same[f"beta_log_{group_name}"], point[f"beta_log_{group_name}_sheared"])
        assert logp_sheared(point) == pytest.approx(logp_plain(same), rel=1e-10)


def test_level_scales_are_learnt_only_where_they_can_be():
    """The spreads of the proportional groups' sums are always fixed at their hyper value
    (learnt, they collapsed into a funnel); a configuration scale is learnt from 5
    configurations on, with a log-normal prior that has no mass near 0."""
    import pymc as pm

    from bayesblis.model.hierarchy import CONFIG_SCALE_LOG_SD, MIN_GROUPS_TO_LEARN_SCALE
    from bayesblis.model.priors import HYPER_PRIORS, PROPORTIONAL_GROUPS

    many, _ = synthetic_data(n_obs=1000)
    few, _ = synthetic_data(n_obs=1000, hardware=("H100-SXM",), tps=(1,))
    assert len(few.configs) < MIN_GROUPS_TO_LEARN_SCALE <= len(many.configs)
    for data, learnt in ((many, True), (few, False)):
        model = LatencyModel().build_model(data)
        free = {v.name for v in model.free_RVs}
        for group in PROPORTIONAL_GROUPS:
            assert f"beta_tau_{group}" not in free
            assert float(model[f"beta_tau_{group}"].eval()) == HYPER_PRIORS[f"tau_{group}"]
        assert ("beta_tau_config" in free) is learnt
    model = LatencyModel().build_model(many)
    tau = model["beta_tau_config"]
    assert tau.owner.op.name == "lognormal"
    draws = pm.draw(tau, draws=4000, random_seed=1)
    assert np.median(draws) == pytest.approx(HYPER_PRIORS["tau_config"], rel=0.05)
    assert np.std(np.log(draws)) == pytest.approx(CONFIG_SCALE_LOG_SD, rel=0.05)
    assert (draws < 0.2 * HYPER_PRIORS["tau_config"]).mean() < 0.001


def test_run_centring_averages_each_configurations_kept_runs():
    data, _ = synthetic_data(n_obs=6, hardware=("H100-SXM",), tps=(1,))
    configs = list(data.configs["config"])  # 3 configurations: 3 runs, 2 runs, 1 run
    runs_of = {configs[0]: ["a", "b", "c"], configs[1]: ["d", "e"], configs[2]: ["f"]}
    data.obs["run"] = [runs_of[c][i % len(runs_of[c])]
                       for i, c in enumerate(data.obs["config"])]
    runs = data.repeated_runs()
    assert runs == ["a", "b", "c", "d", "e"]  # a lone run has no effect of its own
    z = np.random.default_rng(0).normal(size=len(runs))
    centred = z - data.run_centring(runs) @ z
    np.testing.assert_allclose([centred[:3].sum(), centred[3:].sum()], 0.0, atol=1e-12)
    weight = (data.obs["run"] != "b").to_numpy(float)  # run b held out
    centred = z - data.run_centring(runs, weight=weight) @ z
    np.testing.assert_allclose(centred[[0, 2]].sum(), 0.0, atol=1e-12)
    np.testing.assert_allclose(centred[1], z[1] - z[[0, 2]].mean())


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
    assert 0 < post.fit_info["compile_s"] < post.fit_info["wall_s"]  # numba compiled here
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
    # two runs per configuration; the weights below hold out run 0 of each
    data.obs["run"] = data.obs["config"] + "/run" + (np.arange(len(data.obs)) % 2).astype(str)
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
    # run effects sum to zero over each configuration's runs that keep data
    z_first = first.posterior["z_run"].values.reshape(-1, len(data.configs), 2)
    np.testing.assert_allclose(z_first.sum(axis=2), 0.0, atol=1e-9)
    assert np.abs(z_first).max() > 0.01
    z_refit = lm.idata.posterior["z_run"].values.reshape(-1, len(data.configs), 2)
    np.testing.assert_allclose(z_refit[:, :, 1], 0.0, atol=1e-9)  # the one kept run
    with pytest.raises(BayesBlisError, match="nuts_backend"):
        lm.fit(progressbar=False, nuts_backend="stan")


def test_a_kinds_error_scale_is_halfnormal_sampled_through_a_normal_that_crosses_zero():
    """`sigma_kind` keeps its HalfNormal(hyper) prior but is sampled as hyper * |z|: no
    log-scale variable whose tail near 0 mixes slowly, and a finite density and gradient
    with the scale at 0 (the steps' own noise then explains the kind's windows)."""
    import pymc as pm

    from bayesblis.model.priors import HYPER_PRIORS

    data, _ = synthetic_data(n_obs=60, hardware=("H100-SXM",), tps=(1,))
    obs = data.obs.copy()
    obs.loc[obs.index % 3 == 0, "kind"] = "client_ttft"
    model = LatencyModel().build_model(ModelData(data.configs, obs))
    free = {v.name for v in model.free_RVs}
    assert "sigma_kind_z" in free and "sigma_kind" not in free
    draws = pm.draw(model["sigma_kind"], draws=20000, random_seed=2)
    scale = HYPER_PRIORS["sigma_kind"]
    assert draws.min() >= 0
    assert np.median(draws) == pytest.approx(0.6745 * scale, rel=0.03)   # HalfNormal's median
    assert np.mean(draws) == pytest.approx(np.sqrt(2 / np.pi) * scale, rel=0.03)
    point = model.initial_point()
    point["sigma_kind_z"] = np.zeros_like(point["sigma_kind_z"])
    logp = model.compile_logp(mode="FAST_COMPILE")      # Python-linked: no C to compile
    dlogp = model.compile_dlogp(mode="FAST_COMPILE")
    assert np.isfinite(logp(point)) and np.all(np.isfinite(dlogp(point)))
