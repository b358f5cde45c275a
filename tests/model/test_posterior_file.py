"""The posterior file stores no draws per observation: `check` recomputes them from the
stored coefficients and observation table; files written with ``mean_s`` still load."""

import arviz as az
import h5netcdf
import numpy as np
import pytest
import xarray as xr

from bayesblis.constants import DIM_OBS
from bayesblis.errors import InputError
from bayesblis.model.store import OBS_GROUP, load_posterior
from bayesblis.ppc import predictive_draws


def _per_observation_variables(path) -> dict:
    """{group: [variables over `obs`]} of a NetCDF file, outside the observation table."""
    found = {}
    with h5netcdf.File(path, "r") as f:
        for group in f.groups:
            if group == OBS_GROUP:
                continue
            names = [n for n, v in f[group].variables.items() if DIM_OBS in v.dimensions]
            if names:
                found[group] = names
    return found


def test_saved_fit_holds_no_per_observation_draws(tiny_fit):
    model, path, _ = tiny_fit
    assert "mean_s" not in model.idata.posterior  # not traced by default either
    assert _per_observation_variables(path) == {}
    with h5netcdf.File(path, "r") as f:
        assert {"posterior", "sample_stats", "prior", OBS_GROUP} <= set(f.groups)
        assert len(f[OBS_GROUP].dimensions[DIM_OBS]) == len(model.data.obs)
    post = load_posterior(path)
    assert post.data is not None and len(post.data.obs) == len(model.data.obs)
    assert post.idata.posterior["beta"].sizes["draw"] == 80


def test_check_recomputes_the_means_from_the_coefficients(tiny_fit):
    model, path, _ = tiny_fit
    draws = predictive_draws(load_posterior(path), n_draws=40, seed=2)
    assert draws.y_rep.shape == (40, len(model.data.obs))
    assert np.isfinite(draws.y_rep).all() and (np.median(draws.y_rep, axis=0) > 0).all()
    assert draws.loo is not None and np.isfinite(draws.loo.elpd_loo)
    # replicated medians follow the observations (the means recomputed per draw)
    ratio = np.median(draws.y_rep, axis=0) / draws.y
    assert 0.5 < np.median(ratio) < 2.0


def test_a_file_with_mean_s_draws_loads_without_them(tiny_fit, tmp_path):
    """Files written before kept ``mean_s`` (chain x draw x obs) and the prior predictive:
    they load, those variables dropped, and check still runs."""
    model, path, _ = tiny_fit
    idata = az.from_netcdf(str(path), engine="h5netcdf")
    idata.load()
    post = idata.posterior
    n_obs = len(model.data.obs)
    shape = (post.sizes["chain"], post.sizes["draw"], n_obs)
    post["mean_s"] = (("chain", "draw", DIM_OBS), np.full(shape, 0.5))
    post = post.assign_coords({DIM_OBS: np.arange(n_obs)})
    idata.posterior = post
    idata.add_groups({"prior_predictive": {"y_obs": np.ones((1, 20, n_obs))}},
                     dims={"y_obs": [DIM_OBS]})
    old = tmp_path / "old.nc"
    idata.to_netcdf(str(old), engine="h5netcdf")
    assert "mean_s" in _per_observation_variables(old)["posterior"]
    assert old.stat().st_size > path.stat().st_size

    loaded = load_posterior(old)
    assert "mean_s" not in loaded.idata.posterior
    assert "prior_predictive" not in loaded.idata.groups()
    assert loaded.data is not None and len(loaded.data.obs) == n_obs
    draws = predictive_draws(loaded, n_draws=20, loo=False)
    assert np.isfinite(draws.y_rep).all()


@pytest.mark.parametrize("kind", ["empty", "text", "netcdf without a posterior", "missing"])
def test_a_file_that_is_no_posterior_says_what_was_expected(tmp_path, kind):
    path = tmp_path / "posterior.nc"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "text":
        path.write_text("model: llama-2-7b\n")
    elif kind == "netcdf without a posterior":
        xr.Dataset({"a": ("x", np.arange(3))}).to_netcdf(path, engine="h5netcdf")
    with pytest.raises(InputError) as exc:
        load_posterior(path)
    assert str(path) in str(exc.value) and "written by `bayesblis fit`" in str(exc.value)
