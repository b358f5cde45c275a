import json

import numpy as np
import pandas as pd
import pytest

from bayesblis.errors import InputError, ModelVersionError, UnseenLevelError
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


def test_only_informed_config_effects_are_centred():
    data, _ = synthetic_data(n_obs=10, tps=(1,))
    model = LatencyModel().build_model(data)
    # tp_comm is zero for TP1: its config effects stay non-centred (no funnel)
    assert "beta_z_config" in model.named_vars
    n_centred = model["beta_theta_config"].eval().shape[0]
    n_configs = len(data.configs)
    # config-level beta effects: prefill compute, kv traffic, tp comm; TP1 leaves tp comm off
    assert n_centred == 2 * n_configs


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
