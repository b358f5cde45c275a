"""The simulator-discrepancy widening of predictive intervals (bayesblis.discrepancy)."""

import numpy as np
import pytest

from bayesblis.discrepancy import discrepancy_sd, quantile_sd, widened_interval


def test_quantile_sd_is_the_normal_sd_and_follows_heavy_tails():
    d = np.random.default_rng(0).normal(0.0, 0.05, 4000)
    assert quantile_sd(d) == pytest.approx(0.05, rel=0.05)
    assert quantile_sd(d, 0.5) == pytest.approx(0.05, rel=0.05)
    # Student-t errors (3 degrees of freedom): a 90% interval needs 2.35 scale units, not
    # the 1.645 x 1.4826 x 0.765 = 1.87 a normal fitted to the median |d| would give
    t = 0.05 * np.random.default_rng(1).standard_t(3, 20000)
    assert 1.645 * quantile_sd(t) == pytest.approx(0.05 * 2.353, rel=0.05)
    assert np.mean(np.abs(t) <= 1.645 * quantile_sd(t)) == pytest.approx(0.9, abs=0.005)
    assert quantile_sd(np.full(10, 0.1)) == pytest.approx(0.1 / 1.645, rel=1e-3)  # an offset counts
    assert quantile_sd([np.nan]) == 0.0


def test_discrepancy_is_the_error_the_predictive_does_not_already_allow():
    def rec(measured, pred, half_width=0.0, over=False):
        return {"overloaded": over, "measured_e2e_mean_s": measured, "pred_e2e_mean_s": pred,
                "pred_e2e_mean_s_lo": pred * np.exp(-1.645 * half_width),
                "pred_e2e_mean_s_hi": pred * np.exp(1.645 * half_width)}

    out = discrepancy_sd([rec(1.1, 1.0), rec(1.0, 1.1), rec(50.0, 1.0, over=True)], ["e2e_mean_s"])
    assert out["e2e_mean_s"]["n_stages"] == 2  # the overloaded stage is not used
    assert out["e2e_mean_s"]["sd"] == pytest.approx(np.log(1.1) / 1.645, rel=1e-3)
    wide = discrepancy_sd([rec(1.1, 1.0, 0.06), rec(1.0, 1.1, 0.06)], ["e2e_mean_s"])
    assert wide["e2e_mean_s"]["sd"] == 0.0  # the posterior already spans these errors
    part = discrepancy_sd([rec(1.1, 1.0, 0.03), rec(1.0, 1.1, 0.03)], ["e2e_mean_s"])["e2e_mean_s"]
    assert part["sd"] ** 2 + 0.03 ** 2 == pytest.approx((np.log(1.1) / 1.645) ** 2, rel=1e-3)


def test_widened_interval_of_a_point_is_lognormal_and_zero_sd_keeps_the_draws():
    lo, hi = widened_interval(np.full(200, 2.0), 0.1, 0.9)
    assert lo == pytest.approx(2.0 * np.exp(-1.645 * 0.1), rel=0.01)
    assert hi == pytest.approx(2.0 * np.exp(1.645 * 0.1), rel=0.01)
    draws = np.linspace(1.0, 2.0, 101)
    assert widened_interval(draws, 0.0, 0.9) == pytest.approx(tuple(np.quantile(draws, [0.05, 0.95])))


def test_pass_probability_is_the_lognormal_error_beyond_the_threshold():
    from scipy.stats import norm

    from bayesblis.discrepancy import pass_probability

    v = np.array([0.1, 0.2, 0.4, np.nan, 0.0])
    assert list(pass_probability(v, 0.2, 0.0)) == [1, 0, 0, 0, 1]          # the 0/1 of the draws
    assert list(pass_probability(v, 0.2, 0.0, inclusive=True)) == [1, 1, 0, 0, 1]
    p = pass_probability(v, 0.2, 0.3)
    assert p[1] == pytest.approx(0.5)                                     # on the threshold
    assert p[0] == pytest.approx(norm.cdf(np.log(2) / 0.3)) and p[2] == pytest.approx(1 - p[0])
    assert p[3] == 0 and p[4] == 0                   # no completed request, or no latency: fails
    # Monte Carlo: the share of value x exp(sd z) under the threshold
    z = np.random.default_rng(0).standard_normal(200000)
    assert np.mean(0.25 * np.exp(0.3 * z) < 0.2) == pytest.approx(pass_probability([0.25], 0.2, 0.3)[0],
                                                                  abs=0.005)


def _report(tmp_path, metrics, name="REPORT.json"):
    import json

    path = tmp_path / name
    path.write_text(json.dumps({"holdout": "experiment", "simulator_discrepancy": {
        "holdout": "experiment", "metrics": metrics}}))
    return path


def test_load_discrepancy_reads_the_packaged_file_and_validate_reports(tmp_path):
    from bayesblis.discrepancy import CATALOG_FILE, load_discrepancy
    from bayesblis.validate import METRICS

    packaged = load_discrepancy()
    assert packaged.holdout == "experiment" and "H100" in packaged.source
    assert set(packaged.sd) == set(METRICS.values())     # every metric validation scores
    # 0 where the posterior already covers the errors (E2E, ITL and the p90s in the reports
    # of 2026-11-26); the TTFT mean's arrival-phase scatter is wider than the posterior's
    assert all(0 <= sd < 0.5 for sd in packaged.sd.values()) and packaged.sd["ttft_mean_s"] > 0
    assert load_discrepancy(CATALOG_FILE) == packaged
    assert packaged.for_metric("throughput_tokens_per_s") == 0.0      # not calibrated
    # the spread scale of configurations never fitted, measured held out by model
    assert set(packaged.scale) == set(METRICS.values())
    assert all(0 < s < 1 for s in packaged.scale.values()) and "model" in packaged.scale_source
    mine = load_discrepancy(_report(tmp_path, {"e2e_mean_s": {"sd": 0.05}}))
    assert mine.sd == {"e2e_mean_s": 0.05} and mine.holdout == "experiment" and mine.scale == {}
    scaled = load_discrepancy(_report(tmp_path, {"e2e_mean_s": {"sd": 0.0, "scale": 0.3}}))
    assert scaled.scale == {"e2e_mean_s": 0.3}
    sloped = load_discrepancy(_report(tmp_path, {"e2e_mean_s": {"sd": 0.03,
                                                                "extrapolation_slope": 0.2}}))
    assert sloped.slope == {"e2e_mean_s": 0.2}


@pytest.mark.parametrize("content, field", [
    ({"metrics": {"e2e_mean_s": {"sd": -0.1}}}, "metrics.e2e_mean_s.sd"),
    ({"metrics": {"e2e_mean_s": {"sd": "wide"}}}, "metrics.e2e_mean_s.sd"),
    ({"metrics": {"e2e_mean_s": 0.1}}, "metrics.e2e_mean_s.sd"),
    ({"metrics": {}}, "metrics"),
    ({"records": []}, "metrics"),
    ({"metrics": {"e2e_mean_s": {"sd": 0.1, "scale": 0}}}, "metrics.e2e_mean_s.scale"),
    ({"metrics": {"e2e_mean_s": {"sd": 0.1, "scale": None}}}, "metrics.e2e_mean_s.scale"),
    ({"metrics": {"e2e_mean_s": {"sd": 0.1, "extrapolation_slope": -1}}},
     "metrics.e2e_mean_s.extrapolation_slope"),
])
def test_a_malformed_discrepancy_names_the_file_and_field(tmp_path, content, field):
    import json

    from bayesblis.discrepancy import load_discrepancy
    from bayesblis.errors import InputError

    path = tmp_path / "d.json"
    path.write_text(json.dumps(content))
    with pytest.raises(InputError) as exc:
        load_discrepancy(path)
    assert str(path) in str(exc.value) and f"field '{field}'" in str(exc.value)
    path.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(InputError, match="d.json"):
        load_discrepancy(path)


def _unseen_rec(measured, pred, spread, seen_config=False, levels=None):
    """A held-out stage record with a predictive log sd `spread` about `pred`."""
    return {"overloaded": False, "seen_config": seen_config, "unseen_levels": levels or {},
            "measured_e2e_mean_s": measured, "pred_e2e_mean_s": pred,
            "pred_e2e_mean_s_lo": pred * np.exp(-1.645 * spread),
            "pred_e2e_mean_s_hi": pred * np.exp(1.645 * spread)}


def test_spread_scale_is_the_conformal_quantile_of_errors_in_predictive_spreads():
    from bayesblis.discrepancy import spread_scale, spread_score

    # each side of the median its own spread: a skewed interval [0.8, 1.5] about 1.0
    assert spread_score(0.9, 1.0, 0.8, 1.5) == pytest.approx(np.log(1 / 0.9) / np.log(1 / 0.8))
    assert spread_score(1.2, 1.0, 0.8, 1.5) == pytest.approx(np.log(1.2) / np.log(1.5))
    # scores 0.1, 0.2, ..., 1.9 (19 stages, alternately below and above the median): k =
    # ceil(20 x 0.9) = 18, the 18th smallest score
    recs = [_unseen_rec(np.exp((-1) ** i * 0.02 * i * 1.645), 1.0, 0.2) for i in range(1, 20)]
    out = spread_scale(recs, ["e2e_mean_s"])["e2e_mean_s"]
    assert out["n_stages"] == 19
    assert out["scale"] == pytest.approx(1.8, rel=1e-6)
    # 9 stages: k = ceil(10 x 0.9) = 9, the largest score
    assert spread_scale(recs[:9], ["e2e_mean_s"])["e2e_mean_s"]["scale"] == pytest.approx(0.9)
    # only predictions of configurations never fitted, on fitted hardware, count
    others = [_unseen_rec(2.0, 1.0, 0.2, seen_config=True),
              _unseen_rec(2.0, 1.0, 0.2, levels={"hardware": "A100"})]
    assert spread_scale(others, ["e2e_mean_s"]) == {}
    assert spread_scale(recs[:9] + others, ["e2e_mean_s"])["e2e_mean_s"]["n_stages"] == 9


def test_scaled_draws_keep_their_median_and_scale_their_log_spread():
    from bayesblis.discrepancy import pass_probability, scaled_spread

    x = np.exp(np.random.default_rng(0).normal(np.log(2.0), 0.3, 2001))
    y = scaled_spread(x, 0.5)
    assert np.median(y) == pytest.approx(np.median(x))
    assert np.std(np.log(y)) == pytest.approx(0.5 * np.std(np.log(x)), rel=1e-6)
    lo, hi = widened_interval(x, 0.0, 0.9, scale=0.5)
    assert (lo, hi) == pytest.approx(tuple(np.quantile(y, [0.05, 0.95])))
    assert np.isnan(scaled_spread([np.nan, 1.0, 4.0], 0.5)[0])
    # a plan's pass probability sees the scaled draws
    assert pass_probability(x, 2.2, 0.0, scale=0.5).mean() == pytest.approx(np.mean(y < 2.2))


def test_each_deployment_gets_the_rule_measured_for_its_kind():
    from bayesblis.catalog.kernel_spread import HARDWARE_SCALE, unmeasured_metric_sd
    from bayesblis.discrepancy import (NEW_CONFIGURATION, NEW_GPU, NEW_RUN, UNMEASURED_GPU,
                                        Discrepancy)

    d = Discrepancy(sd={"e2e_mean_s": 0.04, "ttft_mean_s": 0.09}, scale={"e2e_mean_s": 0.3},
                    source="exp", holdout="experiment", scale_source="model")
    new_run = d.for_configuration(True)
    assert new_run.applies == NEW_RUN and new_run.widening("e2e_mean_s") == (0.04, 1.0)
    new_cfg = d.for_configuration(False, {"model_family": "mixtral"})
    assert new_cfg.applies == NEW_CONFIGURATION
    assert new_cfg.widening("e2e_mean_s") == (0.0, 0.3)
    assert new_cfg.widening("ttft_mean_s") == (0.09, 1.0)       # no scale measured: the sd
    assert new_cfg.widening("throughput_tokens_per_s") == (0.0, 1.0)
    # a GPU never traced and not in kernel-db: the scale, and the GPU's sd with kernel-db's
    # spread across GPUs
    unmeasured = d.for_configuration(False, {"hardware": "A40"})
    assert unmeasured.applies == UNMEASURED_GPU
    assert unmeasured.widening("e2e_mean_s") == pytest.approx((unmeasured_metric_sd(), 0.3))
    assert unmeasured.widening("ttft_mean_s") == pytest.approx(
        (np.hypot(0.09, unmeasured_metric_sd()), 1.0))
    # one kernel-db measured: the scale, and the GPU's own sd on every metric
    new_gpu = d.for_configuration(False, {"hardware": "A100-SXM-80GB", "model_family": "mixtral"})
    assert new_gpu.applies == NEW_GPU
    assert new_gpu.widening("e2e_mean_s") == pytest.approx((HARDWARE_SCALE, 0.3))
    assert new_gpu.widening("ttft_mean_s") == pytest.approx((np.hypot(0.09, HARDWARE_SCALE), 1.0))
    assert Discrepancy(sd={"e2e_mean_s": 0.04}).for_configuration(False).applies == NEW_RUN
    # without a scale a new GPU still takes its own sd
    unscaled = Discrepancy(sd={"e2e_mean_s": 0.04}).for_configuration(False, {"hardware": "H200-SXM"})
    assert unscaled.applies == NEW_GPU
    assert unscaled.widening("e2e_mean_s") == pytest.approx((np.hypot(0.04, HARDWARE_SCALE), 1.0))
    assert new_cfg.to_dict()["scale"] == {"e2e_mean_s": 0.3}


def test_fitted_load_is_the_busiest_windows_batch_and_ignores_other_configs_and_profiles():
    import pandas as pd

    from bayesblis.discrepancy import LOAD_QUANTILE, fitted_load, window_batch

    batch = np.arange(1, 101, dtype=float)  # mean requests per step of 100 windows
    obs = pd.DataFrame({"config": ["a"] * 100 + ["b", "a"], "kind": ["client_decode_window"] * 101
                        + ["operator_profile"], "n_steps": np.r_[np.full(100, 50.0), 10.0, 1.0],
                        "f_request_overhead_s": np.r_[batch * 50 * 1e-6, 1e-3, 0.0]})
    np.testing.assert_allclose(window_batch(obs)[:101], np.r_[batch, 100.0])
    assert np.isnan(window_batch(obs)[101])
    assert fitted_load(obs, "a") == pytest.approx(np.quantile(batch, LOAD_QUANTILE))
    assert fitted_load(obs, "c") is None and fitted_load(None, "a") is None


def test_beyond_its_fitted_load_a_fitted_configuration_gets_a_wider_interval():
    from bayesblis.discrepancy import (Discrepancy, extrapolation_slope, in_flight,
                                       load_excess)

    assert in_flight(20.0, 5.0) == 100.0 and in_flight(0.0, 5.0) is None
    assert load_excess(100.0, 50.0) == pytest.approx(np.log(2)) and load_excess(40.0, 50.0) == 0.0
    assert load_excess(100.0, None) == 0.0

    def rec(measured, pred, excess):
        return {"overloaded": False, "seen_config": True, "load_excess": excess,
                "measured_e2e_mean_s": measured, "pred_e2e_mean_s": pred,
                "pred_e2e_mean_s_lo": pred * 0.99, "pred_e2e_mean_s_hi": pred * 1.01}

    records = [rec(1.02, 1.0, 0.0), rec(0.98, 1.0, 0.0), rec(1.0, 1.2, 1.0), rec(1.1, 1.0, 0.5)]
    slope = extrapolation_slope(records, ["e2e_mean_s"])["e2e_mean_s"]
    assert slope["n_stages"] == 2  # the largest of two scores (k > n)
    assert slope["slope"] == pytest.approx(max(np.log(1.2) / 1.0, np.log(1.1) / 0.5))
    base = discrepancy_sd(records, ["e2e_mean_s"])["e2e_mean_s"]
    assert base["n_stages"] == 2  # the extrapolated stages set the slope, not the sd

    d = Discrepancy(sd={"e2e_mean_s": 0.03}, slope={"e2e_mean_s": 0.2})
    fitted = d.for_configuration(True, fitted_load=50.0)
    assert fitted.widening("e2e_mean_s", 40.0) == (0.03, 1.0)   # within the fitted load
    sd, _ = fitted.widening("e2e_mean_s", 50.0 * np.e)          # one unit of log excess
    assert sd == pytest.approx(np.hypot(0.03, 0.2 / 1.645), rel=1e-3)
    assert d.for_configuration(True).widening("e2e_mean_s", 500.0) == (0.03, 1.0)  # load unknown
    never = Discrepancy(sd={"e2e_mean_s": 0.03}, scale={"e2e_mean_s": 0.3},
                        slope={"e2e_mean_s": 0.2}).for_configuration(False, fitted_load=50.0)
    assert never.fitted_load is None
    assert fitted.to_dict()["extrapolation_slope"] == {"e2e_mean_s": 0.2}


def _stage(group, measured, seen=False, **extra):
    """A never-fitted stage predicted at median 1.0 with a posterior interval [0.5, 2.0]."""
    return {"model": group, "fold": group, "seen_config": seen, "unseen_levels": {},
            "measured_e2e_mean_s": measured, "pred_e2e_mean_s": 1.0,
            "pred_e2e_mean_s_lo": 0.5, "pred_e2e_mean_s_hi": 2.0, **extra}


def test_never_fitted_stages_come_from_validation_and_external_reports():
    from bayesblis.discrepancy import never_fitted_records, spread_scale
    from bayesblis.errors import InputError

    # held out by model with a discrepancy: the posterior-only interval is model_pred_*
    validation = {"records": [_stage("a", 1.1, overloaded=False, pred_e2e_mean_s_lo=0.9,
                                     pred_e2e_mean_s_hi=1.2, model_pred_e2e_mean_s_lo=0.5,
                                     model_pred_e2e_mean_s_hi=2.0),
                              _stage("a", 1.0, seen=True, overloaded=False)]}
    # an external check names a run's unseen levels once, on the run
    external = {"report": "external_check", "discrepancy": None,
                "runs": [{"run": "rb", "unseen_levels": {"model_family": "qwen3"}},
                         {"run": "rc", "unseen_levels": {"hardware": "L40S"}}],
                "records": [_stage("b", 0.8, run="rb"), _stage("c", 1.4, run="rc"),
                            _stage("d", 1.4, unseen_levels={"hardware": "A40"})]}
    records = never_fitted_records(validation) + never_fitted_records(external)
    assert [(r["group"], r["pred_e2e_mean_s_lo"]) for r in records] == [("a", 0.5), ("b", 0.5)]
    # 1.1 of a log-spread log(2) above, 0.8 of log(2) below: the larger score is the scale
    assert spread_scale(records, ["e2e_mean_s"])["e2e_mean_s"]["scale"] == pytest.approx(
        np.log(1 / 0.8) / np.log(2))
    with pytest.raises(InputError, match="discrepancy"):
        never_fitted_records(dict(external, discrepancy={"sd": {}}), "check.json")


def test_the_scales_cross_validated_coverage_leaves_each_model_out():
    from bayesblis.discrepancy import spread_scale_coverage

    # three models; the one far off (score 2) is covered by no scale of the other two
    records = [dict(_stage(g, m), overloaded=False, group=g)
               for g, m in (("a", 1.2), ("b", 1.3), ("c", 4.0))]
    out = spread_scale_coverage(records, ["e2e_mean_s"])["e2e_mean_s"]
    assert out == {"coverage": pytest.approx(2 / 3), "n_stages": 3}
