"""`bayesblis demo` on the tiny fleet: every phase with a mock sampler (fast), and once
with a real (short) NUTS fit (slow)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from bayesblis.cli import cli


def _check_outputs(out):
    for rel in ("fleet/truth.json", "fleet/fleet.json", "dataset/manifest.json", "posterior.nc",
                "heldout_coefficients.json", "result.json"):
        assert (out / rel).is_file(), rel
    held = json.loads((out / "heldout_coefficients.json").read_text())
    assert held["config"] == "qwen2.5-7b|H100-SXM|tp1|ep1|bf16"
    assert held["seen_config"] is False
    from bayesblis.features.alpha import ALPHA_FEATURES
    from bayesblis.features.beta import BETA_FEATURES

    assert len(held["coefficients"]) == len(BETA_FEATURES) + len(ALPHA_FEATURES)
    for row in held["coefficients"]:
        assert row["lo"] <= row["mean"] <= row["hi"] or row["lo"] <= row["median"] <= row["hi"]
        assert row["covered"] == (row["lo"] <= row["true"] <= row["hi"])
    result = json.loads((out / "result.json").read_text())
    for m in ("ttft_mean_s", "itl_mean_s", "e2e_mean_s"):
        c = result["comparison"][m]
        assert c["true"] > 0 and c["lo"] <= c["mean"] <= c["hi"] and c["lo"] <= c["median"] <= c["hi"]
    assert set(result["demo"]["wall_s"]) >= {"generate", "ingest", "fit", "coefficients",
                                             "simulate", "total"}
    return held, result


def _mock_fit(self, method="nuts", progressbar=True, **overrides):
    """Prior draws stand in for the posterior (STYLE: fast tier uses a mock sampler)."""
    import arviz as az
    import pymc as pm

    with self.model:
        prior = pm.sample_prior_predictive(draws=40, random_seed=1, var_names=[
            v.name for v in self.model.free_RVs + self.model.deterministics if v.name != "mean_s"])
    self.idata = az.InferenceData(posterior=prior.prior)
    self.fit_info = {"method": "mock", "wall_s": 0.0, "n_obs": int(len(self.data.obs)),
                     "diagnostics": {"method": "mock", "passed": None,
                                     "note": "mock sampler (prior draws)"}}
    return self.idata


def test_demo_all_phases_with_mock_sampler(tmp_path, monkeypatch):
    pytest.importorskip("bayesblis.design")
    from bayesblis.model.hierarchy import LatencyModel

    monkeypatch.setattr(LatencyModel, "fit", _mock_fit)
    out = tmp_path / "demo"
    res = CliRunner().invoke(cli, ["demo", "--out", str(out), "--fleet", "tiny", "--draws", "10",
                                   "--sim-draws", "4", "--sim-duration-s", "10", "--no-progress"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert "coefficient" in res.output and "covered" in res.output and "summary" in res.output
    _check_outputs(out)
    # a second run into the same folder replaces the fleet
    res = CliRunner().invoke(cli, ["demo", "--out", str(out), "--fleet", "tiny", "--draws", "10",
                                   "--sim-draws", "4", "--sim-duration-s", "10", "--no-progress"])
    assert res.exit_code == 0, res.output


def test_demo_refuses_a_foreign_fleet_folder(tmp_path):
    (tmp_path / "fleet").mkdir()
    (tmp_path / "fleet" / "precious.txt").write_text("keep me")
    res = CliRunner().invoke(cli, ["demo", "--out", str(tmp_path), "--fleet", "tiny"])
    assert res.exit_code != 0
    assert (tmp_path / "fleet" / "precious.txt").is_file()


@pytest.mark.slow
def test_demo_tiny_real_fit(tmp_path):
    pytest.importorskip("bayesblis.design")
    out = tmp_path / "demo"
    res = CliRunner().invoke(cli, ["demo", "--out", str(out), "--fleet", "tiny", "--draws", "50",
                                   "--sim-draws", "6", "--no-progress"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    held, _ = _check_outputs(out)
    # population-level answer for an unseen configuration: most truths inside 90%
    assert held["coverage"]["covered"] >= 10


@pytest.mark.slow
def test_demo_at_its_defaults_passes_its_diagnostics(tmp_path):
    """Issue #20: the README's first command, `bayesblis demo` as shipped (demo fleet, default
    draws, Laplace-preconditioned NUTS), fits with r_hat <= 1.01, bulk and tail ESS >= 200
    and no divergences, and says so."""
    pytest.importorskip("bayesblis.design")
    from bayesblis.model.store import load_posterior

    out = tmp_path / "demo"
    res = CliRunner().invoke(cli, ["demo", "--out", str(out), "--no-progress"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    diag = load_posterior(out / "posterior.nc").fit_info["diagnostics"]
    assert diag["passed"], diag
    assert "diagnostics PASS" in res.output
    held, _ = _check_outputs(out)
    assert held["coverage"]["covered"] >= 14
