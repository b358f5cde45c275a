"""`bayesblis coefficients` for BLIS: bayesblis-go files and per-draw trained-physics YAML
(the draws `simulate` runs), and the projection onto BLIS's basis (`--project-on`)."""

import json

import numpy as np
import pytest
import yaml

from bayesblis.cli import main

ARGS = ("--model", "llama-2-7b", "--hardware", "H100-SXM", "--tp", "2", "--allow-unseen",
        "--seed", "5")

SCENARIO = """\
name: projection-check
model: llama-2-7b
hardware: H100-SXM
tp: 2
vllm: {max_num_batched_tokens: 2048, max_num_seqs: 64, max_model_len: 4096, kv_blocks_total: 20000}
workload:
  seed: 1
  arrival: poisson
  stages: [{rate: 6, duration: 15}]
  prompt_tokens: {dist: normal, mean: 500, std: 80}
  output_tokens: {dist: uniform, min: 50, max: 150}
  prefix: {num_groups: 3, system_prompt_len: 120}
"""


def test_bayesblis_go_draws_are_simulates_draws(tiny_fit, tmp_path):
    from bayesblis.blis_export import read_go_file
    from bayesblis.coefficients import posterior_draws
    from bayesblis.features.physics import Deployment

    _, path, _ = tiny_fit
    main(["coefficients", str(path), *ARGS, "--format", "bayesblis-go", "--draws", "3",
          "--max-num-batched-tokens", "2048", "--max-num-seqs", "64", "--out",
          str(tmp_path / "c.json")])
    files = sorted(tmp_path.glob("c.draw*.json"))
    assert [f.name for f in files] == ["c.draw000.json", "c.draw001.json", "c.draw002.json"]
    recs = [read_go_file(f) for f in files]
    dep = Deployment("llama-2-7b", "H100-SXM", tp=2)
    sim = posterior_draws(path, dep, 3, allow_unseen=True, seed=5)   # as `simulate` draws
    from bayesblis.blis_export import _full

    np.testing.assert_allclose([r["beta"] for r in recs], _full(sim.beta, sim.beta_features),
                               rtol=1e-12)
    np.testing.assert_allclose([r["alpha_us"] for r in recs], sim.alpha, rtol=1e-12)
    np.testing.assert_allclose([r["noise_sigma"] for r in recs], sim.noise_sigma, rtol=1e-12)
    assert recs[0]["max_num_batched_tokens"] == 2048 and recs[0]["max_num_seqs"] == 64
    assert len({r["noise_seed"] for r in recs}) == 3
    assert [r["draw"] for r in recs] == [0, 1, 2]

    main(["coefficients", str(path), *ARGS, "--format", "bayesblis-go", "--out",
          str(tmp_path / "mean.json")])
    assert read_go_file(tmp_path / "mean.json")["draw"] is None


def test_trained_physics_yaml_per_draw_and_refusals(tiny_fit, tmp_path, capsys):
    _, path, _ = tiny_fit
    main(["coefficients", str(path), *ARGS, "--draws", "2", "--out", str(tmp_path / "t.yaml")])
    for f in ("t.draw000.yaml", "t.draw001.yaml", "t.yaml", "t.json"):
        assert (tmp_path / f).exists()
    doc = yaml.safe_load((tmp_path / "t.draw001.yaml").read_text())["trained_physics_coefficients"]
    assert len(doc["alpha_coeffs"]) == 3 and len(doc["beta_coeffs"]) == 11
    assert "# draw 1 of 2" in (tmp_path / "t.draw001.yaml").read_text()
    with pytest.raises(SystemExit) as exc:
        main(["coefficients", str(path), *ARGS, "--draws", "2", "--out", str(tmp_path / "x.json")])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        main(["coefficients", str(path), *ARGS, "--format", "bayesblis-go", "--project-on",
              str(tmp_path / "t.yaml"), "--out", str(tmp_path / "y.json")])
    assert exc.value.code == 2
    capsys.readouterr()


def test_projection_reproduces_the_step_model_and_states_its_error(tiny_fit, tmp_path):
    """The projected trained-physics coefficients, evaluated on BLIS's basis over the
    scenario's own steps, give bayesblis's step times back (busy time within 1%), and the
    YAML says how well."""
    from bayesblis.blis_projection import (BlisShape, batches_from_run, project,
                                           trained_physics_basis)
    from bayesblis.coefficients import posterior_draws
    from bayesblis.simulate.engine import deployment_constants, run_engine
    from bayesblis.simulate.scenario import load_scenario

    _, path, _ = tiny_fit
    scen = tmp_path / "s.yaml"
    scen.write_text(SCENARIO)
    main(["coefficients", str(path), *ARGS, "--project-on", str(scen), "--out",
          str(tmp_path / "p.yaml")])
    text = (tmp_path / "p.yaml").read_text()
    assert "projection of bayesblis's step model onto BLIS's basis" in text
    assert "step time RMS error" in text
    assert len(yaml.safe_load(text)["trained_physics_coefficients"]["beta_coeffs"]) == 11

    sc = load_scenario(scen)
    dep = sc.deployment()
    from bayesblis.blis_export import _full

    d = posterior_draws(path, dep, 1, allow_unseen=True, seed=5)
    beta = _full(d.beta, d.beta_features)[0]
    w = sc.build_workload()
    run = run_engine(w, sc.engine_config(dep), deployment_constants(dep), beta, d.alpha[0],
                     record=True)
    p = project(BlisShape.from_deployment(dep), dep, beta, d.alpha[0], run, w)
    y = (run.steps.end_s - run.steps.start_s) * 1e6
    pred = trained_physics_basis(BlisShape.from_deployment(dep), batches_from_run(run, w)) @ p.beta
    assert pred.sum() / y.sum() - 1 == pytest.approx(p.busy_bias_rel, abs=1e-9)
    assert abs(p.busy_bias_rel) < 0.01 and p.step_rms_rel < 0.05
    assert all(v >= 0 for v in p.beta + p.alpha)
    assert json.loads((tmp_path / "p.json").read_text())["config"] == dep.config_key


def test_exports_price_the_sampler_the_models_defaults_imply(tiny_fit, tmp_path, capsys):
    """Llama-2-7B's generation_config.json samples top-p: the exported feature map prices the
    vocabulary sort `simulate` prices (per step and per request), unless --generation-config vllm."""
    from bayesblis.blis_export import read_go_file
    from bayesblis.features.beta import BETA_FEATURES, feature_weights
    from bayesblis.features.physics import Deployment

    _, path, _ = tiny_fit
    k = BETA_FEATURES.index("sampling_s")
    for flag, sampler in (("auto", "sort"), ("vllm", "plain")):
        out = tmp_path / f"{flag}.json"
        main(["coefficients", str(path), *ARGS, "--generation-config", flag, "--format",
              "bayesblis-go", "--out", str(out)])
        assert ("a sort of the vocabulary" in capsys.readouterr().out) == (sampler == "sort")
        rec = read_go_file(out)
        fm = feature_weights(Deployment("llama-2-7b", "H100-SXM", tp=2, sampler=sampler))
        assert rec["bias"][k] == pytest.approx(fm.bias[k], rel=1e-12)
        assert np.asarray(rec["weights"])[:, k] == pytest.approx(fm.weights[:, k], rel=1e-12)
    assert read_go_file(tmp_path / "auto.json")["bias"][k] > 1e-4   # the sort: 0.19 ms a step
    assert read_go_file(tmp_path / "vllm.json")["bias"][k] == 0.0
