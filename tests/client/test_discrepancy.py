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
    assert all(0 < sd < 0.5 for sd in packaged.sd.values())
    assert load_discrepancy(CATALOG_FILE) == packaged
    assert packaged.for_metric("throughput_tokens_per_s") == 0.0      # not calibrated
    mine = load_discrepancy(_report(tmp_path, {"e2e_mean_s": {"sd": 0.05}}))
    assert mine.sd == {"e2e_mean_s": 0.05} and mine.holdout == "experiment"


@pytest.mark.parametrize("content, field", [
    ({"metrics": {"e2e_mean_s": {"sd": -0.1}}}, "metrics.e2e_mean_s.sd"),
    ({"metrics": {"e2e_mean_s": {"sd": "wide"}}}, "metrics.e2e_mean_s.sd"),
    ({"metrics": {"e2e_mean_s": 0.1}}, "metrics.e2e_mean_s.sd"),
    ({"metrics": {}}, "metrics"),
    ({"records": []}, "metrics"),
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
