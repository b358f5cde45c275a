"""Scenario files, workload generators and inference-perf / TraceV2 sources."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from bayesblis.errors import InputError
from bayesblis.simulate.results import Draws, run_scenario
from bayesblis.simulate.scenario import Scenario, load_scenario
from bayesblis.simulate.workload import (OUTPUT_EXTRA_TOKENS, TOKEN_INFLATION, generate,
                                         sample_tokens, shared_prefix, stage_arrivals,
                                         workload_summary)

from sim_helpers import ALPHA_PRIOR, BETA_PRIOR, REAL, beta_vector

BASE = {
    "model": "llama-2-7b", "hardware": "H100-SXM", "tp": 1,
    "vllm": {"max_num_batched_tokens": 1024, "max_num_seqs": 64, "max_model_len": 4096},
    "workload": {"seed": 3, "arrival": "poisson", "stages": [{"rate": 5, "duration": 10}],
                 "prompt_tokens": {"dist": "normal", "mean": 300, "std": 50},
                 "output_tokens": 100, "prefix": {"num_groups": 3, "system_prompt_len": 80}},
}


def write(tmp_path, data, name="s.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


def test_scenario_yaml_builds_workload_and_config(tmp_path):
    sc = Scenario.from_yaml(write(tmp_path, BASE))
    w = sc.build_workload()
    assert 20 < len(w) < 90 and w.n_groups == 3
    assert np.all(w.prompt_tokens >= 81) and np.all(w.output_tokens == 100)
    assert np.all(w.prefix_tokens == 80)
    cfg = sc.engine_config()
    assert cfg.max_num_batched_tokens == 1024 and cfg.kv_blocks_total > 1000   # from memory model
    again = Scenario.from_yaml(write(tmp_path, BASE)).build_workload()
    np.testing.assert_array_equal(w.arrival_s, again.arrival_s)   # seeded


@pytest.mark.parametrize("patch,field", [
    ({"tp": 0}, "tp"),
    ({"colour": 1}, "colour"),
    ({"vllm": {"max_num_seqs": -1}}, "vllm.max_num_seqs"),
    ({"vllm": {"gpu_memory_utilization": 1.5}}, "vllm.gpu_memory_utilization"),
    ({"vllm": {"block_sise": 16}}, "vllm.block_sise"),
    ({"workload": {"stages": []}}, "workload.stages"),
    ({"workload": {**BASE["workload"], "arrival": "bursty"}}, "workload.arrival"),
    ({"workload": {**BASE["workload"], "prompt_tokens": {"dist": "zipf"}}}, "workload.prompt_tokens"),
    ({"workload": {**BASE["workload"], "stages": [{"rate": 1}]}}, "workload.stages"),
    ({"workload": {**BASE["workload"], "stages": [{"rate": 1, "duration": float("inf")}]}},
     "workload.stages"),
    ({"workload": {**BASE["workload"], "stages": [{"rate": float("inf"), "duration": 5}]}},
     "workload.stages"),
    ({"workload": {**BASE["workload"], "output_tokens": 0}}, "workload.output_tokens"),
    ({"workload": {**BASE["workload"], "prompt_tokens": -5}}, "workload.prompt_tokens"),
    ({"workload": {**BASE["workload"], "prompt_tokens": {"dist": "uniform", "min": -10, "max": 5}}},
     "workload.prompt_tokens.min"),
    ({"workload": {**BASE["workload"], "prompt_tokens": {"dist": "fixed", "value": float("nan")}}},
     "workload.prompt_tokens.value"),
    ({"workload": {**BASE["workload"], "prompt_tokens": {"dist": "normal", "mean": 300,
                                                         "std": float("inf")}}},
     "workload.prompt_tokens.std"),
    ({"workload": {**BASE["workload"], "prefix": {"num_groups": 2, "system_prompt_len": -1}}},
     "workload.prefix.system_prompt_len"),
    ({"vllm": {"generation_config": "model"}}, "vllm.generation_config"),
])
def test_bad_scenario_names_file_and_field(tmp_path, patch, field):
    p = write(tmp_path, {**BASE, **patch})
    with pytest.raises(InputError) as exc:
        Scenario.from_yaml(p)
    assert exc.value.field == field and str(p) in str(exc.value)


def test_the_models_sampling_defaults_apply_unless_the_server_ignores_them(tmp_path):
    qwen = Scenario.from_dict({**BASE, "model": "Qwen/Qwen2.5-7B-Instruct"})
    assert qwen.sampling_defaults()["repetition_penalty"] == 1.05
    assert len(qwen.caveats()) == 1 and "repetition_penalty 1.05" in qwen.caveats()[0]
    off = Scenario.from_dict({**BASE, "model": "Qwen/Qwen2.5-7B-Instruct",
                              "vllm": {"generation_config": "vllm"}})
    assert off.sampling_defaults() == {} and off.caveats() == []
    assert Scenario.from_dict(BASE).caveats() == []
    llama31 = Scenario.from_dict({**BASE, "model": "llama-3.1-8b", "hardware": "H100-SXM"})
    assert llama31.caveats() == []      # top-p 0.9 over 128,256 tokens: its sort is priced
    assert llama31.deployment().sampler == "sort"
    assert Scenario.from_dict({**BASE, "model": "llama-3.1-8b", "hardware": "H100-SXM",
                               "vllm": {"generation_config": "vllm"}}).deployment().sampler == "plain"


def test_a_large_vocabulary_without_known_defaults_says_where_to_put_them(tmp_path):
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
              "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
              "num_hidden_layers": 32, "vocab_size": 128256, "max_position_embeddings": 8192,
              "torch_dtype": "bfloat16"}
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    sc = Scenario.from_dict({**BASE, "model": str(folder / "config.json"), "hardware": "H100-SXM"})
    (text,) = sc.caveats()
    assert "no generation_config.json is known here" in text and "128,256-token" in text
    (folder / "generation_config.json").write_text(json.dumps({"bos_token_id": 1}))
    assert sc.caveats() == []               # the file is there and sets no sampling field
    off = Scenario.from_dict({**BASE, "model": "llama-2-7b", "vllm": {"generation_config": "vllm"}})
    assert off.caveats() == []


def test_unchunked_prefill_needs_a_budget_for_the_longest_prompt(tmp_path):
    """As vLLM: without chunked prefill a prompt must fit one step (else it would wait forever)."""
    vllm = {**BASE["vllm"], "enable_chunked_prefill": False}
    p = write(tmp_path, {**BASE, "vllm": vllm})
    with pytest.raises(InputError) as exc:
        Scenario.from_yaml(p).engine_config()
    assert exc.value.field == "vllm.max_num_batched_tokens" and str(p) in str(exc.value)
    ok = Scenario.from_yaml(write(tmp_path, {**BASE, "vllm": {**vllm, "max_num_batched_tokens": 4096}}))
    assert ok.engine_config().enable_chunked_prefill is False


def test_a_scenario_simulates_a_warm_server_unless_told(tmp_path):
    assert Scenario.from_yaml(write(tmp_path, BASE)).engine_config().cold_start_s == 0.0
    fixed = Scenario.from_yaml(write(tmp_path, {**BASE, "vllm": {**BASE["vllm"], "cold_start_s": 2}}))
    assert fixed.engine_config().cold_start_s == 2.0
    for bad in (-1, "auto", True):
        with pytest.raises(InputError) as exc:
            Scenario.from_yaml(write(tmp_path, {**BASE, "vllm": {**BASE["vllm"], "cold_start_s": bad}}))
        assert exc.value.field == "vllm.cold_start_s"


def test_not_yaml_is_input_error(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("model: [unclosed")
    with pytest.raises(InputError):
        Scenario.from_yaml(p)


def test_token_distributions_and_arrivals():
    rng = np.random.default_rng(0)
    assert np.all(sample_tokens(7, 5, rng) == 7)
    u = sample_tokens({"dist": "uniform", "min": 3, "max": 5}, 1000, rng)
    assert u.min() == 3 and u.max() == 5
    n = sample_tokens({"dist": "normal", "mean": 100, "std": 300, "min": 10, "max": 200}, 1000, rng)
    assert n.min() == 10 and n.max() == 200
    ln = sample_tokens({"dist": "lognormal", "mean": 500, "std": 200}, 20000, rng)
    assert abs(ln.mean() - 500) < 15
    t, s, b = stage_arrivals([{"rate": 2, "duration": 5}, {"rate": 4, "duration": 5}], "constant")
    assert len(t) == 30 and list(np.bincount(s)) == [10, 20] and b == [(0, 5), (5, 10)]
    assert np.allclose(np.diff(t[:10]), 0.5)
    tp, _, _ = stage_arrivals([{"rate": 100, "duration": 50}], "poisson", np.random.default_rng(1))
    assert abs(len(tp) - 5000) < 300 and tp.max() < 50


def test_shared_prefix_workload_cycles_its_prompt_set():
    w = shared_prefix([{"rate": 10, "duration": 30}], num_groups=5, prompts_per_group=4,
                      system_prompt_len=100, question_len=400, output_len=250, seed=0)
    assert len(w) == 300 and w.arrival_s[-1] == pytest.approx(30.0)   # rate x duration, sent
    assert set(np.unique(w.prefix_group)) == set(range(20))          # 5 x 4 prompts
    np.testing.assert_array_equal(w.prefix_group, np.arange(300) % 20)  # in turn
    np.testing.assert_array_equal(w.prompt_tokens[:20], w.prompt_tokens[20:40])
    assert np.all(w.prefix_tokens == w.prompt_tokens)                  # cached whole once sent
    assert abs(np.mean(w.prompt_tokens) / 500 - TOKEN_INFLATION) < 0.01
    assert np.all(w.output_tokens == 250 + OUTPUT_EXTRA_TOKENS)
    with pytest.raises(ValueError, match="users_per_group"):
        shared_prefix([{"rate": 1, "duration": 1}], users_per_group=2, question_len=1, output_len=1)


def test_inference_perf_load_timers():
    rng = np.random.default_rng(0)
    t, s, _ = stage_arrivals([{"rate": 20, "duration": 60}, {"rate": 5, "duration": 60}],
                             "normalized_exponential", rng)
    assert list(np.bincount(s)) == [1200, 300] and t[1199] == pytest.approx(60.0)
    gaps = np.diff(t[:1200])
    assert 0.9 < gaps.std() / gaps.mean() < 1.1                        # exponential, not even
    t, _, _ = stage_arrivals([{"rate": 20, "duration": 100}], "poisson_per_second", rng)
    assert abs(len(t) - 2000) < 200 and t.max() <= 100


def test_generate_without_prefix_has_no_groups():
    w = generate([{"rate": 3, "duration": 2}], 10, 5)
    assert np.all(w.prefix_group == -1) and np.all(w.prefix_tokens == 0)


@pytest.mark.skipif(not REAL.is_dir(), reason="shared real data absent")
def test_inference_perf_folder_synthetic_and_replay():
    folder = REAL / "20260217-202857-llama-2-70b-tp4-general"
    sc = Scenario.from_inference_perf(folder, "H100-SXM")
    cfg = sc.engine_config()
    assert (cfg.kv_blocks_total, cfg.max_num_seqs, cfg.max_num_batched_tokens, cfg.max_model_len) == \
        (31356, 128, 2048, 4096)
    assert sc.tp == 4 and cfg.cold_start_s == 0.0   # a warm server unless told
    w = sc.build_workload()
    assert len(w) == 8 * 600 + 20 * 600 and w.n_stages == 2
    np.testing.assert_array_equal(w.prefix_group, np.arange(len(w)) % 100)   # 10 x 10 prompts
    rp = Scenario.from_inference_perf(folder, "H100-SXM", replay=True).build_workload()
    assert len(rp) == 16800
    meta = json.loads((folder / "requests.json").read_text())["requests"]
    assert sorted(rp.prompt_tokens.tolist()) == sorted(r["input_tokens"] for r in meta)
    assert list(np.bincount(rp.stage)) == [sum(1 for r in meta if r["arrival_time_us"] < 600e6),
                                           sum(1 for r in meta if r["arrival_time_us"] >= 600e6)]


@pytest.mark.skipif(not REAL.is_dir(), reason="shared real data absent")
@pytest.mark.parametrize("run", sorted(p.name for p in REAL.iterdir()) if REAL.is_dir() else [])
def test_generated_workload_matches_what_the_run_sent(run):
    """Prompt and output lengths and the cache-hit share of the workload generated from
    profile.yaml match the run's requests.json (its valid requests, replayed)."""
    folder = REAL / run
    gen = Scenario.from_inference_perf(folder, "H100-SXM").build_workload()
    rec = Scenario.from_inference_perf(folder, "H100-SXM", replay=True).build_workload()
    ok = ~rec.has_error
    assert len(gen) == len(rec)
    assert np.median(gen.prompt_tokens) == pytest.approx(np.median(rec.prompt_tokens[ok]), rel=0.015)
    assert np.std(gen.prompt_tokens) < 3 * max(np.std(rec.prompt_tokens[ok]), 1) + 5
    assert np.median(gen.output_tokens) == pytest.approx(np.median(rec.output_tokens[ok]), rel=0.01)
    if rec.has_error.mean() > 0.5:   # error rows record 0 tokens: replay finds no cycle
        return
    share = {name: workload_summary(w)[0]["cache_hit_share"] for name, w in (("gen", gen), ("rec", rec))}
    assert share["gen"] == pytest.approx(share["rec"], abs=0.02)


@pytest.mark.skipif(not REAL.is_dir(), reason="shared real data absent")
def test_replay_keeps_error_requests_but_flags_them():
    folder = REAL / "20260218-065057-llama-2-70b-hf-tp4-reasoning"
    w = Scenario.from_inference_perf(folder, "H100-SXM", replay=True).build_workload()
    assert w.has_error.sum() > 0 and np.all(w.output_tokens >= 1) and np.all(w.prompt_tokens >= 1)


def test_trace_v2_replay(tmp_path):
    header = {"trace_version": 2, "mode": "real",
              "server": {"model": "llama-2-7b", "tensor_parallel": 1, "max_num_seqs": 32,
                         "block_size": 16, "max_model_len": 4096}}
    (tmp_path / "trace.yaml").write_text(yaml.safe_dump(header))
    cols = ["request_id", "client_id", "tenant_id", "slo_class", "session_id", "round_index",
            "prefix_group", "prefix_length", "streaming", "input_tokens", "output_tokens",
            "text_tokens", "image_tokens", "audio_tokens", "video_tokens", "reason_ratio", "model",
            "deadline_us", "server_input_tokens", "arrival_time_us", "send_time_us",
            "first_chunk_time_us", "last_chunk_time_us", "num_chunks", "status", "error_message",
            "finish_reason"]
    rows = []
    for i in range(6):
        vals = dict.fromkeys(cols, "")
        vals.update(request_id=i, round_index=0, prefix_group="g1" if i % 2 else "",
                    prefix_length=32 if i % 2 else 0, streaming="true", input_tokens=100 + i,
                    output_tokens=20, text_tokens=100 + i, image_tokens=0, audio_tokens=0,
                    video_tokens=0, reason_ratio=0, deadline_us=0, server_input_tokens=0,
                    arrival_time_us=1_000_000 + 200_000 * i, send_time_us=0, first_chunk_time_us=0,
                    last_chunk_time_us=0, num_chunks=0, status="ok" if i != 3 else "error")
        rows.append(",".join(str(vals[c]) for c in cols))
    (tmp_path / "trace.csv").write_text(",".join(cols) + "\n" + "\n".join(rows) + "\n")
    sc = load_scenario(tmp_path / "trace.yaml", hardware="H100-SXM")
    w = sc.build_workload()
    assert len(w) == 6 and w.arrival_s[0] == 0 and w.arrival_s[-1] == pytest.approx(1.0)
    assert list(w.prefix_group) == [-1, 0, -1, 0, -1, 0] and w.has_error.sum() == 1
    # input_tokens excludes the shared prefix: the prompt is both
    assert list(w.prompt_tokens) == [100, 101 + 32, 102, 103 + 32, 104, 105 + 32]
    assert sc.engine_config().max_num_seqs == 32


def test_inference_perf_random_data_and_data_it_cannot_generate(tmp_path):
    (tmp_path / "exp-config.yaml").write_text("model: llama-2-7b\ntensor_parallelism: 1\n")
    profile = {"data": {"type": "random",
                        "input_distribution": {"min": 10, "max": 900, "mean": 400, "std_dev": 100},
                        "output_distribution": {"min": 5, "max": 300, "mean": 120, "std_dev": 30}},
               "load": {"type": "poisson", "stages": [{"rate": 10, "duration": 100}]}}
    (tmp_path / "profile.yaml").write_text(json.dumps(profile))
    sc = Scenario.from_inference_perf(tmp_path, "H100-SXM")
    assert sc.workload_spec["arrival"] == "poisson_per_second"
    w = sc.build_workload()
    assert abs(len(w) - 1000) < 120 and np.all(w.prefix_group == -1)
    assert abs(w.prompt_tokens.mean() - 400) < 15 and w.prompt_tokens.max() <= 900
    assert abs(w.output_tokens.mean() - 120) < 5 and w.output_tokens.min() >= 5
    profile["data"] = {"type": "shareGPT"}
    (tmp_path / "profile.yaml").write_text(json.dumps(profile))
    with pytest.raises(InputError, match="shareGPT"):
        Scenario.from_inference_perf(tmp_path, "H100-SXM")


@pytest.mark.parametrize("change, field", [
    ({"load": {"type": "constant", "stages": [{"rate": -1, "duration": 100}]}}, "load.stages"),
    ({"load": {"type": "constant", "stages": [{"rate": 1, "duration": 0}]}}, "load.stages"),
    ({"load": {"type": "constant", "stages": [{"rate": float("inf"), "duration": 10}]}}, "load.stages"),
    ({"load": "constant"}, "load"),
    ({"data": ["shared_prefix"]}, "data"),
    ({"data": {"type": "shared_prefix", "shared_prefix": [1]}}, "data.shared_prefix"),
    ({"load": {"type": "poison", "stages": [{"rate": 1, "duration": 10}]}}, "load.type"),
    ({"load": {"type": ["constant"], "stages": [{"rate": 1, "duration": 10}]}}, "load.type"),
    ({"data": {"type": "shared_prefix", "shared_prefix": {"question_len": 100, "output_len": -5}}},
     "data.shared_prefix.output_len"),
    ({"data": {"type": "shared_prefix", "shared_prefix": {"question_len": 0, "output_len": 20}}},
     "data.shared_prefix.question_len"),
    ({"data": {"type": "shared_prefix", "shared_prefix": {
        "question_len": 100, "output_len": 20, "system_prompt_len": -1}}},
     "data.shared_prefix.system_prompt_len"),
    ({"data": {"type": "shared_prefix", "shared_prefix": {
        "question_len": 100, "output_len": 20, "num_prompts_per_group": 0}}},
     "data.shared_prefix.num_prompts_per_group"),
])
def test_inference_perf_profile_of_the_wrong_shape_names_the_field(tmp_path, change, field):
    """A profile whose load or data is not a mapping, or whose stage has a negative rate or
    no duration, names profile.yaml and the field (they were tracebacks)."""
    (tmp_path / "exp-config.yaml").write_text("model: llama-2-7b\ntensor_parallelism: 1\n")
    profile = {"data": {"type": "shared_prefix",
                        "shared_prefix": {"question_len": 100, "output_len": 20}},
               "load": {"type": "constant", "stages": [{"rate": 1, "duration": 10}]}, **change}
    (tmp_path / "profile.yaml").write_text(json.dumps(profile))
    with pytest.raises(InputError) as exc:
        Scenario.from_inference_perf(tmp_path, "H100-SXM").build_workload()
    assert exc.value.field == field and str(tmp_path / "profile.yaml") in str(exc.value)


def test_inference_perf_load_type_sets_the_arrival_process(tmp_path):
    """`constant` (also when absent) and `poisson` are inference-perf's load types."""
    (tmp_path / "exp-config.yaml").write_text("model: llama-2-7b\ntensor_parallelism: 1\n")
    for load_type, arrival in ((None, "normalized_exponential"), ("constant", "normalized_exponential"),
                               ("poisson", "poisson_per_second")):
        load = {"stages": [{"rate": 1, "duration": 10}], **({"type": load_type} if load_type else {})}
        (tmp_path / "profile.yaml").write_text(json.dumps({"data": {
            "type": "shared_prefix", "shared_prefix": {"question_len": 100, "output_len": 20}},
            "load": load}))
        assert Scenario.from_inference_perf(tmp_path, "H100-SXM").workload_spec["arrival"] == arrival


def test_an_unsimulated_cpu_offload_setting_is_a_caveat(tmp_path):
    (tmp_path / "profile.yaml").write_text(json.dumps({"data": {
        "type": "shared_prefix", "shared_prefix": {"question_len": 100, "output_len": 20}},
        "load": {"stages": [{"rate": 1, "duration": 10}]}}))
    for offload, n_caveats in ((False, 0), (True, 1)):
        (tmp_path / "exp-config.yaml").write_text(
            f"model: llama-2-7b\ntensor_parallelism: 1\ncpu_offload: {str(offload).lower()}\n")
        sc = Scenario.from_inference_perf(tmp_path, "H100-SXM")
        assert len(sc.caveats()) == n_caveats and sc.engine_config().cpu_offload_blocks == 0
    assert "cpu_offload: true" in sc.caveats()[0] and "without CPU offload" in sc.caveats()[0]


def test_trace_v2_header_without_data_generates_its_blis_workload_spec(tmp_path):
    spec = {"version": "2", "seed": 7, "inference_perf": {
        "stages": [{"rate": 5, "duration": 60}, {"rate": 10, "duration": 30}],
        "shared_prefix": {"num_unique_system_prompts": 4, "num_users_per_system_prompt": 2,
                          "system_prompt_len": 100, "question_len": 300, "output_len": 50}}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    header = {"trace_version": 3, "mode": "generated", "workload_spec": "spec.yaml",
              "server": {"model": "llama-2-7b", "tensor_parallel": 1, "max_num_seqs": 64}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(header))
    sc = load_scenario(tmp_path / "run.yaml", hardware="H100-SXM")
    assert sc.workload is None and sc.vllm["max_num_seqs"] == 64
    w = sc.build_workload()
    assert w.n_stages == 2 and abs(len(w) - 600) < 80
    assert set(np.unique(w.prefix_group)) == {0, 1, 2, 3}
    assert np.all(w.prompt_tokens == 400) and np.all(w.prefix_tokens == 100)
    header["workload_spec"] = "preset:chatbot"
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(header))
    with pytest.raises(InputError, match="preset"):
        load_scenario(tmp_path / "run.yaml", hardware="H100-SXM")


def test_draws_of_a_gpu_the_posterior_never_saw_carry_it_to_the_result_caveats():
    """`Draws.from_coefficient_draws` keeps the unseen hardware level; the result names it."""
    beta, alpha = np.tile(beta_vector(BETA_PRIOR), (2, 1)), np.tile(list(ALPHA_PRIOR.values()), (2, 1))
    cd = SimpleNamespace(beta=beta, alpha=alpha, noise_sigma=np.full(2, 0.1), noise_nu=np.full(2, 5.0),
                         unseen_levels={"hardware": "L40S"})
    draws = Draws.from_coefficient_draws(cd, "posterior")
    assert draws.unseen_gpu == "L40S"
    assert Draws.from_coefficient_draws(SimpleNamespace(**{**vars(cd), "unseen_levels": {}}),
                                        "posterior").unseen_gpu is None
    sc = Scenario.from_dict({
        "model": "llama-2-7b", "hardware": "L40S",
        "vllm": {"max_num_batched_tokens": 2048, "max_num_seqs": 16, "max_model_len": 2048},
        "workload": {"seed": 1, "arrival": "poisson", "stages": [{"rate": 1, "duration": 5}],
                     "prompt_tokens": {"dist": "uniform", "min": 100, "max": 200},
                     "output_tokens": {"dist": "uniform", "min": 5, "max": 10}}})
    result = run_scenario(sc, draws, seed=0, n_workers=1)
    assert any("no trace of L40S" in text for text in result["metadata"]["caveats"])
