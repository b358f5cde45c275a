"""`bayesblis fit` end to end on the bundled samples (a real, short nutpie fit on JAX,
Laplace-preconditioned): the `cli_fits` fixture (tests/model/conftest.py) runs it in a
terminal; test_fit_progress.py checks the progress display of the same run."""

from bayesblis.model.store import load_posterior


def test_cli_fit_on_the_jax_backend_writes_a_loadable_posterior(cli_fits):
    output, out = cli_fits["shown"]
    assert "r_hat" in output and f"wrote {out}" in output
    post = load_posterior(out)
    assert post.fit_info["sampler_config"]["nuts_backend"] == "jax"
    assert post.fit_info["sampler_config"]["target_accept"] == 0.95
    assert post.fit_info["sampler_config"]["laplace"] is True
    assert post.fit_info["laplace"]["n_evals"] > 0  # sampled around the posterior mode
    assert post.idata.posterior.sizes["draw"] == 20
