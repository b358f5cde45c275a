"""`bayesblis calibrate`: a new configuration's posterior with the population as the prior.

The shared tiny fit (conftest.py: synthetic steps from a known hierarchy, numba NUTS) is
the population of every test; the held-out configuration's data come from its known
coefficients."""

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from bayesblis.model.synthetic_steps import FEATURES, LAYERS, _step_features
from model_helpers import tiny_fleet

LEVELS = ("model", "model_family", "arch", "hardware", "tp", "ep", "dtype")
CALIBRATION_SAMPLER = {"draws": 150, "tune": 150, "chains": 2, "seed": 2}
"""300 + 200 draws gave the same coverage (0.9) and interval-width ratios (0.2 at most,
0.7 checked) as these."""


@pytest.fixture(scope="module")
def population(tiny_fit):
    """(parent posterior path, held-out configuration row, its true beta): the shared tiny
    fit (conftest.py; 3 of 4 synthetic configurations, 2 GPUs x a dense and a MoE family at
    TP 2, 80 draws x 2 chains) is the population; its held-out configuration, the A100 MoE,
    has every level seen. (A fit of its own, on JAX, took 20-35 s.)"""
    _, path, _ = tiny_fit
    _, _, held, held_beta = tiny_fleet()
    return path, held, held_beta


def _steps(row, beta, n, seed=5, noise=0.05):
    rng = np.random.default_rng(seed)
    X = _step_features(rng, n, row["tp"], LAYERS[row["model_family"]])
    obs = pd.DataFrame(X, columns=[f"f_{f}" for f in FEATURES])
    obs["y_s"] = np.abs(X @ beta * (1 + noise * rng.standard_t(5, n)))
    obs["n_steps"] = 1
    obs["kind"] = "step"
    obs["config"] = row["config"]
    return obs


def _population_draws(parent, row):
    from bayesblis.coefficients import coefficient_draws

    return coefficient_draws(parent, **{k: row[k] for k in LEVELS}, allow_unseen=True)


def test_calibration_recovers_known_coefficients_with_narrower_intervals(population):
    from bayesblis.calibrate import calibrate
    from bayesblis.model.store import load_posterior

    path, row, truth = population
    parent = load_posterior(path)
    cal = calibrate(parent, pd.DataFrame([row]), _steps(row, truth, 200),
                    sampler_config=CALIBRATION_SAMPLER)
    assert cal.fit_info["diagnostics"]["divergences"] == 0
    assert cal.fit_info["calibration"]["seen_config"] == {row["config"]: False}
    beta = cal.idata.posterior["beta"].sel(config=row["config"], feature=FEATURES)
    beta = beta.stack(s=("chain", "draw")).values
    lo, hi = np.quantile(beta, [0.05, 0.95], axis=1)
    assert np.mean((lo <= truth) & (truth <= hi)) >= 0.8
    pop = _population_draws(parent, row).beta
    plo, phi = np.quantile(pop, [0.05, 0.95], axis=0)
    for name in ("prefill_compute_s", "decode_compute_s", "kv_traffic_s", "tp_comm_s"):
        j = FEATURES.index(name)  # the features these steps inform: log-width ratio
        assert np.log(hi[j] / lo[j]) < 0.7 * np.log(phi[j] / plo[j]), name


def test_zero_calibration_data_is_the_population_prediction(population, tmp_path):
    from bayesblis.calibrate import calibrate, save_calibration
    from bayesblis.coefficients import coefficient_draws
    from bayesblis.model.store import load_posterior

    path, row, _ = population
    parent = load_posterior(path)
    cal = calibrate(parent, pd.DataFrame([row]), None, sampler_config={"draws": 2000, "chains": 2})
    assert cal.fit_info["method"] == "calibration (prior)"
    out = save_calibration(cal, tmp_path / "new.nc")
    new = load_posterior(out)
    assert new.idata.posterior.attrs["bayesblis_calibration_of"] == str(path)
    got = coefficient_draws(new, **{k: row[k] for k in LEVELS})
    assert got.seen_config
    pop = _population_draws(parent, row)
    for mine, theirs in ((got.beta, pop.beta), (got.alpha, pop.alpha)):
        # on the log scale, within a tenth (median) and a quarter (interval ends) of the
        # population's 90% interval width: 160 population draws make their 5% and 95%
        # quantiles noisy, and a floored coefficient's log (TP all-reduce, 1 + exp(theta)) is
        # skewed where the calibration prior is normal (tiny fits of sampler seeds 1 / 2 / 3:
        # ends at most 0.12 / 0.09 / 0.21 of the width, medians at most 0.05)
        q_mine = np.log(np.quantile(mine, [0.05, 0.5, 0.95], 0))
        q_pop = np.log(np.quantile(theirs, [0.05, 0.5, 0.95], 0))
        width = q_pop[2] - q_pop[0]
        assert np.all(np.abs(q_mine[1] - q_pop[1]) < 0.1 * width)
        assert np.all(np.abs(q_mine[[0, 2]] - q_pop[[0, 2]]) < 0.25 * width)


def test_truncation_keeps_the_first_requests():
    from bayesblis.calibrate import truncate_source
    from bayesblis.io.dataset import ingest, sample_paths

    ip, otel = ingest(sample_paths()[:2]).sources
    first = truncate_source(ip, max_requests=30)
    assert len(first.tables["requests"]) == 30
    arrivals = ip.tables["requests"]["arrival_s"]
    assert first.tables["requests"]["arrival_s"].max() <= np.sort(arrivals)[29]
    assert len(ip.tables["requests"]) == 200  # the source itself is untouched
    early = truncate_source(ip, first_seconds=5.0)
    t = early.tables["requests"]["arrival_s"]
    assert 0 < len(t) < 200 and t.max() <= arrivals.min() + 5.0
    cut = truncate_source(otel, max_requests=3)
    assert len(cut.tables["requests"]) <= 3
    kept = set(cut.tables["requests"]["request_id"])
    assert set(cut.tables["journey_events"]["request_id"]) <= kept
    assert len(cut.tables["steps"]) <= len(otel.tables["steps"])


def test_calibration_windows_skip_the_warm_up_and_stop_at_the_last_kept_arrival():
    """Client windows are exact only where every request active in them is known: after the
    warm-up (its requests stay in the timeline) and before the last kept arrival."""
    from bayesblis.calibrate import CLIENT_WINDOW_END, calibration_data, truncate_source
    from bayesblis.io.dataset import Dataset, ingest, sample_paths

    ip = ingest(sample_paths()[:1]).sources[0]
    arrivals = np.sort(ip.tables["requests"]["arrival_s"].to_numpy(float))
    cut = truncate_source(ip, max_requests=100, warmup_s=5.0)
    span = cut.meta["calibration_windows"]
    n_warm = int((arrivals < arrivals[0] + 5.0).sum())
    assert 0 < n_warm and len(cut.tables["requests"]) == n_warm + 100
    assert span["from_s"] == pytest.approx(arrivals[0] + 5.0)
    assert span["until_s"] == pytest.approx(arrivals[n_warm + 99])
    _, obs = calibration_data(Dataset(sources=[ip]), hardware="H100", max_requests=100,
                              warmup_s=5.0)
    _, everything = calibration_data(Dataset(sources=[ip]), hardware="H100", warmup_s=0.0)
    assert 0 < len(obs) < len(everything)
    req = cut.tables["requests"]
    for kind, end_col in CLIENT_WINDOW_END.items():
        ids = obs.loc[obs["kind"] == kind, "request_id"].to_numpy()
        start = req.loc[ids, "arrival_s"].to_numpy(float)
        assert np.all(start >= span["from_s"])
        assert np.all(start + req.loc[ids, end_col].to_numpy(float) <= span["until_s"])
    # a whole trace without warm-up keeps every window: its end is its own end
    whole = truncate_source(ip, warmup_s=0.0)
    assert len(whole.tables["requests"]) == 200
    assert whole.meta["calibration_windows"] == {"from_s": arrivals[0], "until_s": None}
    from bayesblis.client_windows import client_observations
    from bayesblis.design import deployment_for_source
    dep = deployment_for_source(ip, "H100")
    assert len(client_observations(whole, dep)) > len(client_observations(ip, dep))  # fit: warm-up off


def test_cli_calibrates_on_inference_perf_and_coefficients_read_it(population, tmp_path):
    """The CLI path end to end (ingest, truncate, calibrate, save, coefficients read it):
    a real but very short fit (10 + 10 draws, one chain; this posterior's trees run to
    hundreds of steps, 200 + 200 draws took over a minute). The calibrated posterior's
    accuracy is tested above on synthetic steps."""
    from bayesblis.cli import cli
    from bayesblis.model.store import load_posterior

    path, _, _ = population
    runner = CliRunner()
    r = runner.invoke(cli, ["ingest", "--sample", "--quiet", "--out", str(tmp_path / "ds")])
    assert r.exit_code == 0, r.output
    out = tmp_path / "new.nc"
    r = runner.invoke(cli, ["calibrate", str(path), str(tmp_path / "ds"), "--out", str(out),
                            "--hardware", "H100", "--max-requests", "100", "--draws", "10",
                            "--tune", "10", "--chains", "1", "--quiet"])
    assert r.exit_code == 0, r.output
    assert "calibrated 90%" in r.output and f"wrote {out}" in r.output
    assert "physical limits:" in r.output       # the bound report of the calibrated fit
    new = load_posterior(out)
    assert isinstance(new.fit_info["physical_bounds"], list)
    assert (new.idata.posterior.sizes["chain"], new.idata.posterior.sizes["draw"]) == (1, 10)
    assert new.idata.posterior.attrs["bayesblis_calibration_of"] == str(path)
    info = new.fit_info["calibration"]
    assert info["max_requests"] == 100 and info["n_obs"] > 0
    # the sample's features the synthetic population never had get their default prior
    assert "kv_token_layer_s" in info["features_without_fit"]
    assert set(new.data.obs["config"]) <= set(new.configs["config"])
    r = runner.invoke(cli, ["coefficients", str(out), "--model", "llama-2-7b", "--hardware",
                            "H100", "--tp", "1", "--out", str(tmp_path / "c.json")])
    assert r.exit_code == 0, r.output
    record = json.loads((tmp_path / "c.json").read_text())
    assert record["seen_config"] and record["config"] in set(new.configs["config"])
    assert record["beta"]["prefill_compute_s"]["lo"] > 0
    r = runner.invoke(cli, ["coefficients", str(out), "--model", "llama-2-7b", "--hardware",
                            "H100", "--tp", "2", "--out", str(tmp_path / "tp2.json")])
    assert r.exit_code != 0 and "not in this posterior" in str(r.exception)
    # no request kept: the population-level prior, still a posterior file coefficients read
    r = runner.invoke(cli, ["calibrate", str(path), str(tmp_path / "ds"), "--out",
                            str(tmp_path / "prior.nc"), "--hardware", "H100",
                            "--max-requests", "0", "--quiet"])
    assert r.exit_code == 0, r.output
    assert load_posterior(tmp_path / "prior.nc").fit_info["n_obs"] == 0
    r = runner.invoke(cli, ["coefficients", str(tmp_path / "prior.nc"), "--model", "llama-2-7b",
                            "--hardware", "H100", "--out", str(tmp_path / "p.json")])
    assert r.exit_code == 0, r.output


def test_sum_coordinates_are_a_bijection_whose_sum_axis_is_what_the_data_pin():
    """Each proportional group the configuration's data see becomes (log of its weighted
    sum, log ratios); unseen members (reference 0), floored ones and the other coefficients
    keep their log coefficients; the inverse (pytensor, in the model) gives theta back."""
    from bayesblis.calibrate import from_sum_coordinates, sum_groups, to_sum_coordinates
    from bayesblis.model.priors import PROPORTIONAL_GROUPS

    beta_f = ["prefill_compute_s", "weight_traffic_s", "kv_traffic_s", "kv_token_layer_s",
              "tp_sync_s", "layer_overhead_s", "step_overhead_s"]
    reference = np.array([3.0, 2.0, 0.5, 4.0, 0.0, 1.5, 0.25])   # tp_sync_s unseen (TP 1)
    floor = np.array([1.0, 0, 0, 0, 0, 0, 0])
    groups = sum_groups(beta_f, reference, floor)
    assert [[beta_f[j] for j in g] for g in groups] == [
        ["weight_traffic_s", "layer_overhead_s", "step_overhead_s"],
        ["kv_traffic_s", "kv_token_layer_s"]]
    assert all(set(beta_f[j] for j in g) <= set(m) for g, m in
               zip(groups, PROPORTIONAL_GROUPS.values()))
    theta = np.random.default_rng(0).normal(0.0, 1.0, (5, len(beta_f)))
    u = to_sum_coordinates(theta, groups, reference)
    step = groups[0]
    assert u[:, step[0]] == pytest.approx(np.log((reference[step] * np.exp(theta[:, step])).sum(1)))
    kept = [0, 4]                                   # compute and the unseen member unchanged
    assert u[:, kept] == pytest.approx(theta[:, kept])
    for row_u, row_theta in zip(u, theta):
        assert from_sum_coordinates(row_u, groups, reference).eval() == pytest.approx(row_theta)
