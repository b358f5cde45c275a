"""Round trips: the JSON and BLIS YAML `bayesblis coefficients` writes, read back by
`simulate --coefficients` and `plan --coefficients` (`coefficients.read_coefficients_file`).

The posterior is the shared tiny fit (conftest.py); Llama-2-7B on H100-SXM at TP 1 is a new
configuration of its seen levels (population-level draws, no flag needed). The scenario is
a short synthetic workload of that deployment."""

import json
import shutil
import warnings

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from bayesblis.cli import cli
from bayesblis.errors import InputError, InputWarning

DEPLOYMENT = ("--model", "llama-2-7b", "--hardware", "H100-SXM", "--tp", "1")
SCENARIO = {"model": "llama-2-7b", "hardware": "H100-SXM",
            "vllm": {"max_num_batched_tokens": 512, "max_num_seqs": 32, "max_model_len": 2048},
            "workload": {"stages": [{"rate": 4, "duration": 8}],
                         "prompt_tokens": {"dist": "uniform", "min": 100, "max": 400},
                         "output_tokens": 30}}


@pytest.fixture(scope="module")
def exported(tiny_fit, tmp_path_factory):
    """(folder, posterior path): the tiny fit's coefficients for Llama-2-7B on H100-SXM
    written by the CLI as c.yaml + c.json, and the scenario sc.yaml."""
    _, path, _ = tiny_fit
    d = tmp_path_factory.mktemp("coef")
    r = CliRunner().invoke(cli, ["coefficients", str(path), *DEPLOYMENT, "--out", str(d / "c.yaml")])
    assert r.exit_code == 0, r.output
    (d / "sc.yaml").write_text(yaml.safe_dump(SCENARIO))
    return d, path


def _deployment():
    from bayesblis.features.physics import Deployment

    return Deployment("llama-2-7b", "H100-SXM", tp=1)


def test_the_export_json_is_read_as_its_medians_with_the_intervals_kept(exported):
    from bayesblis.coefficients import read_coefficients_file
    from bayesblis.features.beta import BETA_FEATURES

    d, _ = exported
    record = json.loads((d / "c.json").read_text())
    f = read_coefficients_file(d / "c.json")
    assert (f.format, f.point, f.n_sets) == ("export-json", "median", 1)
    # the tiny fit has no kv_token_layer_s / tp_sync_s: absent terms (0), said so
    np.testing.assert_allclose(f.beta[0], [record["beta"].get(n, {"median": 0.0})["median"]
                                           for n in BETA_FEATURES])
    assert any("tp_sync_s" in n for n in f.notes)
    assert f.intervals["beta"]["weight_traffic_s"] == record["beta"]["weight_traffic_s"]
    assert f.config == record["config"]
    meta = f.metadata()
    assert "median" in meta["meaning"] and meta["intervals"]["alpha"]
    assert any("population-level" in n for n in meta["notes"])


def test_the_blis_yaml_is_read_through_the_json_written_beside_it(exported):
    from bayesblis.coefficients import read_coefficients_file

    d, _ = exported
    assert "trained_physics_coefficients" in yaml.safe_load((d / "c.yaml").read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("error")            # exact: no approximation warning
        f = read_coefficients_file(d / "c.yaml")
    j = read_coefficients_file(d / "c.json")
    assert f.format == "blis-yaml" and f.companion == str(d / "c.json")
    np.testing.assert_array_equal(f.beta, j.beta)
    np.testing.assert_array_equal(f.alpha, j.alpha)


def test_a_blis_yaml_alone_maps_blis_slots_back_with_a_warning(exported, tmp_path):
    from bayesblis.coefficients import read_coefficients_file
    from bayesblis.features.beta import BETA_FEATURES, NO_BLIS_SLOT, to_blis_beta

    d, _ = exported
    shutil.copy(d / "c.yaml", tmp_path / "alone.yaml")
    with pytest.warns(InputWarning, match="approximate"):
        f = read_coefficients_file(tmp_path / "alone.yaml")
    assert f.point == "blis"
    dep = _deployment()
    cd = f.draws_for(dep)
    blis = yaml.safe_load((d / "c.yaml").read_text())["trained_physics_coefficients"]
    back = to_blis_beta(dict(zip(BETA_FEATURES, cd.beta[0])), tp=1, factors=dep.feature_factors)
    np.testing.assert_allclose(back, blis["beta_coeffs"], rtol=1e-12)   # the export's slots
    record = json.loads((d / "c.json").read_text())
    shared = ("layer_overhead_s", "request_overhead_s", "sampling_s", "gemm_fixed_s")
    for i, name in enumerate(BETA_FEATURES):   # slots with a bayesblis twin keep their medians
        if name not in NO_BLIS_SLOT and name not in shared:
            assert cd.beta[0, i] == pytest.approx(record["beta"][name]["mean"], rel=1e-5), name
    # beta6 holds the per-request cost and the sampler's at its priced µs per request
    mean = {n: record["beta"].get(n, {"mean": 0.0})["mean"] for n in shared}  # tiny fit: no sampling_s
    assert cd.beta[0, BETA_FEATURES.index("sampling_s")] == 0.0
    assert cd.beta[0, BETA_FEATURES.index("request_overhead_s")] == pytest.approx(
        mean["request_overhead_s"] + mean["sampling_s"] * dep.feature_factors["sampling_s"], rel=1e-5)
    # beta5 the per-layer cost and the GEMMs' fixed time at its µs per layer
    assert cd.beta[0, BETA_FEATURES.index("gemm_fixed_s")] == 0.0
    assert cd.beta[0, BETA_FEATURES.index("layer_overhead_s")] == pytest.approx(
        mean["layer_overhead_s"] + mean["gemm_fixed_s"] * dep.feature_factors["gemm_fixed_s"], rel=1e-5)


def test_simulate_reads_both_files_and_says_what_a_set_means(exported):
    d, _ = exported
    results = {}
    for name in ("c.json", "c.yaml"):
        out = d / f"r-{name}.json"
        r = CliRunner().invoke(cli, ["simulate", str(d / "sc.yaml"), "--coefficients", str(d / name),
                                     "--draws", "3", "--out", str(out)])
        assert r.exit_code == 0, r.output + repr(r.exception)
        assert "posterior median" in r.output
        results[name] = json.loads(out.read_text())
    for res in results.values():
        meta = res["metadata"]["coefficients"]
        assert meta["point"] == "median" and meta["intervals"]["beta"]
        assert res["metadata"]["draws"] == 1          # no step noise in the file: one run
    a, b = (results[n]["summary"]["e2e_mean_s"]["median"] for n in ("c.json", "c.yaml"))
    assert a == b


def test_simulate_runs_the_draws_a_file_carries(exported, tmp_path):
    """An export with a `draws` object: the result's interval is the draws' spread."""
    from bayesblis.coefficients import deployment_draws
    from bayesblis.model.store import load_posterior

    d, post_path = exported
    cd = deployment_draws(load_posterior(post_path), _deployment(), n_draws=6, seed=1)
    record = json.loads((d / "c.json").read_text())
    record["draws"] = {"beta": {n: cd.beta[:, i].tolist() for i, n in enumerate(cd.beta_features)},
                       "alpha": {n: cd.alpha[:, i].tolist() for i, n in enumerate(cd.alpha_features)}}
    path = tmp_path / "draws.json"
    path.write_text(json.dumps(record))
    out = tmp_path / "r.json"
    r = CliRunner().invoke(cli, ["simulate", str(d / "sc.yaml"), "--coefficients", str(path),
                                 "--draws", "6", "--out", str(out)])
    assert r.exit_code == 0, r.output + repr(r.exception)
    res = json.loads(out.read_text())
    assert res["metadata"]["coefficients"]["point"] == "draws" and res["metadata"]["draws"] == 6
    s = res["summary"]["e2e_mean_s"]
    assert s["lo"] < s["hi"]


def test_plan_reads_both_files(exported):
    d, _ = exported
    for name in ("c.json", "c.yaml"):
        out = d / f"plan-{name}.json"
        r = CliRunner().invoke(cli, [
            "plan", str(d / "sc.yaml"), "--coefficients", str(d / name),
            "--slo", "e2e_mean<5", "--draws", "2", "--duration-s", "6", "--start-rate", "4",
            "--max-evals", "3", "--no-progress", "--out", str(out)])
        assert r.exit_code == 0, r.output + repr(r.exception)
        plan = json.loads(out.read_text())
        assert plan["metadata"]["coefficients"]["point"] == "median"
        assert plan["options"][0]["coefficients"]["seen_config"] is True
        assert str(d / name) in plan["options"][0]["coefficients"]["source"]
    r = CliRunner().invoke(cli, ["plan", str(d / "sc.yaml"), "--slo", "e2e_mean<5",
                                 "--out", str(d / "p.json")])
    assert r.exit_code == 2 and "exactly one of --posterior or --coefficients" in r.output


@pytest.mark.parametrize("edit, field", [
    (lambda r: r["beta"]["weight_traffic_s"].pop("median"), "beta.weight_traffic_s.median"),
    (lambda r: r["beta"]["weight_traffic_s"].update(median="x"), "beta.weight_traffic_s.median"),
    (lambda r: r["alpha"].pop("alpha_const_s"), "alpha.alpha_const_s"),
    (lambda r: r.update(draws={"beta": {}, "alpha": {}}), "draws.beta.prefill_compute_s"),
])
def test_a_bad_export_json_names_the_field(exported, tmp_path, edit, field):
    from bayesblis.coefficients import read_coefficients_file

    d, _ = exported
    record = json.loads((d / "c.json").read_text())
    edit(record)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(record))
    with pytest.raises(InputError) as exc:
        read_coefficients_file(path)
    assert exc.value.field == field and str(path) in str(exc.value)


def test_a_bad_blis_yaml_names_the_field(tmp_path):
    from bayesblis.coefficients import read_coefficients_file

    path = tmp_path / "b.yaml"
    path.write_text("trained_physics_coefficients:\n  alpha_coeffs: [1, 0, 2]\n  beta_coeffs: [1, 2]\n")
    with pytest.raises(InputError) as exc:
        read_coefficients_file(path)
    assert exc.value.field == "trained_physics_coefficients.beta_coeffs"
    assert "10 or 11 numbers" in str(exc.value)


def test_bayesblis_go_files_and_per_draw_files_are_read_as_draws(exported, tmp_path):
    """`coefficients --format bayesblis-go` (the posterior mean, or one file per draw with
    --draws) and `--draws N` BLIS YAMLs: simulate takes several files as the draws."""
    from bayesblis.blis_export import read_go_file
    from bayesblis.coefficients import read_coefficient_files, read_coefficients_file

    d, post_path = exported
    runner = CliRunner()
    r = runner.invoke(cli, ["coefficients", str(post_path), *DEPLOYMENT, "--format", "bayesblis-go",
                            "--out", str(tmp_path / "mean.json")])
    assert r.exit_code == 0, r.output
    mean = read_coefficients_file(tmp_path / "mean.json")
    assert (mean.format, mean.point) == ("bayesblis-go", "mean")
    np.testing.assert_array_equal(mean.beta[0], read_go_file(tmp_path / "mean.json")["beta"])
    r = runner.invoke(cli, ["coefficients", str(post_path), *DEPLOYMENT, "--format", "bayesblis-go",
                            "--draws", "3", "--out", str(tmp_path / "g.json")])
    assert r.exit_code == 0, r.output
    files = sorted(tmp_path.glob("g.draw*.json"))
    sets = read_coefficient_files(files)
    assert (sets.point, sets.n_sets) == ("draws", 3)
    out = tmp_path / "r.json"
    args = ["simulate", str(d / "sc.yaml"), "--draws", "3", "--out", str(out)]
    r = runner.invoke(cli, [*args, *[a for f in files for a in ("--coefficients", str(f))]])
    assert r.exit_code == 0, r.output + repr(r.exception)
    res = json.loads(out.read_text())
    assert res["metadata"]["draws"] == 3 and res["metadata"]["coefficients"]["n_sets"] == 3
    # per-draw BLIS YAMLs have no JSON of their own: BLIS slots mapped back, said so
    r = runner.invoke(cli, ["coefficients", str(post_path), *DEPLOYMENT, "--draws", "2",
                            "--out", str(tmp_path / "t.yaml")])
    assert r.exit_code == 0, r.output
    with pytest.warns(InputWarning, match="approximate"):
        yamls = read_coefficient_files(sorted(tmp_path.glob("t.draw*.yaml")))
    assert yamls.n_sets == 2 and yamls.draws_for(_deployment(), 2).beta.shape[0] == 2


def test_a_blis_yaml_unlike_its_json_is_read_through_the_json_with_a_warning(exported, tmp_path):
    """A YAML `coefficients` wrote beside its JSON whose lists are not the JSON's BLIS slots
    (a projection onto BLIS's basis): the JSON's coefficients, with a warning and a note."""
    from bayesblis.coefficients import read_coefficients_file

    d, _ = exported
    shutil.copy(d / "c.json", tmp_path / "p.json")
    text = (d / "c.yaml").read_text().splitlines()
    i = next(k for k, line in enumerate(text) if "beta1a_prefill_compute" in line)
    text[i] = "    - 9.5  # beta1a_prefill_compute"
    (tmp_path / "p.yaml").write_text("\n".join(text) + "\n")
    with pytest.warns(InputWarning, match="not the BLIS slots"):
        f = read_coefficients_file(tmp_path / "p.yaml")
    j = read_coefficients_file(d / "c.json")
    np.testing.assert_array_equal(f.beta, j.beta)
    assert any("projection" in n for n in f.metadata()["notes"])


def test_files_of_two_configurations_are_not_one_set_of_draws(exported, tmp_path):
    from bayesblis.coefficients import read_coefficient_files

    d, _ = exported
    record = json.loads((d / "c.json").read_text())
    record["config"] = "llama-2-70b|H100-SXM|tp4|ep1|fp16"
    (tmp_path / "other.json").write_text(json.dumps(record))
    with pytest.raises(InputError) as exc:
        read_coefficient_files([d / "c.json", tmp_path / "other.json"])
    assert exc.value.field == "config"
