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
