"""Shared real fits for the model tests: the tiny numba fit, and the `bayesblis fit` CLI runs."""

import pytest

from model_helpers import tiny_fleet


@pytest.fixture(scope="session")
def tiny_fit(tmp_path_factory):
    """A tiny real fit (nutpie NUTS with the package's default backend, numba; 80 draws x 2
    chains), saved to a NetCDF file: (model, path, {config: true beta} of its
    configurations).

    The suite's one fast fit on nutpie's numba backend (the default of `LatencyModel` and
    `bayesblis fit`; compiling is most of its cost). It used PyMC's own sampler
    (method="pymc"), which spent minutes compiling C code on a fresh machine; that path
    stays covered by tests/client/test_validate.py.

    Data: `model_helpers.tiny_fleet`, 3 of 4 configurations (llama on H100 at TP 2 is the
    seen configuration test_coefficients.py asks for; the held-out A100 MoE is the new
    configuration of test_calibrate.py, whose population this fit also is: 80 draws x 2
    chains for its quantiles). Few configurations: numba's compile time grows with them
    (one matrix product each in the log density), about 40 s here instead of 65 s for the
    12 of `synthetic_data`'s default; sampling is a second or two."""
    from bayesblis.model.hierarchy import LatencyModel
    from bayesblis.model.store import save_posterior

    data, truth, _, _ = tiny_fleet()
    model = LatencyModel(sampler_config={"draws": 80, "tune": 100, "chains": 2, "seed": 3,
                                         "nuts_backend": "numba"})
    model.build_model(data)
    model.sample_prior_predictive(20)
    with pytest.warns(Warning):  # this short fit does not pass the ESS and r_hat thresholds
        model.fit(method="nuts", progressbar=False)
    path = tmp_path_factory.mktemp("fit") / "posterior.nc"
    save_posterior(model, path)
    return model, path, truth


CLI_FIT_ARGS = ("--hardware", "H100", "--draws", "20", "--tune", "20", "--chains", "1",
                "--max-obs-per-config", "40", "--nuts-backend", "jax",
                "--target-accept", "0.95")
"""`bayesblis fit` settings of `cli_fits`: a real, short nutpie fit on JAX."""


@pytest.fixture(scope="session")
def cli_fits(tmp_path_factory):
    """`bayesblis fit` on the ingested bundled samples, twice side by side, each in its own
    process on a pseudo-terminal (CLI_FIT_ARGS): as a person at a terminal runs it,
    Laplace-preconditioned, and with --quiet and --laplace off (the preconditioning added
    10 s to a fit here).
    {"shown" | "quiet": (terminal output, posterior path)}.

    One pair of fits for test_cli_fit.py (the shown run's posterior file) and
    test_fit_progress.py (the progress display of both): each test ran its own fits."""
    from click.testing import CliRunner

    from bayesblis.cli import cli
    from model_helpers import fits_in_terminals

    root = tmp_path_factory.mktemp("cli_fit")
    r = CliRunner().invoke(cli, ["ingest", "--sample", "--quiet", "--out", str(root / "ds")])
    assert r.exit_code == 0, r.output
    paths = {"shown": root / "shown.nc", "quiet": root / "quiet.nc"}
    shown, quiet = fits_in_terminals(
        ["fit", root / "ds", "--out", paths["shown"], *CLI_FIT_ARGS, "--laplace", "on"],
        ["fit", root / "ds", "--out", paths["quiet"], *CLI_FIT_ARGS, "--laplace", "off",
         "--quiet"])
    return {"shown": (shown, paths["shown"]), "quiet": (quiet, paths["quiet"])}
