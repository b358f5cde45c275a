"""validate scores the predictive median: a few saturated draws inflate the mean, not the
scored error or the simulator discrepancy (the bundled inference-perf sample, no fit)."""

from pathlib import Path

import numpy as np
import pytest

from bayesblis.simulate.results import METRICS as RESULT_METRICS
from bayesblis.simulate.results import summarize

SAMPLE = Path(__file__).resolve().parents[2] / "bayesblis/data/samples/inference-perf-2stage"


@pytest.fixture(scope="module")
def source():
    from bayesblis.io.dataset import ingest

    return ingest([str(SAMPLE)]).sources[0]


def cliff_result(source, n_draws=20, n_saturated=3):
    """A RESULT-like document: per stage, every metric's draws at 0.95 x the measurement,
    `n_saturated` of them at 30 x (draws whose queue kept growing)."""
    measured = source.tables["stage_measurements"]
    stages, per_draw = [], []
    for _, row in measured.iterrows():
        draws = {}
        for m in RESULT_METRICS:
            value = float(row[m]) if m in row else 1.0
            draws[m] = np.r_[np.full(n_draws - n_saturated, 0.95 * value),
                             np.full(n_saturated, 30.0 * value)]
        stage = {m: summarize(v) for m, v in draws.items()}
        stage["saturated_share"] = n_saturated / n_draws
        stages.append(stage)
        per_draw.append({m: list(v) for m, v in draws.items()})
    return {"stages": stages, "per_draw_stages": per_draw}


def test_errors_are_of_the_median_and_the_mean_error_is_kept(source):
    from bayesblis.discrepancy import discrepancy_sd
    from bayesblis.validate import METRICS, compare, format_table, summarize as summarize_report

    records = compare(source, cliff_result(source), fold="f", holdout="experiment")
    assert len(records) == 2
    for rec in records:
        assert rec["saturated_share"] == pytest.approx(0.15)
        for m in ("e2e_mean_s", "ttft_mean_s", "e2e_p90_s"):
            assert rec[f"pred_{m}"] == pytest.approx(0.95 * rec[f"measured_{m}"])
            assert rec[f"abs_pct_error_{m}"] == pytest.approx(5.0)
            mean = (17 * 0.95 + 3 * 30.0) / 20
            assert rec[f"pred_{m}_mean"] == pytest.approx(mean * rec[f"measured_{m}"])
            assert rec[f"abs_pct_error_of_mean_{m}"] == pytest.approx((mean - 1) * 100)
    for rec in records:  # one client error per stage marks the sample's stages overloaded
        rec["overloaded"] = False
    # the discrepancy is the spread of the scored (median) errors: log(1 / 0.95)
    sd = discrepancy_sd(records, ["e2e_mean_s"])["e2e_mean_s"]
    assert sd["sd_observed"] == pytest.approx(np.log(1 / 0.95) / 1.645, rel=1e-3)
    summary = summarize_report(records, "experiment")
    assert summary["point_prediction"] == "median"
    assert summary["median_abs_pct_error_e2e_mean"] == pytest.approx(5.0)
    assert summary["median_abs_pct_error_of_mean_e2e_mean"] > 400
    assert summary["n_normal_stages_with_saturated_draws"] == summary["n_normal_stages"]
    # interval width relative to the median: 5% quantile 0.95 x, 95% quantile 30 x measured
    assert summary["interval_width_pct_by_metric"]["e2e_mean_s"] == pytest.approx((30 - 0.95) / 0.95 * 100)
    table = format_table({"holdout": "experiment", "records": records, "summary": summary})
    assert "predictive median" in table.splitlines()[0]
    assert "15% of draws saturate" in table and "of the predictive mean" in table
    assert set(METRICS.values()) <= set(RESULT_METRICS)


def test_pit_is_the_predictive_probability_below_the_measurement(source):
    """PIT per stage and metric: the share of draws (widened by the discrepancy) below the
    measured value; its central-interval shares are the calibration the summary reports."""
    from scipy.stats import norm

    from bayesblis.validate import METRICS, compare, pit_calibration, summarize as summarize_report

    result = cliff_result(source)
    plain = compare(source, result, fold="f", holdout="experiment")
    disc = {m: {"sd": 0.05} for m in METRICS.values()}
    wide = compare(source, result, fold="f", holdout="experiment", discrepancy=disc)
    for p, w in zip(plain, wide):
        for m in ("e2e_mean_s", "ttft_mean_s", "e2e_p90_s", "ttft_p90_s"):
            assert p[f"pit_{m}"] == pytest.approx(17 / 20)         # 17 draws at 0.95 x measured
            assert w[f"model_pit_{m}"] == pytest.approx(17 / 20)
            assert w[f"pit_{m}"] == pytest.approx(17 / 20 * norm.cdf(np.log(1 / 0.95) / 0.05))
    for rec in wide:
        rec["overloaded"] = False
    summary = summarize_report(wide, "experiment")
    assert set(summary["calibration"]) == {"central_50", "central_80", "central_90", "n"}
    assert summary["calibration_posterior_only"]["central_80"] == 1.0   # |0.85 - 0.5| <= 0.4
    assert summary["calibration_posterior_only"]["central_50"] == 0.0
    u = np.random.default_rng(0).uniform(size=20000)
    cal = pit_calibration(np.r_[u, np.nan])
    assert cal["n"] == 20000
    for level in (50, 80, 90):
        assert cal[f"central_{level}"] == pytest.approx(level / 100, abs=0.01)


def test_a_configuration_never_fitted_gets_its_spread_scaled_not_widened(source):
    """Held out by model (a configuration the fit never saw, on seen hardware) the draws'
    log spread about their median is scaled by the fold's `scale`; a new run of a fitted
    configuration keeps the additive sd; unseen hardware is scaled and gets its own sd."""
    from bayesblis.catalog.kernel_spread import HARDWARE_SCALE
    from bayesblis.validate import METRICS, compare

    rng = np.random.default_rng(0)
    measured = source.tables["stage_measurements"]
    per_draw, stages = [], []
    for _, row in measured.iterrows():
        draws = {m: (float(row[m]) if m in row else 1.0) * rng.lognormal(0.0, 0.2, 400)
                 for m in RESULT_METRICS}
        per_draw.append({m: list(v) for m, v in draws.items()})
        stages.append({m: summarize(v) for m, v in draws.items()})
    disc = {m: {"sd": 0.05, "scale": 0.25} for m in METRICS.values()}
    width = {}
    for name, seen, levels in (("new configuration", False, {}), ("new run", True, {}),
                               ("new GPU", False, {"hardware": "A100"})):
        result = {"stages": stages, "per_draw_stages": per_draw, "seen_config": seen,
                  "unseen_levels": levels}
        rec = compare(source, result, fold="f", holdout="model", discrepancy=disc)[0]
        assert rec["seen_config"] is seen
        m = "e2e_mean_s"
        width[name] = np.log(rec[f"pred_{m}_hi"] / rec[f"pred_{m}_lo"])
        posterior = np.log(rec[f"model_pred_{m}_hi"] / rec[f"model_pred_{m}_lo"])
    assert width["new configuration"] == pytest.approx(0.25 * posterior, rel=0.02)
    assert width["new run"] > posterior
    # a GPU never traced (kernel-db measures A100): the scaled spread and the GPU's own sd
    z = 2 * 1.6449
    assert width["new GPU"] == pytest.approx(z * np.hypot(0.25 * posterior / z, HARDWARE_SCALE), rel=0.05)


def test_thinning_per_run_keeps_every_column():
    """The fold fits' thinning keeps each (run, kind) to half the budget and every column:
    a groupby-apply dropped `run` and `kind` under pandas 3, and every row then fitted as
    an exact 'window' (no per-kind error) while the CLI fit kept them apart."""
    import numpy as np
    import pandas as pd

    from bayesblis.model.data import ModelData
    from bayesblis.validate import _thin_per_run

    configs = pd.DataFrame({"config": ["c"], "model": ["m"], "model_family": ["f"],
                            "arch": ["dense"], "hardware": ["H100-SXM"], "tp": [1], "ep": [1],
                            "dtype": ["bf16"]})
    n = 300
    obs = pd.DataFrame({"config": "c", "y_s": 1.0, "n_steps": 10.0, "f_step_overhead_s": 1e-5,
                        "kind": np.where(np.arange(n) % 3 == 0, "client_ttft", "client_decode_window"),
                        "run": np.where(np.arange(n) < 200, "r1", "r2"),
                        "phase_var": np.where(np.arange(n) % 3 == 0, 1 / 12, np.nan)})
    thin = _thin_per_run(ModelData(configs, obs), 40, seed=1).obs
    assert {"kind", "run", "phase_var"} <= set(thin.columns)
    assert thin.groupby(["run", "kind"]).size().to_dict() == {
        ("r1", "client_decode_window"): 20, ("r1", "client_ttft"): 20,
        ("r2", "client_decode_window"): 20, ("r2", "client_ttft"): 20}
