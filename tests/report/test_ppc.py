"""Posterior-predictive checks: the statistics on hand-made cases, then a real posterior."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from scipy import stats

from bayesblis.ppc import (ALL_KINDS, COVERAGE90_RANGE, LOAD_MIN_STEPS, PRIOR_P_RANGE,
                           CheckError, PredictiveDraws, check_posterior, flag_reasons,
                           format_check, format_load_response, interval_coverage, ks_pvalue,
                           ks_uniform, load_response, pit_values, prior_predictive_rows,
                           summarize_checks)


# ---------------------------------------------------------------------- hand-made
def test_pit_and_coverage_on_a_known_grid():
    grid = np.linspace(0.0, 1.0, 1001)  # replicated draws: the same grid for every observation
    y = np.array([0.5, 0.04, 0.96, 0.2, 0.99])
    y_rep = np.repeat(grid[:, None], len(y), axis=1)
    pit = pit_values(y, y_rep)
    # 0.5 is on the grid: 500 draws below, one equal (counts half)
    assert pit[0] == pytest.approx(0.5)
    assert pit[1] == pytest.approx(40 / 1001 + 0.5 / 1001)
    assert np.all((pit >= 0) & (pit <= 1))
    # 90% interval [0.05, 0.95]: 0.5 and 0.2 inside; 50% interval [0.25, 0.75]: 0.5 only
    assert interval_coverage(y, y_rep, 0.9).tolist() == [True, False, False, True, False]
    assert interval_coverage(y, y_rep, 0.5).mean() == pytest.approx(0.2)


def test_ks_distance_matches_scipy():
    rng = np.random.default_rng(3)
    u = rng.uniform(size=200) ** 1.3
    res = stats.kstest(u, "uniform")
    assert ks_uniform(u) == pytest.approx(res.statistic)
    assert ks_pvalue(ks_uniform(u), len(u)) == pytest.approx(res.pvalue, rel=1e-6)
    n = 50
    assert ks_uniform((np.arange(n) + 0.5) / n) == pytest.approx(0.5 / n)


def test_flag_reasons():
    good = {"n_obs": 100, "coverage_90": 0.9, "pit_ks": 0.05, "ppp_mean": 0.4,
            "observed_mean_s": 1.0, "mean_ratio": 1.0, "pareto_k_bad_share": 0.0}
    assert flag_reasons(good) == []
    assert "coverage" in flag_reasons({**good, "coverage_90": COVERAGE90_RANGE[0] - 0.01})[0]
    assert "PIT" in flag_reasons({**good, "pit_ks": 0.3})[0]
    # significant only: 0.12 at n=100 is below 1.63/sqrt(100)=0.163
    assert flag_reasons({**good, "pit_ks": 0.12}) == []
    assert "mean" in flag_reasons({**good, "ppp_mean": 0.0, "mean_ratio": 1.3})[0]
    assert flag_reasons({**good, "ppp_mean": 0.0, "mean_ratio": 1.02}) == []  # tiny bias
    assert "Pareto" in flag_reasons({**good, "pareto_k_bad_share": 0.5})[0]
    assert flag_reasons({**good, "n_obs": 5, "coverage_90": 0.1}) == []  # too few to flag


def _windows_at_loads(step_ms, replicated_ms, n_draws: int = 200, seed: int = 0):
    """PredictiveDraws of 300 step windows of one configuration at 10-120 requests in
    flight (mean per step: `step_ms(b)` observed, `replicated_ms(b)` replicated, 1% noise),
    plus 60 TTFT-like windows of 2 steps that the load response must leave out."""
    from types import SimpleNamespace

    import pandas as pd

    rng = np.random.default_rng(seed)
    b = rng.uniform(10, 120, 300)
    steps = rng.integers(50, 300, 300).astype(float)
    obs = pd.DataFrame({"config": "c", "kind": "client_decode_window", "n_steps": steps,
                        "f_request_overhead_s": b * steps * 1e-6,
                        "y_s": step_ms(b) * 1e-3 * steps * (1 + 0.01 * rng.standard_normal(300))})
    short = pd.DataFrame({"config": "c", "kind": "client_ttft", "n_steps": 2.0,
                          "f_request_overhead_s": 60 * 2e-6, "y_s": np.full(60, 5.0)})
    obs = pd.concat([obs, short], ignore_index=True)
    rep = replicated_ms(b) * 1e-3 * steps * (1 + 0.01 * rng.standard_normal((n_draws, 300)))
    y_rep = np.concatenate([rep, np.full((n_draws, 60), 5.0)], axis=1)
    return PredictiveDraws(data=SimpleNamespace(obs=obs), y_rep=y_rep)


def test_load_response_shows_a_concave_step_priced_linearly():
    """Observed step time concave in the batch (16 ms + sqrt(b) ms), replicated by its chord
    from 10 to 120 requests in flight: the bins run long, most in the middle (marked), least
    at the top end (not marked); windows shorter than LOAD_MIN_STEPS are left out; the
    fitted load is the 95th percentile of the windows' batch."""
    def concave(b):
        return 16.0 + np.sqrt(b)

    lo_b, hi_b = 10.0, 120.0
    slope = (concave(hi_b) - concave(lo_b)) / (hi_b - lo_b)
    draws = _windows_at_loads(concave, lambda b: concave(lo_b) + slope * (b - lo_b))
    (entry,) = load_response(draws)
    bins = entry["bins"]
    assert len(bins) == 6 and sum(x["n_obs"] for x in bins) == 300  # the 2-step rows left out
    assert LOAD_MIN_STEPS > 2 and bins[0]["in_flight_lo"] >= 10
    ratios = [x["ratio"] for x in bins]
    assert max(ratios) == max(ratios[1:4]) > 1.03 and all(x["outside"] for x in bins[:5])
    assert all(r > 1 for r in ratios) and abs(ratios[-1] - 1) < 0.01 and not bins[-1]["outside"]
    for x in bins:
        assert x["replicated_lo_s"] <= x["replicated_step_s"] <= x["replicated_hi_s"]
        assert x["in_flight_lo"] <= x["in_flight"] <= x["in_flight_hi"]
    assert 110 < entry["fitted_load"] < 120
    text = "\n".join(format_load_response([entry]))
    assert "load response" in text and "*" in text and "(fitted load 11" in text


def test_load_response_of_a_well_priced_step_marks_nothing():
    """Replicated = observed shape: every ratio within 1%, no bin marked."""
    draws = _windows_at_loads(lambda b: 16.0 + 0.05 * b, lambda b: 16.0 + 0.05 * b)
    (entry,) = load_response(draws)
    assert all(abs(x["ratio"] - 1) < 0.01 and not x["outside"] for x in entry["bins"])
    assert "*" not in "\n".join(format_load_response([entry])[1:])
    # one batch size throughout (a closed-loop benchmark at fixed concurrency): no entry
    draws.data.obs["f_request_overhead_s"] = 32e-6 * draws.data.obs["n_steps"]
    assert load_response(draws) == [] and format_load_response([]) == []


# ---------------------------------------------------------------------- real posterior
def test_stored_observations_round_trip(posterior):
    data = posterior.data
    assert data is not None
    assert len(data.obs) == posterior.fit_info["n_obs"]
    assert set(data.obs["config"]) == set(posterior.configs["config"])
    assert data.obs["y_s"].gt(0).all()
    assert data.obs["kind"].map(type).eq(str).all()


def test_check_on_demo_posterior(checked, posterior):
    doc, draws = checked
    n_obs = len(posterior.data.obs)
    assert draws.y_rep.shape == (doc["n_draws"], n_obs)
    assert 50 <= doc["n_draws"] <= 100
    configs = list(posterior.configs["config"])
    all_rows = [r for r in doc["rows"] if r["kind"] == ALL_KINDS]
    assert [r["config"] for r in all_rows] == configs
    assert sum(r["n_obs"] for r in all_rows) == n_obs
    kinds = set(posterior.data.obs["kind"])
    for cfg in configs:
        per_kind = [r for r in doc["rows"] if r["config"] == cfg and r["kind"] != ALL_KINDS]
        assert {r["kind"] for r in per_kind} <= kinds
        assert sum(r["n_obs"] for r in per_kind) == next(r["n_obs"] for r in all_rows
                                                         if r["config"] == cfg)
    for r in doc["rows"]:
        assert 0 <= r["coverage_50"] <= r["coverage_90"] <= 1
        assert 0 <= r["pit_mean"] <= 1 and 0 <= r["pit_ks"] <= 1
        assert r["flagged"] == bool(r["reasons"])
    # coverage recomputed from the draws for one configuration
    cfg = configs[0]
    idx = np.flatnonzero(posterior.data.obs["config"].to_numpy() == cfg)
    expect = interval_coverage(draws.y[idx], draws.y_rep[:, idx], 0.9).mean()
    assert all_rows[0]["coverage_90"] == pytest.approx(expect)
    # the fitted model replicates its own data: means agree within 25%
    for r in all_rows:
        assert 0.75 < r["mean_ratio"] < 1.25, r
    loo = doc["loo"]
    assert loo is not None and np.isfinite(loo["elpd_loo"]) and loo["n_obs"] == n_obs
    assert sum(r["elpd_loo"] for r in all_rows) == pytest.approx(loo["elpd_loo"])
    assert 0 <= loo["pareto_k_bad_share"] <= 1
    assert doc["passed"] == (not doc["flagged_configs"])
    json.dumps(doc)  # JSON-ready
    text = format_check(doc)
    assert configs[0][:39] in text and "PSIS-LOO" in text
    # the load response of every configuration with step windows, on the same draws
    assert [e["config"] for e in doc["load_response"]] == [e["config"] for e in load_response(draws)]
    assert doc["load_response"] and "load response" in text
    for e in doc["load_response"]:
        assert all(0.75 < b["ratio"] < 1.25 for b in e["bins"]), e


def test_misfit_configuration_is_flagged(posterior, checked):
    """Observations of one configuration scaled x3: that configuration is flagged, with a
    mean and a coverage reason; the other is not flagged for its mean. (The replicated
    draws depend on the posterior and the features only, not on the observed y, so the
    demo's replicates are reused against the altered observations.)"""
    _, draws = checked
    data = copy.deepcopy(posterior.data)
    target = posterior.configs["config"].iloc[1]
    data.obs.loc[data.obs["config"] == target, "y_s"] *= 3.0
    rows = summarize_checks(PredictiveDraws(data=data, y_rep=draws.y_rep))
    flagged = {r["config"] for r in rows if r["flagged"]}
    doc = {"rows": rows}
    assert target in flagged
    row = next(r for r in doc["rows"] if r["config"] == target and r["kind"] == ALL_KINDS)
    assert row["mean_ratio"] == pytest.approx(3.0, rel=0.25)
    assert row["coverage_90"] < COVERAGE90_RANGE[0]
    assert any("mean" in reason for reason in row["reasons"])
    other = next(r for r in doc["rows"] if r["config"] != target and r["kind"] == ALL_KINDS)
    assert not any("mean" in reason for reason in other["reasons"])
    assert other["mean_ratio"] == pytest.approx(1.0, abs=0.25)


def test_posterior_without_observations_names_the_fix(posterior):
    bare = copy.copy(posterior)
    bare.data = None
    with pytest.raises(CheckError, match="--dataset"):
        check_posterior(bare, n_draws=20, loo=False)


def test_check_cli_writes_json_and_plots(posterior_path, tmp_path):
    from click.testing import CliRunner

    from bayesblis.cli import cli

    out, plots = tmp_path / "check.json", tmp_path / "plots"
    res = CliRunner().invoke(cli, ["check", str(posterior_path), "--out", str(out),
                                   "--plots", str(plots), "--draws", "40", "--no-loo"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    doc = json.loads(out.read_text())
    assert doc["check_version"] == "1" and doc["loo"] is None and doc["n_draws"] == 40
    assert "cov90" in res.output
    pngs = sorted(p.name for p in plots.glob("*.png"))
    assert "coverage.png" in pngs and "load_response.png" in pngs
    assert sum(p.startswith("ppc_") for p in pngs) == len(
        {r["config"] for r in doc["rows"]})
    for p in plots.glob("*.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_posterior_of_another_model_layout_is_refused(posterior):
    """A file missing one of the model's free variables is refused, not silently completed
    with prior draws."""
    other = copy.copy(posterior)
    other.idata = posterior.idata.copy()
    other.idata.posterior = other.idata.posterior.drop_vars("sigma_step")
    with pytest.raises(CheckError, match="another model layout"):
        check_posterior(other, n_draws=20, loo=False)


def test_prior_predictive_check_on_demo_posterior(checked, posterior):
    """The 100 prior draws `fit` stores replicate every observation; each row places the
    observed median among the prior's replicated medians, and the demo fleet's truth, which
    the priors are centred near, conflicts with none."""
    doc, draws = checked
    prior = doc["prior_predictive"]
    assert draws.y_prior.shape == (100, len(posterior.data.obs))
    assert prior["n_draws"] == 100 and prior["p_range"] == list(PRIOR_P_RANGE)
    configs = list(posterior.configs["config"])
    assert [r["config"] for r in prior["rows"] if r["kind"] == ALL_KINDS] == configs
    for r in prior["rows"]:
        assert 0 <= r["prior_p"] <= 1
        assert r["prior_median_lo_s"] <= r["prior_median_s"] <= r["prior_median_hi_s"]
        assert r["conflict"] == (not PRIOR_P_RANGE[0] <= r["prior_p"] <= PRIOR_P_RANGE[1])
    # one row recomputed from the draws
    row = prior["rows"][0]
    idx = np.flatnonzero(posterior.data.obs["config"].to_numpy() == row["config"])
    medians = np.median(draws.y_prior[:, idx], axis=1)
    assert row["observed_median_s"] == pytest.approx(np.median(draws.y[idx]))
    assert row["prior_p"] == pytest.approx(np.mean(medians <= np.median(draws.y[idx])))
    assert prior["conflicts"] == []
    assert "prior predictive (100 prior draws)" in format_check(doc)


def test_prior_conflict_is_flagged(posterior, checked):
    """Observations of one configuration 1,000x their own scale: a prior conflict there and
    nowhere else (the prior's replicates do not depend on the observed values, so the demo's
    are reused against the altered observations)."""
    _, draws = checked
    data = copy.deepcopy(posterior.data)
    target = posterior.configs["config"].iloc[1]
    data.obs.loc[data.obs["config"] == target, "y_s"] *= 1000.0
    rows = prior_predictive_rows(PredictiveDraws(data=data, y_rep=draws.y_rep,
                                                 y_prior=draws.y_prior))
    assert {r["config"] for r in rows if r["conflict"]} == {target}
    row = next(r for r in rows if r["config"] == target and r["kind"] == ALL_KINDS)
    assert row["prior_p"] == 1.0 and row["median_ratio"] > 100


def test_posterior_without_prior_draws_says_so(posterior):
    bare = copy.copy(posterior)
    bare.idata = posterior.idata.copy()
    del bare.idata.prior
    doc = check_posterior(bare, n_draws=20, loo=False)
    assert doc["prior_predictive"] is None
    assert any("no prior predictive check" in n for n in doc["notes"])

