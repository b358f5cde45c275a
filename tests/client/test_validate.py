"""`bayesblis validate` on a small slice of the real data (2 experiments, 60 s each)."""

import json
from pathlib import Path

import pytest

from bayesblis.io.inference_perf import correct_output_counts, read_inference_perf

REAL = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "real" / "h100-inference-perf"
pytestmark = pytest.mark.skipif(not REAL.exists(), reason="shared real data not present")


def test_ignore_eos_runs_generated_max_tokens_whatever_the_client_counted():
    exp = read_inference_perf(REAL / "20260217-155451-llama-2-7b-tp1-codegen")
    assert (exp.requests["max_tokens"] == 247).all()          # profile: output_len, ignore_eos
    fixed = correct_output_counts(exp.requests)
    ok = ~fixed["has_error"]
    assert (fixed.loc[ok, "output_tokens"] == 247).all() and not fixed["output_count_suspect"].any()
    # 2,336 of 9,000 requests were recorded far short (median ~50 tokens) in this run
    assert (fixed["output_tokens_recorded"] < 200).sum() > 2000
    assert (exp.requests["output_tokens"] == fixed["output_tokens_recorded"]).all()


def test_miscounted_outputs_without_ignore_eos_are_estimated_from_decode_time():
    exp = read_inference_perf(REAL / "20260217-155451-llama-2-7b-tp1-codegen")
    fixed = correct_output_counts(exp.requests.drop(columns="max_tokens"))
    assert fixed["output_count_suspect"].sum() > 2000
    sus = fixed[fixed["output_count_suspect"]]
    # flagged: decode time per recorded token >= 1.5 x the stage median; the implied counts
    # land near the workload's ~250 tokens (1st percentile 206 in this run)
    assert (sus["output_tokens"] >= 1.45 * sus["output_tokens_recorded"].clip(lower=1)).all()
    assert sus["output_tokens"].quantile(0.05) > 200


def test_correctly_counted_runs_are_left_alone():
    # CodeLlama-34B's requests all record their ~250 tokens: natural per-token spread
    # within a stage stays under the 1.5 x median threshold, so nothing is flagged
    exp = read_inference_perf(REAL / "20260218-150304-codellama-34b-tp2-general")
    assert not correct_output_counts(exp.requests.drop(columns="max_tokens"))["output_count_suspect"].any()


def test_validate_small_slice(tmp_path):
    from bayesblis.discrepancy import discrepancy_sd
    from bayesblis.validate import METRICS, format_table, run_validation

    dirs = [REAL / "20260217-155451-llama-2-7b-tp1-codegen",
            REAL / "20260217-231439-llama-2-7b-tp1-general"]
    # PyMC's own sampler (method="pymc", the suite's one test of it), 10 + 10 draws per
    # fold: the path, and an error well inside 50% (about 15% at most with these settings)
    report = run_validation(dirs, holdout="experiment", hardware="H100", n_draws=4,
                            fit_draws=10, fit_tune=10, chains=1, max_obs_per_run=80,
                            method="pymc", max_duration_s=60, target_accept=0.85,
                            echo=lambda *_: None)
    assert report["summary"]["holdout"] == "experiment"
    assert report["point_prediction"] == report["summary"]["point_prediction"] == "median"
    assert report["sampler"]["target_accept"] == 0.85
    stage0 = [r for r in report["records"] if r["stage"] == 0]
    assert len(stage0) == 2
    for rec in stage0:
        for metric in ("e2e_mean_s", "ttft_mean_s", "itl_mean_s", "e2e_p90_s"):
            assert rec[f"pred_{metric}_lo"] <= rec[f"pred_{metric}"] <= rec[f"pred_{metric}_hi"]
            # a fit on one other run of the same model lands within 50%
            assert rec[f"abs_pct_error_{metric}"] < 50
            assert rec[f"abs_pct_error_of_mean_{metric}"] == pytest.approx(
                abs(rec[f"pred_{metric}_mean"] / rec[f"measured_{metric}"] - 1) * 100)
        assert 0 <= rec["saturated_share"] <= 1
    # intervals widened by the discrepancy calibrated on the other fold's held-out errors
    # (posterior-only intervals), never on the fold's own
    for fold in report["folds"]:
        other = []
        for r in report["records"]:
            if r["fold"] != fold["fold"]:
                rec = {"overloaded": r["overloaded"]}
                for m in (m for m in METRICS.values() if f"pred_{m}" in r):  # simulated stages
                    rec.update({f"measured_{m}": r[f"measured_{m}"], f"pred_{m}": r[f"pred_{m}"],
                                f"pred_{m}_lo": r[f"model_pred_{m}_lo"],
                                f"pred_{m}_hi": r[f"model_pred_{m}_hi"]})
                other.append(rec)
        assert other and fold["discrepancy"] == discrepancy_sd(other, METRICS.values())
        assert fold["discrepancy"]["e2e_mean_s"]["n_stages"] >= 1
    for rec in stage0:
        assert rec["pred_e2e_mean_s_hi"] - rec["pred_e2e_mean_s_lo"] >= \
            rec["model_pred_e2e_mean_s_hi"] - rec["model_pred_e2e_mean_s_lo"]
    assert "coverage_90_posterior_only" in report["summary"]
    assert "median |error| e2e_mean" in format_table(report)
    json.dumps(report)
