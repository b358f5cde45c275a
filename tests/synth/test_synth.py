"""Synthetic fleets (bayesblis.synth): the truth hierarchy, presets, a tiny fleet end to
end through ingest and the design, and the outlier injection."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import yaml

from bayesblis.features.alpha import ALPHA_FEATURES
from bayesblis.features.beta import BETA_FEATURES
from bayesblis.model.priors import TIED_BETA
from bayesblis.synth import (COMPUTE_CENTRE, FLOORS, MIN_KV_BLOCKS, POPULATION_MEDIANS, TRUTH, Fleet,
                             FleetSpec, RunSpec, Truth, generate_fleet, inject_outliers)

# -- truth ------------------------------------------------------------------------------


def test_truth_is_deterministic_for_a_seed():
    dep = RunSpec("llama-3.1-8b", "H100-SXM", 1).deployment()
    a, b = Truth(seed=3).coefficients(dep), Truth(seed=3).coefficients(dep)
    assert a["beta"] == b["beta"] and a["alpha"] == b["alpha"]
    assert a["noise_sigma"] == b["noise_sigma"]
    c = Truth(seed=4).coefficients(dep)
    assert c["beta"] != a["beta"]
    assert TRUTH == Truth(seed=0)


def test_truth_has_the_model_structure():
    dep = RunSpec("mixtral-8x7b", "A100-SXM-80GB", 4, ep=4).deployment()
    c = TRUTH.coefficients(dep)
    mu = TRUTH.log_mu()
    for kind, names in (("beta", BETA_FEATURES), ("alpha", ALPHA_FEATURES)):
        assert list(c[kind]) == list(names)
        for k in names:
            theta = mu[kind][k] + sum(c["log_effects"][lv][kind][k]
                                      for lv in ("arch", "hardware", "family", "config"))
            floor = FLOORS[kind].get(k, 0.0)
            if kind == "beta" and k in TIED_BETA:  # one GEMM efficiency (model/priors.py)
                assert c[kind][k] == c[kind][TIED_BETA[k]]
                continue
            assert c[kind][k] == pytest.approx(floor + np.exp(theta), rel=1e-12)
    assert FLOORS["beta"] == {"prefill_compute_s": 1.0, "decode_compute_s": 1.0, "tp_comm_s": 1.0}
    assert c["levels"] == {"arch": "moe", "hardware": "A100-SXM-80GB", "model_family": "mixtral"}
    assert 0.05 <= c["noise_sigma"] <= 0.10 and c["noise_nu"] == 5.0


def test_truth_centre_and_structured_hardware_effects():
    # mu = log prior medians (above their floors), except prefill compute centred on the
    # BLIS MFU table: every GPU's compute coefficient before drawn effects is 1/MFU
    assert POPULATION_MEDIANS["beta"]["weight_traffic_s"] == 1.15
    assert 1 + np.exp(COMPUTE_CENTRE) == pytest.approx(2.51, abs=0.01)
    for gpu, mfu in (("H100-SXM", 0.45), ("A100-SXM-80GB", 0.38), ("L40S", 0.32), ("H200-SXM", 0.45)):
        eff = TRUTH.effect("hardware", gpu)["beta"]
        assert 1 + np.exp(TRUTH.log_mu()["beta"]["prefill_compute_s"] + eff["prefill_compute_s"]) \
            == pytest.approx(1 / mfu)
    assert TRUTH.effect("hardware", "H200-SXM")["beta"]["weight_traffic_s"] < \
        TRUTH.effect("hardware", "H100-SXM")["beta"]["weight_traffic_s"]
    # drawn effects are small and independent of any fleet
    fam = TRUTH.effect("family", "llama")
    assert all(abs(v) < 0.5 for v in fam["beta"].values())
    assert fam == Truth(seed=0).effect("family", "llama")


# -- presets ----------------------------------------------------------------------------


def _levels(run):
    from bayesblis.model.data import config_row

    r = config_row(run.deployment())
    return r["config"], r["arch"], r["hardware"], r["model_family"]


@pytest.mark.parametrize("name", ["tiny", "demo", "full", "long_prompt"])
def test_presets_fit_memory_and_hold_out_a_config_with_seen_levels(name):
    spec = FleetSpec.preset(name)
    assert spec.heldout
    train = [_levels(r) for r in spec.train]
    for r in spec.runs:
        assert r.deployment().kv_cache_blocks(0.9) >= MIN_KV_BLOCKS, r.name
    for r in spec.heldout:
        key, arch, hw, fam = _levels(r)
        assert key not in {t[0] for t in train}
        assert arch in {t[1] for t in train} and hw in {t[2] for t in train}
        assert fam in {t[3] for t in train}
    assert len({r.name for r in spec.runs}) == len(spec.runs)


def test_demo_and_full_presets_cover_the_brief():
    demo = FleetSpec.preset("demo")
    assert 6 <= len(demo.train) <= 8
    assert len({r.hardware for r in demo.runs}) == 3
    assert {r.tp for r in demo.runs} == {1, 2, 4}
    assert any(r.deployment().model.is_moe for r in demo.train)
    full = FleetSpec.preset("full")
    assert len(full.train) == 24
    assert {r.hardware for r in full.train} == {"H100-SXM", "A100-SXM-80GB", "L40S", "H200-SXM"}
    assert {r.tp for r in full.train} == {1, 2, 4, 8}
    assert any(r.ep > 1 for r in full.train)
    assert {r.chunk for r in full.train} == {512, 2048, 8192}
    assert {r.cpu_offload for r in full.train} == {True, False}
    assert {r.workload for r in full.train} == {"balanced", "prefill_heavy", "decode_heavy"}


def test_long_prompt_fleet_has_long_prompts_and_rising_rates_and_its_itl_rises(tmp_path):
    """Issue #19's load-response fleet: 1-4k-token prompts at four rising rates; with the
    true coefficients its ITL rises with the rate (chunks share more steps with decodes)."""
    from bayesblis.simulate.results import run_scenario
    from bayesblis.synth import PRESETS, WORKLOADS

    spec = PRESETS["long_prompt"]()
    assert list(spec.load_levels) == sorted(spec.load_levels) and len(spec.load_levels) == 4
    prompts = WORKLOADS["long_prompt"]["prompt_tokens"]
    assert prompts["min"] >= 1024 and prompts["max"] <= 4096
    one = replace(spec, runs=spec.runs[:1] + tuple(spec.heldout), duration_s=60.0)
    fleet = generate_fleet(one, tmp_path / "fleet", seed=0, progress=False)
    row = fleet.configs.iloc[0]
    assert list(row["stage_rates_rps"]) == sorted(row["stage_rates_rps"])
    res = run_scenario(fleet.scenario(row["name"]), fleet.true_draws(row["config"], 3), seed=0,
                       deployment=fleet.run_spec(row["name"]).deployment())
    itl = [st["itl_mean_s"]["median"] for st in res["stages"]]
    assert itl[-1] > 1.3 * itl[0], itl


# -- a tiny fleet, end to end -----------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_fleet(tmp_path_factory):
    return generate_fleet("tiny", tmp_path_factory.mktemp("fleet"), seed=0, progress=False)


def test_tiny_fleet_files(tiny_fleet):
    root = tiny_fleet.root
    assert len(tiny_fleet.runs) == 2 and len(tiny_fleet.heldout_runs) == 1
    for run in tiny_fleet.runs + tiny_fleet.heldout_runs:
        assert (run / "traces.json").stat().st_size > 0
        dep = yaml.safe_load((run / "deployment.yaml").read_text())
        assert {"name", "model", "hardware", "vllm"} <= set(dep)
        assert dep["synthetic"]["config"] in tiny_fleet.truth["configs"]
    truth = json.loads((root / "truth.json").read_text())
    assert {"truth_version", "seed", "population", "level_effects", "configs", "beta_features",
            "alpha_features"} <= set(truth)
    for key, c in truth["configs"].items():
        assert set(c["beta"]) == set(BETA_FEATURES) and set(c["alpha"]) == set(ALPHA_FEATURES)
    key = tiny_fleet.heldout_configs[0]
    assert truth["configs"][key]["heldout"] is True
    assert tiny_fleet.truth_for(key) == {"beta": truth["configs"][key]["beta"],
                                         "alpha": truth["configs"][key]["alpha"]}
    with pytest.raises(KeyError):
        tiny_fleet.truth_for("no|such|config")
    again = Fleet.load(root)
    assert again.truth_for(key) == tiny_fleet.truth_for(key)
    assert again.heldout_configs == tiny_fleet.heldout_configs
    assert all(tiny_fleet.configs["n_ok"] == tiny_fleet.configs["n_requests"])


def test_tiny_fleet_is_deterministic(tiny_fleet, tmp_path):
    other = generate_fleet("tiny", tmp_path, seed=0, progress=False)
    run = tiny_fleet.runs[0].name
    assert (tiny_fleet.root / "runs" / run / "traces.json").read_bytes() == \
        (other.root / "runs" / run / "traces.json").read_bytes()


def test_tiny_fleet_ingests_into_model_data(tiny_fleet):
    from bayesblis.io.dataset import ingest

    ds = ingest([tiny_fleet.root / "runs"])
    assert len(ds) == 2
    by_name = {s.name: s for s in ds.sources}
    for _, row in tiny_fleet.configs[~tiny_fleet.configs["heldout"]].iterrows():
        s = by_name[row["name"]]
        assert s.kind == "otel"
        assert s.settings["model"] == row["model"] and s.settings["hardware"] == row["hardware"]
        assert s.settings["tp"] == row["tp"]
        assert s.settings["kv_blocks_total_gpu"] == row["kv_blocks_total"]
        assert s.counts()["n_requests"] == row["n_requests"]
    design = pytest.importorskip("bayesblis.design")
    md = design.build_model_data(ds, max_obs_per_config=300, seed=0)
    assert sorted(md.configs["config"]) == sorted(tiny_fleet.train_configs)
    assert md.obs.groupby("config").size().max() <= 300
    # the traces obey the truth: step gaps and decode windows ~ features . beta_true
    for key in tiny_fleet.train_configs:
        t = tiny_fleet.truth_for(key)
        beta = np.array([t["beta"][f] for f in BETA_FEATURES])
        sub = md.obs[(md.obs["config"] == key) & md.obs["kind"].isin(["step_gap", "decode_window"])]
        ratio = sub["y_s"].to_numpy() / (sub[[f"f_{f}" for f in BETA_FEATURES]].to_numpy(float) @ beta)
        assert abs(np.median(ratio) - 1) < 0.03, key


# -- outliers ---------------------------------------------------------------------------


def test_inject_outliers_stretches_steps_and_keeps_order():
    from bayesblis.simulate.engine import EngineConfig, deployment_constants, run_engine
    from bayesblis.simulate.workload import generate

    dep = RunSpec("llama-3.1-8b", "H100-SXM", 1).deployment()
    w = generate([{"rate": 10, "duration": 5}], {"dist": "uniform", "min": 50, "max": 500},
                 {"dist": "uniform", "min": 2, "max": 50}, arrival="poisson", seed=1)
    cfg = EngineConfig(max_num_batched_tokens=512, max_num_seqs=64, max_model_len=4096,
                       kv_blocks_total=4000)
    run = run_engine(w, cfg, deployment_constants(dep), TRUTH.beta_vector(dep), TRUTH.alpha_vector(dep),
                     record=True)
    dur0 = run.steps.end_s - run.steps.start_s
    ttft_wait0 = run.first_token_s - run.queued_s
    post0 = run.e2e_s - (run.finish_s - w.arrival_s)
    n, w2 = inject_outliers(run, w, np.random.default_rng(0), rate=0.05, factor=(3.0, 10.0))
    dur1 = run.steps.end_s - run.steps.start_s
    ratio = dur1 / dur0
    assert n == int(np.sum(ratio > 1.5)) and n > 0
    assert np.all((np.isclose(ratio, 1)) | ((ratio >= 3 - 1e-9) & (ratio <= 10 + 1e-9)))
    assert np.all(np.diff(run.steps.start_s) > 0)
    assert np.all(run.steps.start_s[1:] >= run.steps.end_s[:-1] - 1e-12)
    assert np.all(np.diff(w2.arrival_s) >= 0) and np.all(w2.arrival_s >= w.arrival_s)
    assert np.all(run.queued_s >= w2.arrival_s) and np.all(run.scheduled_s >= run.queued_s)
    # a request's wait grows only by the stretched steps it waited through
    assert np.all(run.first_token_s - run.queued_s >= ttft_wait0 - 1e-9)
    # the finished -> departed delay (alpha) is unchanged
    np.testing.assert_allclose(run.e2e_s - (run.finish_s - w2.arrival_s), post0, atol=1e-9)


def test_runs_that_do_not_fit_memory_are_skipped(tmp_path):
    spec = FleetSpec("mini", (RunSpec("llama-3.1-70b", "L40S", 2),          # 141 GB > 2 x 48 GB
                              RunSpec("llama-3.1-8b", "H100-SXM", 1)), duration_s=4.0)
    with pytest.warns(UserWarning, match="does not fit"):
        fleet = generate_fleet(spec, tmp_path, seed=1, progress=False)
    assert list(fleet.configs["model"]) == ["llama-3.1-8b"]
    assert list(fleet.truth["configs"]) == ["llama-3.1-8b|H100-SXM|tp1|ep1|bf16"]


def test_scenario_of_a_heldout_run_without_traces(tmp_path, tiny_fleet):

    spec = replace(FleetSpec.preset("tiny"), heldout_traces=False, duration_s=5.0)
    fleet = generate_fleet(spec, tmp_path, seed=0, progress=False)
    assert fleet.heldout_runs == [] and fleet.heldout_configs == []
    held = spec.heldout[0]
    assert held.deployment().config_key in fleet.truth["configs"]
    sc = fleet.scenario(held.name)
    ref = tiny_fleet.scenario(held.name, duration_s=5.0)     # same seed, same truth
    assert sc.workload_spec == ref.workload_spec
    assert len(sc.build_workload()) > 0
