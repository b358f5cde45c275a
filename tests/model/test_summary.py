"""Fit method 'summary': per-configuration likelihood summaries, NUTS, PSIS correction."""

import subprocess
import sys
import warnings

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from bayesblis.errors import BayesBlisError
from bayesblis.model.data import ModelData
from bayesblis.model.hierarchy import LatencyModel
from bayesblis.model.summary import PARETO_K_MAX, _rows, psis_resample, summarise_config
from bayesblis.model.synthetic_steps import FEATURES, synthetic_data, truth_coverage


def test_summary_centre_and_curvature_describe_one_configuration_likelihood():
    """Rows drawn from known (beta, sigma, nu): the maximum lies within a few of its own
    standard errors of the truth, an all-zero feature is dropped, the curvature is positive
    definite and its standard errors match the spread of repeated experiments' maxima."""
    rng = np.random.default_rng(3)
    beta, sigma, nu = np.array([2.0, 0.8, 40.0]), 0.05, 6.0
    centres = []
    for _ in range(8):
        n = 4000
        X = np.column_stack([rng.exponential(2e-3, n), rng.uniform(1e-3, 3e-3, n),
                             np.zeros(n), np.full(n, 1e-6)])
        mean = X @ np.array([beta[0], beta[1], 1.0, beta[2]])
        y = np.abs(mean * (1 + sigma * rng.standard_t(nu, n)))
        none = np.zeros(0, np.int64)
        rows = _rows(X, y, np.ones(n), np.full(n, -1), np.zeros(n, np.int64), none, none)
        s = summarise_config("c", rows, n, n_beta=4, kinds=none, runs=none)
        assert s.beta.tolist() == [0, 1, 3] and s.alpha.tolist() == []
        assert np.all(np.linalg.eigvalsh(s.precision) > 0)
        centres.append(s.centre)
    se = np.sqrt(np.diag(np.linalg.inv(s.precision)))
    truth = np.array([*beta, np.log(sigma), np.log(nu - 2)])
    z = (np.mean(centres, axis=0) - truth) / (se / np.sqrt(len(centres)))
    assert np.all(np.abs(z) < 4), z
    spread = np.std(centres, axis=0, ddof=1)
    assert np.all((spread > 0.4 * se) & (spread < 2.0 * se)), (spread, se)


def _fleet():
    return synthetic_data(hardware=("H100-SXM", "A100-SXM-80GB"),
                          families=(("llama", "dense"), ("mixtral", "moe")), tps=(2,),
                          n_obs=3000, seed=2, match_model=True)


@pytest.fixture(scope="module")
def summary_fit():
    data, truth = _fleet()
    model = LatencyModel(sampler_config={"draws": 300, "tune": 300, "chains": 2, "seed": 1,
                                         "store_obs_means": False})
    model.build_model(data, likelihood="summary")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(method="summary", progressbar=False)
    return model, truth


def test_summary_fit_recovers_the_truth_and_reports_its_importance_check(summary_fit):
    model, truth = summary_fit
    info = model.fit_info
    diag = info["diagnostics"]
    assert info["method"] == "summary" and info["importance"]["n_draws"] == 600
    assert diag["pareto_k"] == info["importance"]["pareto_k"] < PARETO_K_MAX
    assert diag["importance_ess"] > 100
    assert not any("Pareto" in p for p in diag["problems"])
    post = model.idata.posterior
    assert post.sizes["chain"] == 2 and post.sizes["draw"] == 300
    assert "mean_s" not in post
    assert truth_coverage(post, truth) >= 0.75
    beta = post["beta"].mean(("chain", "draw"))
    for key, true_beta in truth.items():  # the data-rich coefficients within 5%
        for name in ("prefill_compute_s", "kv_traffic_s"):
            j = FEATURES.index(name)
            assert abs(float(beta.sel(config=key, feature=name)) / true_beta[j] - 1) < 0.05


@pytest.mark.slow
def test_summary_posterior_matches_nuts_on_every_row(summary_fit):
    """Same data, NUTS on every row: the coefficients' posteriors agree (means within half a
    NUTS sd, 90% widths within 20%)."""
    model, _ = summary_fit
    rows = LatencyModel(sampler_config={"draws": 500, "tune": 500, "chains": 2, "seed": 1,
                                        "store_obs_means": False, "nuts_backend": "jax"})
    rows.build_model(model.data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows.fit(progressbar=False)
    a = rows.idata.posterior["beta"].stack(s=("chain", "draw"))
    b = model.idata.posterior["beta"].stack(s=("chain", "draw"))
    sd = a.std("s")
    informed = sd / abs(a.mean("s")) < 0.05
    shift = (abs(a.mean("s") - b.mean("s")) / sd).where(informed)
    assert float(shift.max()) < 0.5
    width = lambda x: x.quantile(0.95, "s") - x.quantile(0.05, "s")  # noqa: E731
    ratio = (width(b) / width(a)).where(informed)
    assert 0.8 < float(ratio.median()) < 1.2


def _posterior(n_chain=2, n_draw=400, seed=0):
    rng = np.random.default_rng(seed)
    return xr.Dataset({"x": (("chain", "draw"), rng.standard_normal((n_chain, n_draw)))},
                      coords={"chain": np.arange(n_chain), "draw": np.arange(n_draw)})


def test_psis_keeps_equal_weights_and_flags_heavy_tailed_ones():
    post = _posterior()
    same, k, ess = psis_resample(post, np.zeros(800), seed=0)
    assert k == 0 and ess == pytest.approx(800)
    for c in range(2):  # equal weights: every draw kept once
        assert sorted(same["x"].values[c]) == sorted(post["x"].values[c])
    _, k, ess = psis_resample(post, 0.05 * np.random.default_rng(1).standard_normal(800), seed=0)
    assert k < 0.5 and ess > 790
    heavy = 4 * np.random.default_rng(1).standard_cauchy(800)
    resampled, k, ess = psis_resample(post, heavy, seed=0)
    assert k > PARETO_K_MAX and ess < 100
    assert resampled.sizes == post.sizes


def _mixed_table(seed=4):
    """The small fleet, each configuration traced in two runs (log factors +-0.04) and with
    request-level rows (kind 'arrival_to_queue': alpha_const only, 10% error of their own):
    every part of the summary (alpha, an approximate kind, repeated runs)."""
    data, truth = _fleet()
    rng = np.random.default_rng(seed)
    steps = data.obs.copy()
    steps["run"] = steps["config"] + np.where(np.arange(len(steps)) % 2, "/a", "/b")
    requests = []
    for key in data.configs["config"]:
        n = 1500
        run = np.where(np.arange(n) % 2, "/a", "/b")
        frame = pd.DataFrame({"config": key, "kind": "arrival_to_queue", "n_steps": 0,
                              "run": [key + r for r in run], "a_alpha_const_s": 1e-6})
        frame["y_s"] = np.abs(ALPHA_CONST_US * 1e-6 * (1 + 0.1 * rng.standard_t(6, n)))
        requests.append(frame)
    obs = pd.concat([steps, *requests], ignore_index=True).fillna(0.0)
    factor = np.exp(np.where(obs["run"].str.endswith("/a"), 0.04, -0.04))
    obs["y_s"] = obs["y_s"] * factor
    return ModelData(data.configs, obs), truth


ALPHA_CONST_US = 2500.0


def test_summary_of_request_level_rows_kinds_and_runs_recovers_them():
    data, _ = _mixed_table()
    model = LatencyModel(sampler_config={"draws": 300, "tune": 300, "chains": 2, "seed": 1,
                                         "store_obs_means": False})
    model.build_model(data, likelihood="summary")
    s = model.summaries[0]
    assert s.alpha.tolist() == [0] and len(s.kinds) == 1 and len(s.runs) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(method="summary", progressbar=False)
    assert model.fit_info["diagnostics"]["pareto_k"] < PARETO_K_MAX
    post = model.idata.posterior
    const = post["alpha"].sel(alpha_feature="alpha_const_s").mean(("chain", "draw"))
    assert np.allclose(const, ALPHA_CONST_US, rtol=0.03)
    assert float(post["sigma_kind"].mean()) == pytest.approx(0.1, rel=0.15)
    log_factor = (post["tau_run"] * post["z_run"]).mean(("chain", "draw"))
    signs = np.where(log_factor["run"].str.endswith("/a"), 1, -1)
    assert np.allclose(log_factor * signs, 0.04, atol=0.01)


def test_cli_fit_method_summary_refuses_rows_without_an_interior_maximum(tmp_path):
    """The bundled samples: one configuration, a few hundred rows of many kinds that do not
    pin its own parameters down. `bayesblis fit --method summary` says so, naming the
    configuration, exits 2 and writes nothing."""
    from click.testing import CliRunner

    from bayesblis.cli import cli

    r = CliRunner().invoke(cli, ["ingest", "--sample", "--quiet", "--out", str(tmp_path / "ds")])
    assert r.exit_code == 0, r.output
    out = subprocess.run([sys.executable, "-m", "bayesblis", "fit", str(tmp_path / "ds"), "--out",
                          str(tmp_path / "p.nc"), "--method", "summary", "--hardware", "H100",
                          "--quiet"], capture_output=True, text=True)
    assert out.returncode == 2, out.stderr
    assert "configuration 'llama-2-7b|H100-SXM|tp1|ep1|fp16'" in out.stderr
    assert "no interior maximum" in out.stderr and "method 'nuts'" in out.stderr
    assert not (tmp_path / "p.nc").exists()


def test_fit_method_summary_needs_the_summary_likelihood():
    data, _ = _fleet()
    model = LatencyModel()
    model.build_model(data)
    with pytest.raises(BayesBlisError, match="needs build_model"):
        model.fit(method="summary")
