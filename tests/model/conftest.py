"""One shared tiny real fit for the model tests."""

import pytest

from model_helpers import synthetic_data


@pytest.fixture(scope="session")
def tiny_fit(tmp_path_factory):
    """A really tiny real fit (nutpie NUTS with the package's default backend, numba; tens
    of draws), saved to a NetCDF file.

    The suite's one fast fit on nutpie's numba backend (the default of `LatencyModel` and
    `bayesblis fit`; about a minute of compiling). It used PyMC's own sampler
    (method="pymc"), which spent minutes compiling C code on a fresh machine; that path
    stays covered by tests/client/test_validate.py.

    4 configurations (2 GPUs x a dense and a MoE family, TP 2; llama on H100 at TP 2 is the
    seen configuration test_coefficients.py asks for): numba's compile time grows with
    the configurations (one matrix product each in the log density), about 40 s here
    instead of 65 s for the 12 of `synthetic_data`'s default."""
    from bayesblis.model.hierarchy import LatencyModel
    from bayesblis.model.store import save_posterior

    data, truth = synthetic_data(n_obs=30, families=(("llama", "dense"), ("mixtral", "moe")),
                                 tps=(2,))
    model = LatencyModel(sampler_config={"draws": 40, "tune": 40, "chains": 1, "seed": 3,
                                         "nuts_backend": "numba"})
    model.build_model(data)
    model.sample_prior_predictive(20)
    with pytest.warns(Warning):  # tens of draws cannot pass the ESS threshold
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
