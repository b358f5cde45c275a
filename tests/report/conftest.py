"""Shared fixtures: one real demo posterior (tiny fleet, short fit) and its checks."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bayesblis.model.store import load_posterior

DEMO_ARGS = ["--fleet", "tiny", "--no-progress", "--method", "advi", "--draws", "50"]
"""ADVI: the demo's NUTS fit spends ~90 s (most of it compiling) even at 20 draws; ADVI
gives a real posterior of the same model in about half that. The NUTS diagnostics table is
tested on real diagnostics of these draws (test_report.py)."""


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory):
    """`bayesblis demo --fleet tiny` (ADVI): a real fitted posterior."""
    from click.testing import CliRunner

    from bayesblis.cli import cli

    reuse = os.environ.get("BAYESBLIS_REPORT_DEMO_DIR")  # developer shortcut: a finished demo
    if reuse and (Path(reuse) / "posterior.nc").is_file():
        return Path(reuse)
    out = tmp_path_factory.mktemp("demo")
    result = CliRunner().invoke(cli, ["demo", "--out", str(out), *DEMO_ARGS])
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert (out / "posterior.nc").is_file()
    return out


@pytest.fixture(scope="session")
def posterior_path(demo_dir):
    return demo_dir / "posterior.nc"


@pytest.fixture(scope="session")
def posterior(posterior_path):
    return load_posterior(posterior_path)


@pytest.fixture(scope="session")
def checked(posterior):
    """(CHECK document, PredictiveDraws) of the demo posterior."""
    from bayesblis.ppc import check_posterior

    return check_posterior(posterior, n_draws=100, seed=0, return_draws=True)


def plan_document(configs) -> dict:
    """A small PLAN.json in the shape `bayesblis plan` writes (data_specs/plan.md)."""
    def evals(cap):
        rows = []
        for rate in (0.5 * cap, 0.8 * cap, cap, 1.25 * cap, 2 * cap):
            p_ttft = max(0.0, min(1.0, 1.6 - 0.6 * rate / cap))
            p_itl = max(0.0, min(1.0, 2.0 - rate / cap))
            sat = max(0.0, min(1.0, rate / cap - 1.0))
            ttft = {"mean": 0.1 + 30 * sat, "median": 0.1 + sat, "lo": 0.05, "hi": 0.2 + 60 * sat,
                    "ci_prob": 0.9}
            itl = {"mean": 0.02, "median": 0.02, "lo": 0.015, "hi": 0.03, "ci_prob": 0.9}
            rows.append({"rate_per_s": rate, "n_requests": int(rate * 60),
                         "p_all": min(p_ttft, p_itl),
                         "p_slo": {"ttft_p90<=0.5": p_ttft, "itl_mean<=0.05": p_itl},
                         "saturated_share": sat,
                         "metrics": {"ttft_p90_s": ttft, "itl_mean_s": itl},
                         "dropped_fraction": 0.0, "busy_fraction": 0.5})
        return rows

    options = []
    for i, (cap, tp) in enumerate(((4.0, 1), (9.0, 2))):
        options.append({"label": f"tp={tp}", "settings": {"tp": tp}, "config": configs[i % len(configs)],
                        "gpus": tp, "capacity_rate_per_s": cap,
                        "capacity_per_gpu_rate_per_s": cap / tp, "tokens_per_s_per_gpu": 100 * cap / tp,
                        "prob_at_capacity": 0.9, "search": {"status": "converged", "n_evaluations": 5},
                        "evaluations": evals(cap), "at_capacity": {"saturated_share": 0.0}})
    return {"plan_version": "1", "slos": [
        {"name": "ttft_p90<=0.5", "metric": "ttft_p90", "result_metric": "ttft_p90_s", "op": "<=",
         "threshold_s": 0.5},
        {"name": "itl_mean<=0.05", "metric": "itl_mean", "result_metric": "itl_mean_s", "op": "<=",
         "threshold_s": 0.05}],
        "prob": 0.9, "options": options, "best_option": "tp=1",
        "metadata": {"draws": 20}}


@pytest.fixture(scope="session")
def plan_path(tmp_path_factory, posterior):
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    path.write_text(json.dumps(plan_document(list(posterior.configs["config"]))))
    return path
