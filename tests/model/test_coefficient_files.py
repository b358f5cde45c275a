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
    back = to_blis_beta(dict(zip(BETA_FEATURES, cd.beta[0])), tp=1,
                        weight_stream_factor=dep.weight_stream_factor)
    np.testing.assert_allclose(back, blis["beta_coeffs"], rtol=1e-12)   # the export's slots
    record = json.loads((d / "c.json").read_text())
    for i, name in enumerate(BETA_FEATURES):   # slots with a bayesblis twin keep their medians
        if name not in NO_BLIS_SLOT and name != "layer_overhead_s":
            assert cd.beta[0, i] == pytest.approx(record["beta"][name]["mean"], rel=1e-5), name


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
