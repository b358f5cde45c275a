"""kernel-db's spread across GPUs (bayesblis.catalog.kernel_spread): the ratios read, the
model's likelihood by hand, the packaged summary, the scales a GPU never traced gets, and
(opt-in) recovery of a known spread."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from bayesblis.catalog import kernel_prices, kernel_spread
from bayesblis.catalog.kernel_spread import HARDWARE_SCALE, GROUP_FEATURES, hardware_scales


def test_ratios_are_a_balanced_layout_of_every_group_and_gpu():
    frame = kernel_spread.log_ratios()
    assert set(frame["group"]) == set(GROUP_FEATURES)
    counts = frame.groupby(["group", "gpu"]).size().unstack()
    assert list(counts.columns) == sorted(kernel_prices.catalog()["decode_attention"])
    assert (counts.nunique(axis=1) == 1).all()                 # every GPU at every point
    assert frame.loc[frame["gpu"] == "L40S", "pcie"].all() and not frame.loc[frame["gpu"] == "H100-SXM", "pcie"].any()
    # decode GEMMs: only weights past every GPU's L2
    sizes = frame.loc[frame["group"] == "gemm_decode", "point"].str.split("x", expand=True).astype(float)
    assert (sizes[0] * sizes[1] * 2 >= max(kernel_prices.L2_BYTES.values())).all()
    rows = frame[frame["group"] == "gemm_prefill"]
    gpu_mean, point_effect, residual = kernel_spread.decompose(rows)
    table = rows.pivot(index="gpu", columns="point", values="log_ratio")
    rebuilt = residual.add(point_effect, axis=1).add(gpu_mean, axis=0)
    np.testing.assert_allclose(rebuilt.to_numpy(), table.to_numpy(), atol=1e-12)
    assert abs(point_effect.sum()) < 1e-9 and np.allclose(residual.mean(axis=1), 0.0)


def test_the_likelihood_integrates_the_gpu_effect_out():
    rng = np.random.default_rng(0)
    rows = [("g", gpu, f"p{j}", 0.2 * i + 0.05 * j + rng.normal(0, 0.02), False)
            for i, gpu in enumerate("ABC") for j in range(4)]
    frame = pd.DataFrame(rows, columns=["group", "gpu", "point", "log_ratio", "pcie"])
    model = kernel_spread.build_model(frame)
    point = {"g_mu": 0.3, "g_tau_log__": np.log(0.15), "g_sigma_log__": np.log(0.03),
             "g_nu_log__": np.log(4.0)}
    logp = model.compile_logp(sum=False, jacobian=False)(point)
    by_name = dict(zip([v.name for v in model.observed_RVs], logp[-2:]))
    gpu_mean, _, residual = kernel_spread.decompose(frame)
    expected = stats.norm.logpdf(gpu_mean, 0.3, np.hypot(0.15, 0.03 / 2)).sum()
    assert float(np.sum(by_name["g_obs"])) == pytest.approx(expected)
    assert float(np.sum(by_name["g_residual"])) == pytest.approx(
        stats.t.logpdf(residual.to_numpy().ravel(), 4.0, 0.0, 0.03).sum())


def test_the_packaged_summary_is_a_converged_fit_of_the_packaged_prices():
    summary = kernel_spread.spread()
    assert summary["prior_tau"] == kernel_spread.PRIOR_TAU
    d = summary["diagnostics"]
    assert d["r_hat_max"] <= 1.01 and d["divergences"] == 0 and d["ess_bulk_min"] >= 400
    frame = kernel_spread.log_ratios()
    for group, entry in summary["groups"].items():
        assert entry["gpus"] == sorted(frame.loc[frame["group"] == group, "gpu"].unique())
        assert entry["tau_90"][0] < entry["tau_mean"] < entry["tau_90"][1]
        assert entry["new_gpu_sd"] >= entry["tau_mean"]        # sqrt(E tau^2) >= E tau
    assert "link_offset" in summary["groups"]["allreduce_per_byte"]


def test_a_gpu_never_traced_gets_the_spread_kernel_db_measured():
    measured, unmeasured = hardware_scales("L40S"), hardware_scales("A40")
    for feature in ("weight_traffic_s", "kv_traffic_s", "tp_comm_s", "tp_sync_s"):
        assert measured[feature] == HARDWARE_SCALE              # priced by its own kernels
    prefill = np.hypot(HARDWARE_SCALE, kernel_spread.new_gpu_sd("gemm_prefill"))
    assert measured["prefill_compute_s"] == pytest.approx(prefill)   # priced in part
    assert unmeasured["weight_traffic_s"] == pytest.approx(
        np.hypot(HARDWARE_SCALE, kernel_spread.new_gpu_sd("gemm_decode")))
    assert unmeasured["prefill_compute_s"] == pytest.approx(prefill)
    assert "layer_overhead_s" not in measured and "layer_overhead_s" not in unmeasured
    assert kernel_spread.kernel_measured("H200-SXM") and not kernel_spread.kernel_measured("A40")
    assert kernel_spread.kernel_measured("A100") and hardware_scales("A100") == hardware_scales("A100-SXM-80GB")
    assert kernel_spread.gpu_metric_sd("A100-SXM-80GB") == HARDWARE_SCALE
    assert kernel_spread.gpu_metric_sd("A40") == pytest.approx(kernel_spread.unmeasured_metric_sd())
    assert HARDWARE_SCALE < kernel_spread.unmeasured_metric_sd() < kernel_spread.PRIOR_TAU


@pytest.mark.slow
def test_a_known_spread_across_gpus_is_recovered_and_predicted():
    """12 synthetic GPUs whose effects are Normal(0, 0.15) about 0.4, with point effects and
    Student-t errors: tau's interval covers 0.15, and a 13th GPU lies in the predictive."""
    rng = np.random.default_rng(7)
    tau, sigma, n_gpus, n_points = 0.15, 0.05, 13, 30
    effects = rng.normal(0, tau, n_gpus)
    shape = rng.normal(0, 0.2, n_points)
    rows = [("g", f"gpu{i}", f"p{j}", 0.4 + effects[i] + shape[j] + sigma * rng.standard_t(5), False)
            for i in range(n_gpus) for j in range(n_points)]
    frame = pd.DataFrame(rows, columns=["group", "gpu", "point", "log_ratio", "pcie"])
    train = frame[frame["gpu"] != "gpu12"]
    idata = kernel_spread.fit(train, seed=3, draws=500, tune=500)
    assert kernel_spread.diagnostics(idata)["divergences"] == 0
    lo, hi = kernel_spread.summarise(idata, train)["g"]["tau_90"]
    assert lo < tau < hi
    draws = kernel_spread.predict_new_gpu(idata, train, "g", False, np.random.default_rng(0))
    truth = frame[frame["gpu"] == "gpu12"].set_index("point")["log_ratio"][draws.columns]
    inside = (truth >= draws.quantile(0.05)) & (truth <= draws.quantile(0.95))
    assert inside.mean() >= 0.8
