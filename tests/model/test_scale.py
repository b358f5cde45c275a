"""Scale helpers: summing similar steps into windows, minibatch ADVI (tiny data, fast)."""

import numpy as np
import pytest

from bayesblis.errors import BayesBlisError
from bayesblis.model.hierarchy import LatencyModel
from bayesblis.model.reduce import WINDOW_KIND, similarity_order, sum_similar_steps

from model_helpers import synthetic_data


def test_similarity_order_is_a_permutation_whose_cells_are_close():
    rng = np.random.default_rng(0)
    points = rng.uniform(size=(203, 2))
    order = similarity_order(points, 4)
    assert sorted(order.tolist()) == list(range(203))
    cells = points[order[:200]].reshape(50, 4, 2)
    # a cell spans far less than the unit square (a random 4-point cell spans ~0.6)
    assert np.median(np.ptp(cells, axis=1).max(axis=1)) < 0.35


def test_summed_windows_keep_totals_per_configuration():
    data, _ = synthetic_data(n_obs=23)
    reduced = sum_similar_steps(data, 5)
    assert set(reduced.obs["kind"]) == {WINDOW_KIND}
    assert len(reduced.obs) == len(data.configs) * 5  # 23 steps -> 4 windows of 5 + 1 of 3
    cols = ["y_s", "n_steps", *data.feature_columns(data.obs, "f_")]
    np.testing.assert_allclose(reduced.obs.groupby("config")[cols].sum(),
                               data.obs.groupby("config")[cols].sum(), rtol=1e-12)
    assert sum_similar_steps(data, 1) is data
    spread = sum_similar_steps(data, 5, similarity="spread")
    np.testing.assert_allclose(spread.obs.groupby("config")[cols].sum(),
                               data.obs.groupby("config")[cols].sum(), rtol=1e-12)


def test_minibatch_advi_fits_and_refuses_nuts():
    # 4 configurations (2 GPUs x a dense and a MoE family, TP 2): the code path, not the
    # fleet; a smaller graph for ADVI's step function to compile
    data, _ = synthetic_data(n_obs=50, families=(("llama", "dense"), ("mixtral", "moe")),
                             tps=(2,))
    model = LatencyModel(sampler_config={"advi_iterations": 200, "draws": 20, "chains": 1})
    model.build_model(data, minibatch_size=32)
    assert "mean_s" not in model.model.named_vars
    idata = model.fit(method="advi", progressbar=False)
    assert idata.posterior["beta"].sizes["draw"] == 20
    assert np.isfinite(idata.posterior["beta"].values).all()
    assert len(model.fit_info["advi_loss"]) == 100  # kept in fit_info
    with pytest.raises(BayesBlisError, match="minibatch"):
        model.fit(method="nuts", progressbar=False)


def test_nuts_trace_can_leave_out_observation_means():
    data, _ = synthetic_data(n_obs=5)
    model = LatencyModel(sampler_config={"store_obs_means": False})
    model.build_model(data)
    names = model._trace_names(model.sampler_config)
    assert "mean_s" not in names and "beta" in names
    kept = LatencyModel(sampler_config={"store_obs_means": True})
    kept.build_model(data)
    assert kept._trace_names(kept.sampler_config) is None  # all
    assert LatencyModel().sampler_config["store_obs_means"] is False  # default: left out


def _means_and_expected(model):
    """(the model's per-observation means, the same by gathering each row's coefficients)."""
    point = model.model.initial_point()
    point = {k: v + 0.1 * np.arange(v.size).reshape(v.shape) % 0.7 for k, v in point.items()}
    mean, beta, alpha = model.model.compile_fn(
        [model.model["mean_s"], model.model["beta"], model.model["alpha"]],
        inputs=model.model.value_vars, on_unused_input="ignore")(point)
    obs = model.data.obs
    cfg = model.data.index_of(obs)
    X = obs[[f"f_{f}" for f in model.beta_features]].to_numpy(float)
    XA = np.column_stack([obs[f"a_{f}"].to_numpy(float) if f"a_{f}" in obs else np.zeros(len(obs))
                          for f in model.alpha_features])
    return mean, (X * beta[cfg]).sum(axis=1) + (XA * alpha[cfg]).sum(axis=1)


def test_per_configuration_products_equal_gathered_coefficients_after_a_data_swap():
    data, _ = synthetic_data(n_obs=7)
    data.obs["a_alpha_output_s"] = np.arange(len(data.obs)) * 1e-6  # alpha enters the mean too
    model = LatencyModel()
    model.build_model(data)
    mean, expected = _means_and_expected(model)
    np.testing.assert_allclose(mean, expected, rtol=1e-12)
    other, _ = synthetic_data(n_obs=11, seed=3)  # same configurations, other row counts
    other.obs["a_alpha_output_s"] = 2e-6
    model._swap_data(other)
    mean, expected = _means_and_expected(model)
    assert len(mean) == len(other.obs)
    np.testing.assert_allclose(mean, expected, rtol=1e-12)
