"""NUTS sampled until its diagnostics pass (`max_draws`): checkpoints, the kept draws, and
their independence of when the running sampler is looked at (real tiny JAX fits)."""

import numpy as np

from bayesblis.model.hierarchy import LatencyModel

from model_helpers import synthetic_data

SAMPLER = {"tune": 60, "chains": 2, "seed": 5, "nuts_backend": "jax", "laplace": False,
           "target_accept": 0.9}


def _model(**sampler):
    data, _ = synthetic_data(n_obs=8, families=(("llama", "dense"),), tps=(1,))
    model = LatencyModel(sampler_config={**SAMPLER, **sampler})
    model.build_model(data)
    return model


def test_sampling_stops_at_the_first_checkpoint_that_passes_or_at_max_draws():
    model = _model(draws=20, max_draws=60, extend_draws=20)
    idata = model.fit(method="nuts", progressbar=False)
    checks = model.fit_info["draw_checks"]
    assert [c["draws"] for c in checks] == list(range(20, 20 * len(checks) + 1, 20))
    assert idata.posterior.sizes["draw"] == checks[-1]["draws"] <= 60
    assert model.fit_info["diagnostics"]["draws"] == checks[-1]["draws"]
    assert all(not c["passed"] for c in checks[:-1])  # every earlier checkpoint failed
    last = checks[-1]
    assert last["passed"] or last["draws"] == 60 or any("divergent" in p for p in last["problems"])
    assert np.isfinite(idata.posterior["beta"].values).all()
    assert "mean_s" not in idata.posterior

    # the kept draws are the first draws of each chain of an uninterrupted run
    full = _model(draws=60).fit(method="nuts", progressbar=False)
    n = checks[-1]["draws"]
    np.testing.assert_allclose(idata.posterior["beta"].values,
                               full.posterior["beta"].isel(draw=slice(0, n)).values)


def test_a_passing_first_checkpoint_keeps_its_draws():
    """With an impossible-to-miss target (max_draws = draws) the run is the fixed one."""
    model = _model(draws=20, max_draws=20)
    model.fit(method="nuts", progressbar=False)
    assert model.fit_info["draw_checks"] is None
    assert model.idata.posterior.sizes["draw"] == 20


def test_cli_max_draws_below_draws_is_refused(tmp_path):
    from click.testing import CliRunner

    from bayesblis.cli import cli

    r = CliRunner().invoke(cli, ["fit", str(tmp_path), "--out", str(tmp_path / "p.nc"),
                                 "--draws", "200", "--max-draws", "100"])
    assert r.exit_code == 2 and "--max-draws" in r.output and "at least --draws" in r.output
    r = CliRunner().invoke(cli, ["fit", str(tmp_path), "--out", str(tmp_path / "p.nc"),
                                 "--method", "advi", "--max-draws", "100"])
    assert r.exit_code == 2 and "needs NUTS" in r.output


def test_cli_fit_samples_until_diagnosed(tmp_path):
    """`bayesblis fit --draws N --max-draws M` on the bundled samples: the run's checkpoints
    are printed and kept in the file's fit_info."""
    from click.testing import CliRunner

    from bayesblis.cli import cli
    from bayesblis.model.store import load_posterior

    runner = CliRunner()
    r = runner.invoke(cli, ["ingest", "--sample", "--quiet", "--out", str(tmp_path / "ds")])
    assert r.exit_code == 0, r.output
    out = tmp_path / "post.nc"
    r = runner.invoke(cli, ["fit", str(tmp_path / "ds"), "--out", str(out), "--hardware", "H100",
                            "--draws", "20", "--max-draws", "40", "--tune", "30", "--chains", "2",
                            "--max-obs-per-config", "40", "--nuts-backend", "jax",
                            "--laplace", "off", "--quiet"])
    assert r.exit_code == 0, r.output + repr(r.exception)
    assert "20 draws per chain, then more until the diagnostics pass (at most 40)" in r.output
    post = load_posterior(out)
    checks = post.fit_info["draw_checks"]
    assert checks[0]["draws"] == 20 and checks[-1]["draws"] in (20, 30, 40)
    assert post.idata.posterior.sizes["draw"] == checks[-1]["draws"]
    assert post.fit_info["sampler_config"]["max_draws"] == 40
