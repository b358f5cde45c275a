"""The check on configurations never traced (`bayesblis validate --external`), on a tiny real
posterior: a run folder in the layout of h100-new-models, predicted from its profile."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from bayesblis.errors import InputError
from bayesblis.external_check import (METRICS, expand_runs, format_table, read_run, run_check,
                                      score)


def write_run(folder, measured_ms: dict | None = None):
    """exp-config + profile (2 short stages, inference-perf shared-prefix data) [+ measured]."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "exp-config.yaml").write_text(
        'model: "Qwen/Qwen2.5-7B-Instruct"\ntensor_parallelism: 1\nmax_model_len: 4096\n'
        "max_num_batched_tokens: 8192\nmax_num_seqs: 128\nkv_blocks_total_gpu: 20000\n")
    profile = {"data": {"type": "shared_prefix", "shared_prefix": {
        "num_unique_system_prompts": 3, "num_users_per_system_prompt": 2, "system_prompt_len": 60,
        "question_len": 200, "output_len": 40, "enable_multi_turn_chat": True}},
        "load": {"type": "constant", "stages": [{"rate": 2, "duration": 30},
                                                {"rate": 4, "duration": 30}]}}
    (folder / "profile.yaml").write_text(json.dumps(profile))
    if measured_ms is not None:
        (folder / "measured.json").write_text(json.dumps({"hardware": "H100", "measured": measured_ms}))
    return folder


def ms_block(values_s: dict, factor: float) -> dict:
    return {m[:-2] + "_ms": values_s[m] * 1e3 * factor for m in METRICS}


def test_scores_are_the_errors_of_the_predictive_median(tiny_posterior, tmp_path):
    post_path = tiny_posterior[0]
    placeholder = {f"stage_{s}": {m[:-2] + "_ms": v for m, v in zip(
        METRICS, (1000.0, 30.0, 24.0, 1100.0, 40.0))} for s in (0, 1)}
    run = read_run(write_run(tmp_path / "run", placeholder))
    assert run.hardware == "H100-SXM" and [r["stage"] for r in run.measured] == [0, 1]
    first = run_check([run.folder], post_path, n_draws=6, seed=3)
    medians = [{m: first["records"][s][f"pred_{m}"] for m in METRICS} for s in (0, 1)]
    # measured 10% above the prediction at stage 0, 5% below at stage 1
    write_run(tmp_path / "run", {"stage_0": ms_block(medians[0], 1.10),
                                 "stage_1": ms_block(medians[1], 0.95)})
    report = run_check([tmp_path / "run"], post_path, n_draws=6, seed=3)
    r0, r1 = report["records"]
    for m in METRICS:
        assert r0[f"signed_pct_error_{m}"] == pytest.approx(100 * (1 / 1.10 - 1), rel=1e-6)
        assert r1[f"signed_pct_error_{m}"] == pytest.approx(100 * (1 / 0.95 - 1), rel=1e-6)
        assert r0[f"abs_pct_error_{m}"] == pytest.approx(abs(r0[f"signed_pct_error_{m}"]))
        lo, hi = r0[f"pred_{m}_lo"], r0[f"pred_{m}_hi"]
        assert r0[f"covered_{m}"] == (lo <= r0[f"measured_{m}"] <= hi)
    overall = report["summary"]["overall"]["e2e_mean_s"]
    assert overall["median_signed_pct_error"] == pytest.approx(
        (r0["signed_pct_error_e2e_mean_s"] + r1["signed_pct_error_e2e_mean_s"]) / 2)
    assert list(report["summary"]["by_model"]) == ["Qwen2.5-7B-Instruct"]
    wl = report["runs"][0]["workload"]
    assert [w["n_requests"] for w in wl] == [60, 120]          # rate x duration per stage
    # 100 prompts sent in turn: the first 100 requests miss, the next 80 hit (all but a block)
    assert wl[0]["cache_hit_share"] == 0 and 0.55 < wl[1]["cache_hit_share"] < 80 / 120
    assert "Qwen2.5-7B-Instruct" in format_table(report)
    # its published generation_config sets a repetition penalty: a caveat of the run
    assert "repetition_penalty 1.05" in report["runs"][0]["caveats"][0]


def test_itl_over_miscounted_outputs_is_scored_from_e2e():
    run = type("Run", (), {"name": "r", "label": "m", "measured": [
        {"stage": 0, "e2e_mean_s": 2.0, "ttft_mean_s": 0.05, "itl_mean_s": 0.0195 / 0.7,
         "e2e_p90_s": 2.1, "ttft_p90_s": 0.06}]})()
    stage = {m: {"median": 1.0, "mean": 1.0, "lo": 0.9, "hi": 1.1} for m in METRICS}
    stage["itl_mean_s"] = {"median": 0.0205, "mean": 0.0205, "lo": 0.018, "hi": 0.022}
    result = {"stages": [stage], "workload": [{"output_tokens": {"mean": 101.0}}]}
    rec = score(run, result)[0]
    assert "miscounted" in rec["itl_from_e2e"]
    assert rec["measured_itl_client_s"] == pytest.approx(0.0195 / 0.7)
    assert rec["measured_itl_mean_s"] == pytest.approx(1.95 / 100)   # (E2E - TTFT) / (101 - 1)
    assert rec["signed_pct_error_itl_mean_s"] == pytest.approx(100 * (0.0205 / 0.0195 - 1))
    assert rec["covered_itl_mean_s"] and "abs_pct_error_e2e_mean_s" in rec
    counted = dict(run.measured[0], itl_mean_s=0.0195)              # 101 tokens implied
    run.measured = [counted]
    rec = score(run, result)[0]
    assert "itl_from_e2e" not in rec and rec["measured_itl_mean_s"] == 0.0195


def test_bad_run_folders_say_what_is_wrong(tmp_path):
    bad = write_run(tmp_path / "bad", {"stage_0": {"e2e_mean_ms": 1.0}})
    with pytest.raises(InputError, match="stage_0"):
        read_run(bad)
    with pytest.raises(InputError, match="measured.json or requests.json"):
        read_run(write_run(tmp_path / "none"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no run folder"):
        expand_runs([tmp_path / "empty"])
    assert expand_runs([tmp_path]) == [tmp_path / "bad", tmp_path / "none"]


def test_validate_external_cli(tiny_posterior, tmp_path):
    from bayesblis.cli import cli

    stages = {f"stage_{s}": {m[:-2] + "_ms": v for m, v in zip(
        METRICS, (900.0, 30.0, 20.0, 950.0, 40.0))} for s in (0, 1)}
    write_run(tmp_path / "runs" / "a", stages)
    out = tmp_path / "report.json"
    plot = tmp_path / "check.png"
    res = CliRunner().invoke(cli, ["validate", "--external", str(tmp_path / "runs"), "--posterior",
                                    str(tiny_posterior[0]), "--draws", "4", "--no-discrepancy",
                                    "--out", str(out), "--plot", str(plot)])
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    assert report["report"] == "external_check" and len(report["records"]) == 2
    assert report["discrepancy"] is None and "wrote" in res.output
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    res = CliRunner().invoke(cli, ["validate", str(tmp_path / "runs"), "--plot", str(plot),
                                    "--out", str(out)])
    assert res.exit_code != 0 and "--plot" in res.output
    res = CliRunner().invoke(cli, ["validate", "--external", str(tmp_path / "runs"),
                                    "--out", str(out)])
    assert res.exit_code != 0 and "--posterior" in res.output


def test_external_check_figure_marks_stages_outside_their_interval():
    from bayesblis.report.figures import EXTERNAL_METRICS, fig_external_check

    def rec(stage, measured, covered):
        r = {"run": "r", "model": "m", "stage": stage}
        for m, _ in EXTERNAL_METRICS:
            r.update({f"measured_{m}": measured, f"pred_{m}": 1.0, f"pred_{m}_lo": 0.9,
                      f"pred_{m}_hi": 1.1, f"covered_{m}": covered})
        return r

    fig = fig_external_check({"records": [rec(0, 1.0, True), rec(1, 2.0, False)], "ci_prob": 0.9})
    axes = fig.get_axes()
    assert len(axes) == len(EXTERNAL_METRICS)
    dots = [line for line in axes[0].get_lines() if line.get_marker() == "o"]
    assert [line.get_xdata()[0] for line in dots] == pytest.approx([0.0, -50.0])
    assert [line.get_color() for line in dots] == ["C0", "C3"]
    assert [t.get_text() for t in axes[0].get_yticklabels()] == ["r · stage 0", "r · stage 1"]
