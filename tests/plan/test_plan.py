"""`bayesblis plan`: SLO/option parsing, the rate search, and real plans on a tiny posterior
(few draws, seconds of traffic per rate)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bayesblis.plan import (PlanSpecError, RequestStream, SearchSettings, find_capacity,
                            option_tasks, parse_options, parse_slos, probability_curve, run_plan)

DRAWS = 10
DURATION_S = 30.0
SLO = "ttft_p90<0.2,itl_mean<30ms"
SCHEMA = Path(__file__).resolve().parents[2] / "data_specs" / "plan.schema.json"


# ---------------------------------------------------------------------------- parsing

def test_parse_slos_reads_metrics_operators_and_units():
    slos = parse_slos(" ttft_p90<0.2, itl_mean<=50ms ,e2e_p99_s<3s")
    assert [(s.metric, s.op, s.threshold_s) for s in slos] == [
        ("ttft_p90", "<", 0.2), ("itl_mean", "<=", pytest.approx(0.05)), ("e2e_p99", "<", 3.0)]
    assert slos[0].result_metric == "ttft_p90_s"
    ok = slos[1].passes([0.04, 0.05, 0.06, np.nan])
    assert ok.tolist() == [True, True, False, False]   # a missing metric fails


@pytest.mark.parametrize("text, token, words", [
    ("ttft_p95<0.2", "ttft_p95<0.2", ["unknown metric 'ttft_p95'", "ttft_p90", "itl_mean"]),
    ("ttft_p90=0.2", "ttft_p90=0.2", ["cannot read", "METRIC<SECONDS"]),
    ("ttft_p90<fast", "ttft_p90<fast", ["threshold 'fast'", "200ms"]),
    ("ttft_p90<-1", "ttft_p90<-1", ["positive number of seconds"]),
    ("ttft_p90<0.2,,itl_mean<0.1", "ttft_p90<0.2,,itl_mean<0.1", ["empty SLO"]),
    ("ttft_p90<0.2,ttft_p90<0.3", "ttft_p90<0.3", ["second SLO on ttft_p90"]),
    ("", "", ["no SLO given"]),
])
def test_parse_slos_errors_name_the_token_and_what_is_expected(text, token, words):
    with pytest.raises(PlanSpecError) as info:
        parse_slos(text)
    msg = str(info.value)
    assert msg.startswith("--slo: ") and repr(token) in msg and "(expected " in msg
    for w in words:
        assert w in msg


def test_parse_options_is_the_product_of_the_axes():
    opts = parse_options(["tp=1,2", "hardware=H100,a100;max_num_batched_tokens=2048,8192"])
    assert len(opts) == 8
    assert opts[0] == {"tp": 1, "hardware": "H100-SXM", "max_num_batched_tokens": 2048}
    assert opts[-1] == {"tp": 2, "hardware": "A100-SXM-80GB", "max_num_batched_tokens": 8192}
    assert parse_options([]) == [{}]
    assert parse_options(["enable_prefix_caching=true,false"]) == [
        {"enable_prefix_caching": True}, {"enable_prefix_caching": False}]
    assert parse_options(["generation_config=auto,vllm"]) == [
        {"generation_config": "auto"}, {"generation_config": "vllm"}]


@pytest.mark.parametrize("axes, token, words", [
    (["tpp=1,2"], "tpp=1,2", ["unknown setting 'tpp'", "max_num_batched_tokens"]),
    (["tp=1,two"], "tp=1,two", ["value 'two' of tp", "integers >= 1"]),
    (["tp=0"], "tp=0", ["integer >= 1"]),
    (["hardware=H100,B300"], "hardware=H100,B300", ["unknown GPU 'B300'", "H100-SXM"]),
    (["tp"], "tp", ["no '='"]),
    (["tp=1,"], "tp=1,", ["empty value"]),
    (["tp=1", "tp=2"], "tp=2", ["given twice"]),
    (["gpu_memory_utilization=1.5"], "gpu_memory_utilization=1.5", ["(0, 1]"]),
    (["generation_config=model"], "generation_config=model", ["'model'", "auto or vllm"]),
])
def test_parse_options_errors_name_the_token_and_what_is_expected(axes, token, words):
    with pytest.raises(PlanSpecError) as info:
        parse_options(axes)
    msg = str(info.value)
    assert msg.startswith("--options: ") and repr(token) in msg and "(expected " in msg
    for w in words:
        assert w in msg


# ---------------------------------------------------------------------------- search

@pytest.mark.parametrize("true_cap", [0.9, 7.3, 55.0])
def test_find_capacity_brackets_and_bisects_to_the_tolerance(true_cap):
    seen = []

    def evaluate(rate):
        seen.append(rate)
        return 1.0 if rate <= true_cap else 0.0

    s = SearchSettings(prob=0.9, duration_s=60, start_rate=5.0, rel_tol=0.02, max_evals=14)
    cap, status, (lo, hi) = find_capacity(evaluate, s)
    assert status == "converged"
    assert cap == lo <= true_cap < hi <= lo * 1.02
    assert len(seen) <= 12        # a dense grid at 2% resolution would need ~100 rates


def test_find_capacity_reports_its_bounds():
    s = SearchSettings(prob=0.9, duration_s=10, start_rate=4.0, max_rate=20.0, max_evals=20)
    assert find_capacity(lambda r: 1.0, s)[:2] == (20.0, "above_max_rate")
    cap, status, _ = find_capacity(lambda r: 0.0, s)
    assert cap is None and status == "below_min_rate"
    assert s.bounds() == (0.5, 20.0)   # 5 requests over the duration at least
    few = SearchSettings(prob=0.9, duration_s=10, start_rate=4.0, max_evals=3)
    cap, status, (lo, hi) = find_capacity(lambda r: float(r < 9.9), few)
    assert status == "max_evaluations" and cap == lo == 8.0 and hi == 16.0


def test_request_stream_uses_the_same_requests_at_every_rate(tiny_posterior):
    from bayesblis.simulate.scenario import Scenario

    sc = Scenario.from_yaml(tiny_posterior[1])
    stream = RequestStream(sc, seed=3)
    slow, fast = stream.workload(5.0, 20.0), stream.workload(10.0, 20.0)
    n = len(slow)
    assert 60 < n < 140 and 150 < len(fast) < 260
    np.testing.assert_allclose(fast.arrival_s[:n], slow.arrival_s / 2)
    for col in ("prompt_tokens", "output_tokens", "prefix_group", "prefix_tokens"):
        np.testing.assert_array_equal(getattr(fast, col)[:n], getattr(slow, col))
    assert fast.arrival_s.max() < 20.0 and set(fast.prefix_group) <= set(range(8))
    again = RequestStream(sc, seed=3).workload(10.0, 20.0)
    np.testing.assert_array_equal(again.output_tokens, fast.output_tokens)


def test_request_stream_of_inference_perf_profiles_and_replays():
    from bayesblis.plan import default_duration_s, default_start_rate
    from bayesblis.simulate.scenario import load_scenario

    folder = Path(__file__).resolve().parents[2] / "bayesblis/data/samples/inference-perf-2stage"
    profile = load_scenario(folder, hardware="H100")
    st = RequestStream(profile)
    assert (st.kind, st.arrival) == ("shared_prefix", "normalized_exponential")
    w = st.workload(4.0, 500.0)
    assert abs(len(w) - 2000) < 150                       # exponential gaps at 1 / rate
    np.testing.assert_array_equal(w.prefix_group, np.arange(len(w)) % 100)   # 10 x 10 prompts
    assert set(zip(w.prompt_tokens, w.output_tokens)) == set(
        zip(st.prompts.prompt_tokens, st.prompts.output_tokens))
    assert (default_duration_s(profile), default_start_rate(profile)) == (150.0, 2.0)
    replay = load_scenario(folder, hardware="H100", replay=True)
    st = RequestStream(replay, seed=1)
    assert (st.kind, st.arrival) == ("replay", "poisson")
    w = st.workload(4.0, 10.0)
    recorded = replay.workload
    ok = ~recorded.has_error
    pairs = set(zip(recorded.prompt_tokens[ok], recorded.output_tokens[ok]))
    assert set(zip(w.prompt_tokens, w.output_tokens)) <= pairs   # resampled recorded requests
    assert 20 < len(w) < 65


# ---------------------------------------------------------------------------- real plans

@pytest.fixture(scope="module")
def sweep(tiny_posterior):
    """A serial plan over tp=1,2 of the held-out scenario."""
    from bayesblis.simulate.scenario import Scenario

    post_path, scen_path, posterior = tiny_posterior
    sc = Scenario.from_yaml(scen_path)
    search = SearchSettings(prob=0.8, duration_s=DURATION_S, start_rate=10.0, seed=1)
    slos = parse_slos(SLO)
    evals = []
    plan = run_plan(sc, posterior, slos, parse_options(["tp=1,2"]), search=search,
                    n_draws=DRAWS, posterior_source=str(post_path),
                    on_eval=lambda label, rec: evals.append((label, rec["rate_per_s"])))
    return sc, posterior, slos, search, plan, evals


def test_option_sweep_finds_a_capacity_per_option(sweep):
    _, _, _, _, plan, evals = sweep
    tp1, tp2 = plan["options"]
    assert (tp1["label"], tp1["gpus"], tp2["label"], tp2["gpus"]) == ("tp=1", 1, "tp=2", 2)
    assert tp2["deployment"]["tp"] == 2 and tp2["coefficients"]["seen_config"] is False
    for o in (tp1, tp2):
        assert o["search"]["status"] == "converged", o["search"]
        assert 4 <= o["search"]["n_evaluations"] <= 12
        assert o["capacity_rate_per_s"] > 0
        lo, hi = o["search"]["bracket_rate_per_s"]
        assert lo == o["capacity_rate_per_s"] and hi / lo - 1 <= 0.02
        at = o["at_capacity"]
        assert at["p_all"] >= 0.8 and o["prob_at_capacity"] == at["p_all"]
        assert len(at["per_draw"]["ttft_p90_s"]) == DRAWS
        assert o["tokens_per_s_per_gpu"] == pytest.approx(
            o["capacity_rate_per_s"] * at["mean_output_tokens"] / o["gpus"])
    # two GPUs per replica serve more requests than one
    assert tp2["capacity_rate_per_s"] > tp1["capacity_rate_per_s"]
    assert len(evals) == plan["metadata"]["n_evaluations"]
    assert plan["best_option"] in ("tp=1", "tp=2")


def test_probability_curve_is_monotone_and_capacity_is_the_crossing(sweep):
    sc, posterior, slos, search, plan, _ = sweep
    opt = plan["options"][0]
    cap = opt["capacity_rate_per_s"]
    # the evaluated rates: P never rises with the rate by more than sampling noise, and the
    # search's last failing rate fails. Noise: near the capacity the bisection's rates are
    # 2% apart, and a draw whose SLO margin is within the simulation's own noise can flip
    # either way between them (common random numbers correlate, not equate, the runs);
    # two of ten draws is the binomial sd (0.16) at P = 0.5, rounded up to whole draws.
    curve = opt["evaluations"]
    rates = [e["rate_per_s"] for e in curve]
    assert rates == sorted(rates)
    p = np.array([e["p_all"] for e in curve])
    assert np.all(np.diff(p) <= 2.0 / DRAWS + 1e-12), p
    # the search goes down until a rate passes (P >= prob) and up until one fails
    assert p[0] >= search.prob and p[-1] < search.prob
    for e in curve:
        assert set(e["p_slo"]) == {s.name for s in slos}
        assert e["p_all"] <= min(e["p_slo"].values())
    # the same simulations on a fresh curve reproduce the search's evaluations exactly:
    # P(capacity) >= prob > P(highest rate tried). (Not "P(1.1 x capacity) < prob": with 10
    # draws the curve can stay within a draw of prob for 15% above the crossing.)
    task = option_tasks(sc, posterior, [{}], slos, search, n_draws=DRAWS)[0]
    top = curve[-1]
    at_cap, above = probability_curve(task, [cap, top["rate_per_s"]])
    assert at_cap["p_all"] == opt["prob_at_capacity"] >= 0.8
    assert above["p_all"] == top["p_all"] < 0.8
    assert above["metrics"]["ttft_p90_s"]["median"] > at_cap["metrics"]["ttft_p90_s"]["median"]


def test_saturated_share_is_the_cliff_as_a_probability(sweep):
    """Per rate, the share of draws whose queue keeps growing: none far below capacity,
    all far above it; recorded at every evaluated rate and at capacity, and printed."""
    from bayesblis.plan import format_plan

    sc, posterior, slos, search, plan, _ = sweep
    opt = plan["options"][0]
    assert all(0 <= e["saturated_share"] <= 1 for e in opt["evaluations"])
    at = opt["at_capacity"]
    assert len(at["saturated_per_draw"]) == DRAWS
    assert at["saturated_share"] == pytest.approx(np.mean(at["saturated_per_draw"]))
    task = option_tasks(sc, posterior, [{}], slos, search, n_draws=DRAWS)[0]
    cap = opt["capacity_rate_per_s"]
    # far below: an eighth of the capacity (at a quarter, the slowest of this rough ADVI
    # posterior's ten draws, 2x the others' step time, can be near its own capacity)
    low, high = probability_curve(task, [cap / 8, cap * 8])
    assert low["saturated_share"] == 0.0 and high["saturated_share"] == 1.0
    text = format_plan(plan)
    assert "P(saturated)" in text and "ttft_p90_s median (mean)" in text
    assert text.count("probability curve") == len(plan["options"])
    # the held-out configuration serves Qwen2.5-7B-Instruct, whose defaults set a penalty
    assert sc.caveats() and plan["metadata"]["caveats"] == sc.caveats()
    assert f"caveat: {sc.caveats()[0]}" in text
    quiet = {**plan, "metadata": {**plan["metadata"], "caveats": []}}
    assert "caveat:" not in format_plan(quiet)


def test_dask_local_cluster_gives_the_serial_results(sweep):
    pytest.importorskip("dask.distributed")
    sc, posterior, slos, search, plan, _ = sweep
    remote = run_plan(sc, posterior, slos, parse_options(["tp=1,2"]), search=search,
                      n_draws=DRAWS, posterior_source=plan["metadata"]["posterior"],
                      scheduler="local")
    assert remote["metadata"]["scheduler"] == "local"
    assert json.dumps(remote["options"]) == json.dumps(plan["options"])


def test_per_draw_metrics_are_what_run_scenario_summarises(tiny_posterior):
    from bayesblis.coefficients import posterior_draws
    from bayesblis.simulate.engine import deployment_constants
    from bayesblis.simulate.results import (METRICS, Draws, per_draw_metrics, run_scenario,
                                            summarize)
    from bayesblis.simulate.scenario import Scenario

    _, scen_path, posterior = tiny_posterior
    sc = Scenario.from_yaml(scen_path)
    dep = sc.deployment()
    d = Draws.from_coefficient_draws(posterior_draws(posterior, dep, 4, seed=2), source="p")
    result = run_scenario(sc, d, seed=5, max_duration_s=6.0, deployment=dep)
    per = per_draw_metrics(sc.build_workload(6.0), sc.engine_config(dep), deployment_constants(dep),
                           d, seed=5)
    for m in METRICS:
        assert per[m].shape == (4,)
        assert summarize(per[m]) == result["summary"][m]
    assert per["n_dropped"].max() == result["counts"]["n_dropped"]


def test_unseen_hardware_needs_allow_unseen(tiny_posterior):
    from bayesblis.errors import UnseenLevelError
    from bayesblis.simulate.scenario import Scenario

    _, scen_path, posterior = tiny_posterior
    sc = Scenario.from_yaml(scen_path)
    s = SearchSettings(duration_s=DURATION_S, start_rate=5.0)
    with pytest.raises(UnseenLevelError, match=r"option hardware=L40S: .*hardware=L40S.*--allow-unseen"):
        option_tasks(sc, posterior, parse_options(["hardware=L40S"]), parse_slos(SLO), s, n_draws=4)
    task = option_tasks(sc, posterior, parse_options(["hardware=L40S"]), parse_slos(SLO), s,
                        n_draws=4, allow_unseen=True)[0]
    assert task["coefficients"]["unseen_levels"] == {"hardware": "L40S"}
    # the scenario's KV capacity was for H100: a new GPU re-derives it
    assert task["scenario"].vllm["kv_blocks_total"] is None


# ---------------------------------------------------------------------------- CLI

def test_cli_writes_a_plan_valid_against_the_schema(tiny_posterior, tmp_path):
    from bayesblis.cli import cli

    post_path, scen_path, _ = tiny_posterior
    out = tmp_path / "PLAN.json"
    res = CliRunner().invoke(cli, [
        "plan", str(scen_path), "--posterior", str(post_path), "--slo", SLO, "--prob", "0.75",
        "--options", "max_num_batched_tokens=512,8192", "max_num_seqs=64",
        "--draws", "6", "--duration-s", "6", "--start-rate", "12", "--curve", "0.5,2",
        "--no-progress",
        "--out", str(out)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    for text in ("option", "GPUs", "capacity req/s", "tokens/s/GPU", "P at capacity",
                 "saturated", "P(saturated)", "evaluations",
                 "max_num_batched_tokens=512,max_num_seqs=64", f"wrote {out}"):
        assert text in res.output
    plan = json.loads(out.read_text())
    assert [o["settings"] for o in plan["options"]] == [
        {"max_num_batched_tokens": 512, "max_num_seqs": 64},
        {"max_num_batched_tokens": 8192, "max_num_seqs": 64}]
    assert plan["options"][0]["engine"]["max_num_batched_tokens"] == 512
    assert plan["prob"] == 0.75 and plan["metadata"]["draws"] == 6
    for o in plan["options"]:
        curve = [e for e in o["evaluations"] if e["phase"] == "curve"]
        if o["capacity_rate_per_s"] is not None:  # a factor whose rate was searched is not redone
            cap = o["capacity_rate_per_s"]
            searched = [e["rate_per_s"] for e in o["evaluations"] if e["phase"] == "search"]
            expected = [f for f in (0.5, 2.0) if all(abs(cap * f / r - 1) > 1e-3 for r in searched)]
            assert sorted(e["rate_per_s"] / cap for e in curve) == pytest.approx(expected)
        assert o["search"]["n_curve_evaluations"] == len(curve)
        assert o["search"]["n_simulations"] == 6 * len(o["evaluations"])
    schema = json.loads(SCHEMA.read_text())
    import jsonschema
    jsonschema.validate(plan, schema)


@pytest.mark.parametrize("args, words", [
    (["--slo", "ttft_p95<0.2"], ["Invalid value for '--slo'", "'ttft_p95<0.2'", "expected one of"]),
    (["--slo", SLO, "--options", "tp=1,x"], ["Invalid value for '--options'", "'tp=1,x'"]),
    (["--slo", SLO, "stray"], ["unexpected argument 'stray'", "KEY=V1,V2"]),
    (["--slo", SLO, "--scheduler", "nowhere"], ["'--scheduler'", "tcp://host:port"]),
    (["--slo", SLO, "--curve", "0.5,x"], ["'--curve'", "'x'", "positive factor"]),
])
def test_cli_parse_errors_are_usage_errors(tiny_posterior, tmp_path, args, words):
    from bayesblis.cli import cli

    post_path, scen_path, _ = tiny_posterior
    res = CliRunner().invoke(cli, ["plan", str(scen_path), "--posterior", str(post_path), *args,
                                   "--out", str(tmp_path / "p.json")])
    assert res.exit_code == 2, res.output
    for w in words:
        assert w in res.output
    assert not (tmp_path / "p.json").exists()



@pytest.mark.parametrize("args", [["--start-rate", "nan"], ["--duration-s", "inf"],
                                  ["--prob", "nan"], ["--rel-tol", "nan"]])
def test_cli_refuses_nan_and_infinite_numbers_before_reading(tmp_path, args):
    """NaN passes a range check by comparison: it and infinity are usage errors naming the
    option (a NaN start rate was a traceback, an infinite duration never finished)."""
    from bayesblis.cli import cli

    scenario, posterior = tmp_path / "s.yaml", tmp_path / "p.nc"
    scenario.write_text("not read: the options are checked first\n")
    posterior.write_text("not read\n")
    res = CliRunner().invoke(cli, ["plan", str(scenario), "--posterior", str(posterior), "--slo", SLO,
                                   *args, "--out", str(tmp_path / "p.json")])
    assert res.exit_code == 2, res.output
    assert f"Invalid value for '{args[0]}'" in res.output and "not a finite number" in res.output
    assert not (tmp_path / "p.json").exists()


def test_cli_refuses_an_infinite_curve_factor_before_reading(tmp_path):
    """An infinite --curve factor is a usage error (it simulated an infinite rate forever)."""
    from bayesblis.cli import cli

    scenario, posterior = tmp_path / "s.yaml", tmp_path / "p.nc"
    scenario.write_text("not read: the options are checked first\n")
    posterior.write_text("not read\n")
    res = CliRunner().invoke(cli, ["plan", str(scenario), "--posterior", str(posterior), "--slo", SLO,
                                   "--curve", "0.5,inf", "--out", str(tmp_path / "p.json")])
    assert res.exit_code == 2, res.output
    assert "'--curve'" in res.output and "'inf'" in res.output and "positive factor" in res.output
    assert not (tmp_path / "p.json").exists()

def test_discrepancy_turns_each_draw_into_a_pass_probability(sweep):
    """With a simulator discrepancy a draw passes an SLO with probability Phi((log threshold
    - log value) / sd), all SLOs with the smallest of those; the capacity at a stated
    probability falls (a draw must now clear its SLOs by a margin)."""
    from scipy.stats import norm

    from bayesblis.discrepancy import Discrepancy
    from bayesblis.plan import format_plan
    from bayesblis.simulate.results import METRICS

    sc, posterior, slos, search, plan, _ = sweep
    base = plan["options"][0]
    cap = base["capacity_rate_per_s"]
    disc = Discrepancy(sd={m: 0.3 for m in METRICS if m != "throughput_tokens_per_s"},
                       source="test", holdout="experiment")
    task = option_tasks(sc, posterior, [{}], slos, search, n_draws=DRAWS, discrepancy=disc)[0]
    rec = probability_curve(task, [cap])[0]
    values = base["at_capacity"]["per_draw"]          # the same simulations, posterior-only
    probs = {s.name: norm.cdf((np.log(s.threshold_s) - np.log(np.array(values[s.result_metric],
                                                                       float))) / 0.3)
             for s in slos}
    for name, p in probs.items():
        assert rec["p_slo"][name] == pytest.approx(p.mean())
    assert rec["p_all"] == pytest.approx(np.minimum.reduce(list(probs.values())).mean())
    m = rec["metrics"]["ttft_p90_s"]
    assert m["lo"] < m["posterior_lo"] and m["hi"] > m["posterior_hi"]
    widened = run_plan(sc, posterior, slos, [{}], search=search, n_draws=DRAWS,
                       posterior_source="p", discrepancy=disc)
    assert widened["metadata"]["discrepancy"]["sd"]["ttft_p90_s"] == 0.3
    assert "includes the simulator discrepancy, test" in format_plan(widened)
    assert "posterior draws only" in format_plan(plan)
    assert widened["options"][0]["capacity_rate_per_s"] < cap


def test_a_configuration_never_fitted_gets_its_draws_spread_scaled(sweep):
    """The held-out scenario's configuration was never fitted (its GPU, family and arch
    were): with a discrepancy that carries a spread scale, each draw's metric is pulled
    towards the draws' median (``median x (x / median)^scale``) and passes 0/1, instead of
    the additive sd."""
    from bayesblis.discrepancy import NEW_CONFIGURATION, Discrepancy, scaled_spread
    from bayesblis.plan import format_plan
    from bayesblis.simulate.results import METRICS

    sc, posterior, slos, search, plan, _ = sweep
    base = plan["options"][0]
    cap = base["capacity_rate_per_s"]
    calibrated = [m for m in METRICS if m != "throughput_tokens_per_s"]
    disc = Discrepancy(sd={m: 0.3 for m in calibrated}, scale={m: 0.25 for m in calibrated},
                       source="test", holdout="experiment", scale_source="test, model")
    task = option_tasks(sc, posterior, [{}], slos, search, n_draws=DRAWS, discrepancy=disc)[0]
    assert task["coefficients"]["seen_config"] is False
    assert task["coefficients"]["discrepancy_rule"] == NEW_CONFIGURATION
    rec = probability_curve(task, [cap])[0]
    values = base["at_capacity"]["per_draw"]          # the same simulations, posterior-only
    for s in slos:
        scaled = scaled_spread(np.array(values[s.result_metric], float), 0.25)
        assert rec["p_slo"][s.name] == pytest.approx(np.mean(scaled < s.threshold_s))
    m = rec["metrics"]["itl_mean_s"]
    assert m["posterior_lo"] <= m["lo"] <= m["median"] <= m["hi"] <= m["posterior_hi"]
    scaled_plan = run_plan(sc, posterior, slos, [{}], search=search, n_draws=DRAWS,
                           posterior_source="p", discrepancy=disc)
    assert "never fitted" in format_plan(scaled_plan)


def test_an_option_on_a_gpu_never_traced_is_scaled_and_widened_by_its_own_sd(sweep):
    """H200 is in kernel-db but not in the tiny fit: its option gets the never-fitted scale
    plus the GPU's own sd (`Discrepancy.for_configuration`), and the plan says so."""
    from bayesblis.catalog.kernel_spread import HARDWARE_SCALE
    from bayesblis.discrepancy import NEW_GPU, Discrepancy
    from bayesblis.plan import format_plan, new_gpu_options

    sc, posterior, slos, search, _, _ = sweep
    disc = Discrepancy(sd={"itl_mean_s": 0.02}, scale={"itl_mean_s": 0.25}, source="test",
                       holdout="experiment", scale_source="test, model")
    task = option_tasks(sc, posterior, [{"hardware": "H200"}], slos, search, n_draws=DRAWS,
                        allow_unseen=True, discrepancy=disc)[0]
    assert task["coefficients"]["discrepancy_rule"] == NEW_GPU
    plan = run_plan(sc, posterior, slos, [{"hardware": "H200"}], search=search, n_draws=DRAWS,
                    allow_unseen=True, posterior_source="p", discrepancy=disc)
    assert new_gpu_options(plan) == [plan["options"][0]["label"]]
    assert f"log-scale sd of {HARDWARE_SCALE:g}" in format_plan(plan)
    assert any("no trace of H200" in text for text in plan["metadata"]["caveats"])


def test_an_option_on_a_gpu_kernel_db_lacks_takes_kernel_db_spread_across_gpus(sweep):
    """A40 is in neither the tiny fit nor kernel-db: its option is scaled and widened by the
    GPU sd with kernel-db's spread of weight streaming across GPUs, and the plan says so."""
    from bayesblis.catalog.kernel_spread import unmeasured_metric_sd
    from bayesblis.discrepancy import UNMEASURED_GPU, Discrepancy
    from bayesblis.plan import format_plan, unmeasured_gpu_options

    sc, posterior, slos, search, _, _ = sweep
    disc = Discrepancy(sd={"itl_mean_s": 0.02}, scale={"itl_mean_s": 0.25}, source="test",
                       holdout="experiment", scale_source="test, model")
    plan = run_plan(sc, posterior, slos, [{"hardware": "A40"}], search=search, n_draws=DRAWS,
                    allow_unseen=True, posterior_source="p", discrepancy=disc)
    assert plan["options"][0]["coefficients"]["discrepancy_rule"] == UNMEASURED_GPU
    assert unmeasured_gpu_options(plan) == [plan["options"][0]["label"]]
    assert f"log-scale sd of {unmeasured_metric_sd():.2g}" in format_plan(plan)


def test_beyond_its_fitted_load_a_fitted_configuration_is_planned_less_surely(sweep):
    """A fitted configuration (qwen2.5-7b on the A100 at TP 2 in the tiny fit) carries the
    load its windows held; at a rate beyond it the SLO probabilities and intervals allow for
    the extrapolation (`Discrepancy.slope`), below it they do not."""
    from bayesblis.discrepancy import Discrepancy
    from bayesblis.plan import extrapolated_options
    from bayesblis.simulate.results import METRICS

    sc, posterior, slos, search, _, _ = sweep
    row = posterior.configs[posterior.configs["model"] == "qwen2.5-7b"].iloc[0]
    fitted_option = {"hardware": str(row["hardware"]), "tp": int(row["tp"])}
    sd = {m: 0.03 for m in METRICS if m != "throughput_tokens_per_s"}
    tasks = {}
    for name, slope in (("flat", {}), ("sloped", {m: 0.5 for m in sd})):
        disc = Discrepancy(sd=sd, slope=slope, source="test", holdout="experiment")
        tasks[name] = option_tasks(sc, posterior, [fitted_option], slos, search, n_draws=DRAWS,
                                   discrepancy=disc)[0]
    coef = tasks["sloped"]["coefficients"]
    assert coef["seen_config"] and coef["fitted_load"] > 0
    fitted = coef["fitted_load"]
    low, high = 0.2, 40.0
    flat = probability_curve(tasks["flat"], [low, high])
    sloped = probability_curve(tasks["sloped"], [low, high])
    assert flat[0]["in_flight"] < fitted and sloped[0]["load_excess"] == 0.0
    assert sloped[0]["metrics"] == flat[0]["metrics"] and sloped[0]["p_all"] == flat[0]["p_all"]
    assert sloped[1]["in_flight"] > fitted and sloped[1]["load_excess"] > 0
    wide, narrow = sloped[1]["metrics"]["e2e_mean_s"], flat[1]["metrics"]["e2e_mean_s"]
    assert wide["median"] == narrow["median"] and wide["hi"] - wide["lo"] > narrow["hi"] - narrow["lo"]
    plan = {"options": [{"label": "a100", "at_capacity": {"in_flight": 2 * fitted,
                                                          "load_excess": np.log(2.0)}},
                        {"label": "h100", "at_capacity": {"load_excess": 0.0}}]}
    assert extrapolated_options(plan) == [f"a100: {2 * fitted:.0f} in flight, 2.0x the fitted load"]


def test_caveats_name_the_options_they_apply_to():
    from bayesblis.plan import apply_option, option_caveats
    from bayesblis.simulate.scenario import Scenario

    sc = Scenario.from_dict({"model": "Qwen/Qwen2.5-7B-Instruct", "hardware": "H100-SXM",
                             "workload": {"stages": [{"rate": 1, "duration": 5}],
                                          "prompt_tokens": 100, "output_tokens": 10}})

    def tasks(axes):
        return [{"settings": o, "caveats": apply_option(sc, o).caveats()}
                for o in parse_options(axes)]

    (text,) = option_caveats(tasks(["generation_config=auto,vllm"]))
    assert text.startswith("options generation_config=auto: the model's generation_config.json")
    (text,) = option_caveats(tasks(["tp=1,2"]))
    assert text.startswith("the model's generation_config.json sets repetition_penalty 1.05")
