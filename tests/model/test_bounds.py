"""Physical limits: efficiency coefficients below 1 claim a GPU faster than its datasheet."""

import numpy as np
import pandas as pd
import xarray as xr

from bayesblis.model.bounds import EFFICIENCY_LIMITS, format_bound_report, physical_bound_report


def _posterior(values):
    """beta draws [chain=1, draw=400, config, feature] around the given medians."""
    configs = list(values)
    features = ["prefill_compute_s", "tp_comm_s", "layer_overhead_s"]
    rng = np.random.default_rng(0)
    med = np.array([[values[c][f] for f in features] for c in configs])
    draws = med[None, None] * np.exp(0.05 * rng.standard_normal((1, 400, *med.shape)))
    return xr.Dataset({"beta": (("chain", "draw", "config", "feature"), draws)},
                      coords={"config": configs, "feature": features})


def test_reports_efficiency_coefficients_below_the_datasheet_and_skips_unused_features():
    post = _posterior({"a|tp1": {"prefill_compute_s": 0.01, "tp_comm_s": 0.05, "layer_overhead_s": 0.5},
                       "b|tp2": {"prefill_compute_s": 2.0, "tp_comm_s": 0.05, "layer_overhead_s": 30}})
    obs = pd.DataFrame({"config": ["a|tp1", "b|tp2"], "f_prefill_compute_s": [1e-3, 1e-3],
                        "f_tp_comm_s": [0.0, 1e-4], "f_layer_overhead_s": [1e-4, 1e-4]})
    rows = physical_bound_report(post, obs)
    found = {(r["config"], r["feature"]) for r in rows}
    # prefill at 0.01 claims 100x peak; tp_comm at TP 1 has no data (prior only): skipped;
    # layer overhead is in µs per layer, no physical limit of 1
    assert found == {("a|tp1", "prefill_compute_s"), ("b|tp2", "tp_comm_s")}
    low = next(r for r in rows if r["feature"] == "prefill_compute_s")
    assert low["prob_below"] == 1.0
    assert np.isclose(low["implied_efficiency"], 1 / low["median"])
    assert np.isclose(low["median"], 0.01, rtol=0.02)
    text = format_bound_report(rows)
    assert "2 coefficient(s)" in text and "20x peak" in text and "a|tp1" in text
    # without the observation table every coefficient with a limit is judged
    assert ("a|tp1", "tp_comm_s") in {(r["config"], r["feature"]) for r in physical_bound_report(post)}


def test_nothing_to_report_when_every_coefficient_is_at_or_above_its_limit():
    post = _posterior({"a": {"prefill_compute_s": 2.0, "tp_comm_s": 1.2, "layer_overhead_s": 0.1}})
    assert physical_bound_report(post) == []
    assert "no efficiency coefficient" in format_bound_report([])
    assert "layer_overhead_s" not in EFFICIENCY_LIMITS


def test_a_floored_coefficient_is_reported_where_it_sits_at_its_floor():
    # prefill with a floor of 1 (model/priors.py) cannot go below it: at 1.02 the data push
    # it against the floor; at 2.0 nothing to say
    post = _posterior({"a": {"prefill_compute_s": 1.02, "tp_comm_s": 1.2, "layer_overhead_s": 30},
                       "b": {"prefill_compute_s": 2.0, "tp_comm_s": 1.2, "layer_overhead_s": 30}})
    rows = physical_bound_report(post, floors={"prefill_compute_s": 1.0})
    assert [(r["config"], r["feature"], r["at_floor"]) for r in rows] == \
        [("a", "prefill_compute_s", True)]
    assert "at its floor 1" in format_bound_report(rows)
    assert physical_bound_report(post) == []  # judged against the limit itself: not below


def test_a_coefficient_far_above_the_datasheet_is_reported_as_implausibly_slow():
    from bayesblis.model.bounds import PLAUSIBLE_MAX

    post = _posterior({"a": {"prefill_compute_s": 14.0, "tp_comm_s": 1.2, "layer_overhead_s": 900},
                       "b": {"prefill_compute_s": 8.0, "tp_comm_s": 1.2, "layer_overhead_s": 30}})
    rows = physical_bound_report(post)
    assert [(r["config"], r["feature"], r["side"]) for r in rows] == [("a", "prefill_compute_s", "above")]
    assert rows[0]["prob_above"] == 1.0 and rows[0]["threshold"] == PLAUSIBLE_MAX["prefill_compute_s"]
    text = format_bound_report(rows)
    assert "no efficiency coefficient is below" in text          # nothing on the fast side
    assert "implausibly slow: 1 coefficient(s)" in text and "7% of peak" in text
    assert set(PLAUSIBLE_MAX) == set(EFFICIENCY_LIMITS)
