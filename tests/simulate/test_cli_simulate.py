"""`bayesblis simulate` end to end: scenario YAML, coefficients files, real folders."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from bayesblis.cli import cli
from bayesblis.simulate.results import METRICS

from sim_helpers import ALPHA_PRIOR, BETA_PRIOR, REAL, coefficients_json

SUMMARY_KEYS = {"mean", "median", "lo", "hi", "ci_prob"}


def check_result(path, n_stages=None):
    res = json.loads(path.read_text())
    assert {"summary", "stages", "counts", "metadata"} <= set(res)
    sd = (res["metadata"].get("discrepancy") or {}).get("sd", {})
    for block in [res["summary"], *res["stages"]]:
        for m in METRICS:
            widened = {"posterior_lo", "posterior_hi"}
            if sd.get(m, 0) > 0:
                assert set(block[m]) == SUMMARY_KEYS | widened
            elif m in sd:  # sd 0: widened only beyond the fitted load (extrapolation slope)
                assert set(block[m]) in (SUMMARY_KEYS, SUMMARY_KEYS | widened)
            else:
                assert set(block[m]) == SUMMARY_KEYS
    if n_stages is not None:
        assert len(res["stages"]) == n_stages
    assert {"n_requests", "n_dropped", "n_preemptions"} <= set(res["counts"])
    assert {"scenario", "coefficients_source", "draws", "seed", "package_version"} <= set(res["metadata"])
    return res


def invoke(args):
    result = CliRunner().invoke(cli, ["simulate", *map(str, args)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def test_simulate_yaml_with_noise_draws(tmp_path):
    sc = {"model": "llama-2-7b", "hardware": "H100-SXM",
          "vllm": {"max_num_batched_tokens": 512, "max_num_seqs": 32, "max_model_len": 2048},
          "workload": {"stages": [{"rate": 4, "duration": 10}, {"rate": 8, "duration": 5}],
                       "prompt_tokens": {"dist": "uniform", "min": 100, "max": 600},
                       "output_tokens": 50}}
    p = tmp_path / "sc.yaml"
    p.write_text(yaml.safe_dump(sc))
    coef = tmp_path / "c.json"
    coef.write_text(json.dumps({"alpha": ALPHA_PRIOR, "beta": BETA_PRIOR, "noise_sigma": 0.1,
                                "noise_nu": 5}))
    out = tmp_path / "RESULT.json"
    r = invoke([p, "--coefficients", coef, "--draws", 5, "--out", out, "--trace-dir",
                tmp_path / "tr"])
    res = check_result(out, n_stages=2)
    assert "ttft_mean_s" in r.output
    s = res["summary"]["e2e_mean_s"]
    assert s["lo"] <= s["median"] <= s["hi"] and s["lo"] < s["hi"]     # noise draws differ
    assert res["metadata"]["draws"] == 5
    assert (tmp_path / "tr" / "traces.json").stat().st_size > 0
    # metric definitions: itl from means; tpot per request
    assert res["summary"]["itl_mean_s"]["mean"] > 0


@pytest.mark.parametrize("kv_blocks, evicts", [(900, True), (60_000, False)])
def test_result_reports_the_simulated_prefix_cache_hits(tmp_path, kv_blocks, evicts):
    """100 prompts of 300 tokens in turn with 400-token answers: a 900-block cache cannot
    hold them between rounds, and the simulated hit share falls far below the share the
    workload could be served (evictions ignored); a large cache serves what it could."""
    sc = {"model": "llama-2-7b", "hardware": "H100-SXM",
          "vllm": {"max_num_seqs": 32, "max_model_len": 2048, "kv_blocks_total": kv_blocks},
          "workload": {"stages": [{"rate": 2, "duration": 300}],
                       "shared_prefix": {"num_groups": 10, "prompts_per_group": 10,
                                         "system_prompt_len": 0, "question_len": 300,
                                         "output_len": 400}}}
    p = tmp_path / "sc.yaml"
    p.write_text(yaml.safe_dump(sc))
    coef = tmp_path / "c.json"
    coef.write_text(json.dumps({"alpha": ALPHA_PRIOR, "beta": BETA_PRIOR}))
    out = tmp_path / "RESULT.json"
    r = invoke([p, "--coefficients", coef, "--draws", 2, "--out", out])
    res = check_result(out, n_stages=1)
    could = res["workload"][0]["cache_hit_share"]
    served = res["stages"][0]["prefix_cache_hit_share"]["median"]
    assert could > 0.75 and "prefix-cache hits" in r.output
    assert (served < 0.2) if evicts else (served > could - 0.02)
    assert res["counts"]["prefix_cache_hit_share"]["median"] == pytest.approx(served)


def test_blis_style_yaml_coefficients(tmp_path):
    from bayesblis.features.beta import BETA_FEATURES

    sc = {"model": "llama-2-7b", "hardware": "H100-SXM",
          "workload": {"stages": [{"rate": 2, "duration": 5}], "prompt_tokens": 200,
                       "output_tokens": 20}}
    p = tmp_path / "sc.yaml"
    p.write_text(yaml.safe_dump(sc))
    coef = tmp_path / "c.yaml"
    coef.write_text(yaml.safe_dump({"alpha_coeffs": list(ALPHA_PRIOR.values()),
                                    "beta_coeffs": [BETA_PRIOR[n] for n in BETA_FEATURES]}))
    out = tmp_path / "R.json"
    invoke([p, "--coefficients", coef, "--out", out])
    res = check_result(out)
    assert res["metadata"]["draws"] == 1       # fixed coefficients without noise: one run


def test_coefficient_files_without_the_frontend_term_simulate_without_it(tmp_path):
    # files written before alpha_frontend_s (and BLIS's own alpha) have three alpha values
    from bayesblis.errors import InputError
    from bayesblis.features.beta import BETA_FEATURES
    from bayesblis.simulate.results import load_coefficients

    three = {k: v for k, v in ALPHA_PRIOR.items() if k != "alpha_frontend_s"}
    beta = [BETA_PRIOR[n] for n in BETA_FEATURES]
    as_json, as_yaml = tmp_path / "c.json", tmp_path / "c.yaml"
    as_json.write_text(json.dumps({"alpha": three, "beta": BETA_PRIOR}))
    as_yaml.write_text(yaml.safe_dump({"alpha_coeffs": list(three.values()), "beta_coeffs": beta}))
    for path in (as_json, as_yaml):
        np.testing.assert_allclose(load_coefficients(path).alpha, [[*three.values(), 0.0]])
    as_yaml.write_text(yaml.safe_dump({"alpha_coeffs": [1.0, 2.0], "beta_coeffs": beta}))
    with pytest.raises(InputError, match="alpha_coeffs.*a list of 4 numbers \\(or 3\\)"):
        load_coefficients(as_yaml)


@pytest.mark.parametrize("late", [1, 2])
def test_coefficient_files_without_the_late_step_terms_price_them_at_0(tmp_path, late):
    # model version 16's files end at sampling_s, version 14's before it: the terms they lack
    # (features.beta.LATE_FEATURES) count 0, the others keep their places
    from bayesblis.errors import InputError
    from bayesblis.features.beta import BETA_FEATURES
    from bayesblis.simulate.results import load_coefficients

    beta = [BETA_PRIOR[n] for n in BETA_FEATURES]
    path = tmp_path / "c.yaml"
    alpha = list(ALPHA_PRIOR.values())
    path.write_text(yaml.safe_dump({"alpha_coeffs": alpha, "beta_coeffs": beta[:-late]}))
    np.testing.assert_allclose(load_coefficients(path).beta, [beta[:-late] + [0.0] * late])
    path.write_text(yaml.safe_dump({"alpha_coeffs": alpha, "beta_coeffs": beta[:-3]}))
    with pytest.raises(InputError, match="beta_coeffs.*a list of 14 numbers \\(or 12-13\\)"):
        load_coefficients(path)



@pytest.mark.parametrize("field, value", [
    ("noise_sigma", "x"), ("noise_sigma", -0.1), ("noise_sigma", float("nan")),
    ("noise_nu", float("inf")), ("noise_nu", 0), ("beta_coeffs", float("nan")),
])
def test_bad_values_of_a_yaml_coefficients_file_name_the_field(tmp_path, field, value):
    """The YAML layout is checked as the JSON one: a noise setting that is not a finite
    number in range, or a coefficient that is NaN, names its key (a string noise_sigma was a
    traceback; a negative or NaN one was simulated)."""
    from bayesblis.errors import InputError
    from bayesblis.features.alpha import ALPHA_FEATURES
    from bayesblis.features.beta import BETA_FEATURES
    from bayesblis.simulate.results import load_coefficients

    data = {"alpha_coeffs": [ALPHA_PRIOR[n] for n in ALPHA_FEATURES],
            "beta_coeffs": [BETA_PRIOR[n] for n in BETA_FEATURES]}
    if field == "beta_coeffs":
        data["beta_coeffs"][2] = value
    else:
        data[field] = value
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError) as exc:
        load_coefficients(path)
    assert exc.value.field == field and str(path) in str(exc.value)


def test_the_hand_written_examples_of_the_coefficients_spec_load(tmp_path):
    """The JSON and YAML examples of data_specs/coefficients-input.md are files the reader
    takes (the YAML one had fewer coefficients than BETA_FEATURES)."""
    import re
    from pathlib import Path

    from bayesblis.simulate.results import load_coefficients

    spec = Path(__file__).resolve().parents[2] / "data_specs" / "coefficients-input.md"
    hand_written = spec.read_text().split("## Hand-written files", 1)[1]
    blocks = re.findall(r"```(json|yaml)\n(.*?)```", hand_written, re.S)
    assert sorted(kind for kind, _ in blocks) == ["json", "yaml"]
    loaded = []
    for kind, text in blocks:
        path = tmp_path / f"example.{kind}"
        path.write_text(text)
        loaded.append(load_coefficients(path))
    np.testing.assert_allclose(loaded[0].beta, loaded[1].beta)
    np.testing.assert_allclose(loaded[0].alpha, loaded[1].alpha)

def test_bad_coefficients_file_is_clear_error(tmp_path):
    from bayesblis.cli import main

    sc = tmp_path / "sc.yaml"
    sc.write_text(yaml.safe_dump({"model": "llama-2-7b", "hardware": "H100-SXM",
                                  "workload": {"stages": [{"rate": 1, "duration": 2}],
                                               "prompt_tokens": 10, "output_tokens": 2}}))
    coef = tmp_path / "c.json"
    coef.write_text(json.dumps({"alpha": ALPHA_PRIOR, "beta": {"prefill_compute": 1.0}}))
    with pytest.raises(SystemExit) as exc:
        main(["simulate", str(sc), "--coefficients", str(coef), "--out", str(tmp_path / "o.json")])
    assert exc.value.code == 2


@pytest.mark.skipif(not REAL.is_dir(), reason="shared real data absent")
def test_simulate_one_real_folder(tmp_path):
    folder = REAL / "20260217-203421-llama-2-70b-hf-tp4-codegen"
    out = tmp_path / "RESULT.json"
    invoke([folder, "--coefficients", coefficients_json(tmp_path / "c.json"), "--hardware",
            "H100-SXM", "--max-duration-s", 120, "--out", out])
    res = check_result(out, n_stages=1)
    assert abs(res["counts"]["n_requests"] - 600) < 90   # 5 req/s for 120 s, exponential gaps
    # the replay of the same folder uses the recorded requests
    out2 = tmp_path / "RESULT2.json"
    invoke([folder, "--coefficients", tmp_path / "c.json", "--hardware", "H100-SXM", "--replay",
            "--max-duration-s", 120, "--out", out2])
    check_result(out2)


@pytest.fixture(scope="module")
def all_real_results(tmp_path_factory):
    if not REAL.is_dir():
        pytest.skip("shared real data absent")
    tmp = tmp_path_factory.mktemp("real")
    coef = coefficients_json(tmp / "c.json")
    outs = {}
    for folder in sorted(p for p in REAL.iterdir() if p.is_dir()):
        out = tmp / f"{folder.name}.json"
        invoke([folder, "--coefficients", coef, "--hardware", "H100-SXM", "--draws", 1,
                "--max-duration-s", 30, "--workers", 1, "--out", out])
        outs[folder.name] = out
    return outs


def test_simulate_all_real_folders(all_real_results):
    assert len(all_real_results) == 16
    for name, out in all_real_results.items():
        res = check_result(out)
        assert res["counts"]["n_requests"] > 0, name
        assert res["summary"]["ttft_mean_s"]["mean"] > 0, name


def test_a_models_repetition_penalty_default_is_a_caveat_of_the_result(tmp_path):
    sc = {"model": "qwen2.5-7b", "hardware": "H100-SXM",
          "workload": {"stages": [{"rate": 2, "duration": 5}], "prompt_tokens": 200,
                       "output_tokens": 20}}
    coef = coefficients_json(tmp_path / "c.json")
    for mode, n_caveats in (("auto", 1), ("vllm", 0)):
        p = tmp_path / f"{mode}.yaml"
        p.write_text(yaml.safe_dump({**sc, "vllm": {"generation_config": mode}}))
        out = tmp_path / f"{mode}.json"
        r = invoke([p, "--coefficients", coef, "--draws", 2, "--out", out])
        meta = check_result(out)["metadata"]
        assert len(meta["caveats"]) == n_caveats
        assert ("caveat: the model's generation_config.json sets repetition_penalty 1.05"
                in r.output) == (mode == "auto")
        assert meta["sampling_defaults"] == ({"repetition_penalty": 1.05, "temperature": 0.7,
                                              "top_p": 0.8, "top_k": 20} if mode == "auto" else {})


def test_result_and_scenario_schemas(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    from sim_helpers import REPO

    specs = REPO / "data_specs"
    res_schema = json.loads((specs / "simulation-result.schema.json").read_text())
    sc_schema = json.loads((specs / "scenario.schema.json").read_text())
    for s in (res_schema, sc_schema):
        jsonschema.Draft202012Validator.check_schema(s)
    sc = {"name": "t", "model": "llama-2-7b", "hardware": "H100-SXM", "tp": 1,
          "vllm": {"max_num_seqs": 16, "kv_blocks_total": 500, "cpu_offload_blocks": 20},
          "workload": {"seed": 1, "arrival": "poisson", "stages": [{"rate": 3, "duration": 4}],
                       "prompt_tokens": {"dist": "lognormal", "mean": 200, "std": 50},
                       "output_tokens": {"dist": "uniform", "min": 5, "max": 30},
                       "prefix": {"num_groups": 2, "system_prompt_len": 40}}}
    jsonschema.validate(sc, sc_schema)
    jsonschema.validate({**sc, "vllm": {"generation_config": "vllm"}}, sc_schema)
    p = tmp_path / "sc.yaml"
    p.write_text(yaml.safe_dump(sc))
    out = tmp_path / "R.json"
    invoke([p, "--coefficients", coefficients_json(tmp_path / "c.json"), "--out", out])
    jsonschema.validate(json.loads(out.read_text()), res_schema)
    for bad in ({**sc, "tp": 0}, {**sc, "vllm": {"block_sise": 16}},
                {**sc, "vllm": {"generation_config": "model"}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, sc_schema)


def test_posterior_option_uses_posterior_draws(tmp_path, monkeypatch):
    """--posterior asks coefficients.posterior_draws for D draws of the scenario's deployment
    (a stand-in module here: fitting a posterior is not this test's job)."""
    import sys
    import types

    import numpy as np

    from bayesblis.features.beta import BETA_FEATURES

    calls = {}

    def posterior_draws(path, deployment, n_draws, *, allow_unseen=False, seed=0):
        calls.update(path=path, deployment=deployment, n=n_draws, allow_unseen=allow_unseen)
        rng = np.random.default_rng(seed)
        beta = np.array([BETA_PRIOR[n] for n in BETA_FEATURES]) * rng.lognormal(0, 0.1, (n_draws, len(BETA_FEATURES)))
        return types.SimpleNamespace(beta=beta, alpha=np.tile(list(ALPHA_PRIOR.values()), (n_draws, 1)),
                                     noise_sigma=np.full(n_draws, 0.05), noise_nu=np.full(n_draws, 6.0),
                                     seen_config=True, unseen_levels={}, fitted_load=None)

    monkeypatch.setitem(sys.modules, "bayesblis.coefficients",
                        types.SimpleNamespace(posterior_draws=posterior_draws))
    post = tmp_path / "POSTERIOR.nc"
    post.write_bytes(b"")
    sc = tmp_path / "sc.yaml"
    sc.write_text(yaml.safe_dump({"model": "llama-2-7b", "workload": {
        "stages": [{"rate": 3, "duration": 5}], "prompt_tokens": 300, "output_tokens": 30}}))
    out = tmp_path / "R.json"
    invoke([sc, "--posterior", post, "--draws", 6, "--hardware", "H100-SXM", "--allow-unseen",
            "--out", out])
    res = check_result(out)
    assert calls["n"] == 6 and calls["allow_unseen"] and calls["deployment"].tp == 1
    assert res["metadata"]["draws"] == 6 and "posterior" in res["metadata"]["coefficients_source"]
    e2e = res["summary"]["e2e_mean_s"]
    assert e2e["lo"] < e2e["hi"]


def test_prediction_intervals_widen_by_the_simulator_discrepancy(tmp_path):
    """By default the intervals of the metrics validation calibrates are prediction
    intervals (draws x the packaged discrepancy), the posterior-only ones kept beside them;
    `--discrepancy none` gives the posterior-only ones; a report gives its own."""
    from bayesblis.discrepancy import NEW_RUN, load_discrepancy

    sc = tmp_path / "sc.yaml"
    sc.write_text(yaml.safe_dump({"model": "llama-2-7b", "hardware": "H100-SXM", "workload": {
        "stages": [{"rate": 4, "duration": 8}], "prompt_tokens": 300, "output_tokens": 30}}))
    coef = tmp_path / "c.json"
    coef.write_text(json.dumps({"alpha": ALPHA_PRIOR, "beta": BETA_PRIOR, "noise_sigma": 0.1,
                                "noise_nu": 5}))
    runs = {}
    for name, extra in (("default", []), ("none", ["--discrepancy", "none"])):
        out = tmp_path / f"{name}.json"
        r = invoke([sc, "--coefficients", coef, "--draws", 8, "--out", out, *extra])
        runs[name] = (json.loads(out.read_text()), r.output)
    (wide, text), (plain, plain_text) = runs["default"], runs["none"]
    packaged = load_discrepancy()
    assert wide["metadata"]["discrepancy"]["sd"] == pytest.approx(packaged.sd, abs=1e-6)
    assert "scale" not in wide["metadata"]["discrepancy"]      # fixed coefficients: a new run
    assert wide["metadata"]["discrepancy"]["applies"] == NEW_RUN
    assert plain["metadata"]["discrepancy"] is None
    assert "prediction interval" in text and "posterior-only" in text
    assert "interval of the posterior draws" in plain_text
    for m in METRICS:
        w, p = wide["summary"][m], plain["summary"][m]
        assert (w["median"], w["mean"]) == (p["median"], p["mean"])    # the point is the draws'
        if packaged.sd.get(m, 0) > 0:  # sd 0 (the p90s): the posterior alone covers them
            assert (w["posterior_lo"], w["posterior_hi"]) == (p["lo"], p["hi"])
            assert w["hi"] - w["lo"] > p["hi"] - p["lo"] and w["lo"] <= w["median"] <= w["hi"]
        else:
            assert w == p
    # a validate report of one's own: only its metrics are widened
    report = tmp_path / "REPORT.json"
    report.write_text(json.dumps({"simulator_discrepancy": {
        "holdout": "model", "metrics": {"ttft_mean_s": {"sd": 0.2}}}}))
    out = tmp_path / "own.json"
    invoke([sc, "--coefficients", coef, "--draws", 8, "--out", out, "--discrepancy", report])
    own = json.loads(out.read_text())
    assert own["metadata"]["discrepancy"]["sd"] == {"ttft_mean_s": 0.2}
    assert "posterior_lo" in own["summary"]["ttft_mean_s"]
    assert own["summary"]["e2e_mean_s"] == plain["summary"]["e2e_mean_s"]


def test_the_summary_names_the_rule_each_scaled_interval_follows(tmp_path):
    """The printed header says which rule scaled a never-fitted configuration's spread, and
    the footer gives the scales (`Discrepancy.for_configuration`)."""
    from bayesblis.cli.simulate import format_summary
    from bayesblis.discrepancy import NEW_CONFIGURATION, NEW_GPU, UNMEASURED_GPU

    sc = tmp_path / "sc.yaml"
    sc.write_text(yaml.safe_dump({"model": "llama-2-7b", "hardware": "H100-SXM", "workload": {
        "stages": [{"rate": 4, "duration": 4}], "prompt_tokens": 300, "output_tokens": 30}}))
    coef = tmp_path / "c.json"
    coef.write_text(json.dumps({"alpha": ALPHA_PRIOR, "beta": BETA_PRIOR}))
    out = tmp_path / "r.json"
    invoke([sc, "--coefficients", coef, "--draws", 4, "--out", out])
    result = json.loads(out.read_text())
    result["metadata"]["discrepancy"].update(scale={"e2e_mean_s": 0.3}, scale_source="model held out")
    headers = {}
    for rule in (NEW_CONFIGURATION, NEW_GPU, UNMEASURED_GPU):
        result["metadata"]["discrepancy"]["applies"] = rule
        text = format_summary(result)
        headers[rule] = text.splitlines()[0]
        assert "e2e_mean_s x0.30" in text and "scaled as measured held out by model" in text
    assert "(configuration never fitted)" in headers[NEW_CONFIGURATION]
    assert headers[NEW_GPU].endswith("with the new GPU's own spread] and mean (a few saturated "
                                     "draws inflate the mean)")
    assert "and kernel-db's spread across GPUs" in headers[UNMEASURED_GPU]


def test_bad_discrepancy_is_one_line_error(tmp_path, capsys):
    from bayesblis.cli import main

    sc = tmp_path / "sc.yaml"
    sc.write_text(yaml.safe_dump({"model": "llama-2-7b", "hardware": "H100-SXM", "workload": {
        "stages": [{"rate": 1, "duration": 2}], "prompt_tokens": 10, "output_tokens": 2}}))
    coef = coefficients_json(tmp_path / "c.json")
    bad = tmp_path / "d.json"
    bad.write_text(json.dumps({"metrics": {"e2e_mean_s": {"sd": -1}}}))
    for value, words in ((bad, ["d.json", "field 'metrics.e2e_mean_s.sd'", "expected"]),
                         (tmp_path / "missing.json", ["--discrepancy", "is not a file"])):
        with pytest.raises(SystemExit) as exc:
            main(["simulate", str(sc), "--coefficients", str(coef), "--out",
                  str(tmp_path / "o.json"), "--discrepancy", str(value)])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        for w in words:
            assert w in err, err
    assert not (tmp_path / "o.json").exists()
