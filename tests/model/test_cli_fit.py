"""`bayesblis fit` end to end on the bundled samples (a real, short nutpie fit on JAX,
Laplace-preconditioned)."""

from click.testing import CliRunner

from bayesblis.cli import cli
from bayesblis.model.store import load_posterior


def test_cli_fit_on_the_jax_backend_writes_a_loadable_posterior(tmp_path):
    runner = CliRunner()
    r = runner.invoke(cli, ["ingest", "--sample", "--quiet", "--out", str(tmp_path / "ds")])
    assert r.exit_code == 0, r.output
    out = tmp_path / "posterior.nc"
    r = runner.invoke(cli, ["fit", str(tmp_path / "ds"), "--out", str(out), "--hardware", "H100",
                            "--draws", "20", "--tune", "20", "--chains", "1",
                            "--max-obs-per-config", "40", "--nuts-backend", "jax",
                            "--laplace", "on", "--target-accept", "0.95"])
    assert r.exit_code == 0, r.output
    assert "r_hat" in r.output and f"wrote {out}" in r.output
    post = load_posterior(out)
    assert post.fit_info["sampler_config"]["nuts_backend"] == "jax"
    assert post.fit_info["sampler_config"]["target_accept"] == 0.95
    assert post.fit_info["sampler_config"]["laplace"] is True
    assert post.fit_info["laplace"]["n_evals"] > 0  # sampled around the posterior mode
    assert post.idata.posterior.sizes["draw"] == 20
