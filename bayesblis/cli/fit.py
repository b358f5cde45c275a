"""`bayesblis fit`: fit the hierarchical model to an ingested dataset."""

from __future__ import annotations

import click

from bayesblis.cli.params import PROBABILITY
from bayesblis.model.laplace import CHOICES as LAPLACE_CHOICES

DEFAULTS = {"draws": 1000, "max_draws": 4000, "extend_draws": 500, "tune": 1000,
            "target_accept": 0.98}
"""Sampler defaults of NUTS on rows: 1,000 draws per chain, then 500 more at a time until
the diagnostics pass, at most 4,000 (`hierarchy.sample_until_diagnosed`): a fixed number of
draws passed on some sampler seeds and not on others (the quick tour at 2,000 draws: tail
ESS 532 on seed 1, 132 on another). Model version 7, 2026-11-26, quick tour, seeds 1 / 2 /
3: stopped at 2,000 / 2,000 / 1,000 draws (checks at 1,000 and 1,500 failed on r_hat
1.010-1.013 for seeds 1-2), r_hat 1.007 / 1.005 / 1.009, bulk ESS 493 / 611 / 255, tail
ESS 532 / 525 / 221, no divergences, 199-279 s CPU. History of fixed draws: the quick tour (16 shared runs) went from r_hat 1.029,
bulk ESS 142, 1 divergence at 500 / 500 / 0.9 to 1.009-1.010, 181-257, 0-3 (seeds 1-2,
model version 3, 1,000 draws), with the centred run factors to 1.007, 416-481, 0-1, and with version 4's GEMV
factor 1.017 / 1.007, 340 / 397, 1 / 0, with version 5's TP all-reduce floor 1.006 / 1.006,
401 / 432, 1 / 0; model version 6: 1.010 / 1.005, 332 / 535, tail ESS 184 / 401,
0 / 0 at 1,000 draws (seed 1 fails on tail ESS), 1.003 / 1.006 / 1.005, 494 / 751 / 428,
tail 282 / 730 / 284, 0 / 0 / 0 at 1,500 draws (seeds 1-3 pass; 107-204 s); model version 7
(TP all-reduce per GPU): 1.006 / 1.004, 402 / 679, 1 / 2 divergences at 1,500
draws and 0.95, 1.011 / 1.013 and no divergences at 0.98, 1.007 / 1.005, 493 / 611, tail 532 /
525, 0 / 0 at 2,000 draws and 0.98 (seeds 1-2 pass; 236-248 s two fits at a time)
(docs/sampler.md)."""
SUMMARY_DEFAULTS = {"draws": 2000, "tune": 1000, "target_accept": 0.95}
"""Sampler defaults of --method summary (benchmarks/large_fit.py: clean at 200k-5M rows)."""


@click.command("fit")
@click.argument("dataset", type=click.Path(exists=True, file_okay=False))
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False),
              help="Posterior file to write (NetCDF), e.g. posterior.nc.")
@click.option("--method", type=click.Choice(["nuts", "pymc", "advi", "summary"]), default="nuts",
              show_default=True,
              help="nuts = nutpie NUTS; pymc = PyMC's NUTS; advi = variational; summary = NUTS "
                   "on per-configuration likelihood summaries, PSIS-corrected (large step "
                   "tables: see docs/large-traces.md).")
@click.option("--draws", default=None, type=click.IntRange(min=1),
              help="Draws per chain before the first diagnostics check [default: 1000]; "
                   "given without --max-draws: exactly this many.")
@click.option("--max-draws", default=None, type=click.IntRange(min=1),
              help="Sample on, 500 draws per chain at a time (half of --draws), until r_hat, "
                   "ESS, divergences and E-BFMI pass, at most this many draws per chain "
                   "[default: 4000 with --method nuts; nuts and summary only].")
@click.option("--tune", default=None, type=int,
              help="Tuning steps per chain [default: 1000].")
@click.option("--chains", default=2, show_default=True, type=int)
@click.option("--hardware", default=None,
              help="GPU of sources whose traces do not name one (e.g. H100 for inference-perf runs).")
@click.option("--max-obs-per-config", default=2000, show_default=True, type=int,
              help="Subsample windows per configuration (0 = all).")
@click.option("--priors", "priors_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="YAML/JSON file of prior overrides (see data_specs/priors.md).")
@click.option("--nuts-backend", type=click.Choice(["numba", "jax"]), default="numba",
              show_default=True,
              help="How nutpie evaluates the log density: numba, or jax (compiles in seconds, "
                   "faster on large tables; see docs/large-traces.md).")
@click.option("--laplace", type=click.Choice(list(LAPLACE_CHOICES)), default="auto",
              show_default=True,
              help="Precondition NUTS at the posterior mode (either backend; same posterior, "
                   "shorter trees and tuning on large tables). auto: JAX from 20,000 "
                   "observations.")
@click.option("--target-accept", default=None, type=PROBABILITY,
              help="NUTS target acceptance [default: 0.98]; raising it (e.g. 0.99) takes "
                   "smaller steps, slower, and does not always remove divergences "
                   "(docs/sampler.md).")
@click.option("--seed", default=1, show_default=True, type=int)
@click.option("--quiet", is_flag=True,
              help="No progress display (also off when stderr is not a terminal, and in CI).")
def command(dataset, out_path, method, draws, max_draws, tune, chains, hardware,
            max_obs_per_config, priors_path, nuts_backend, laplace, target_accept, seed, quiet):
    """Fit alpha/beta with partial pooling; print diagnostics; write POSTERIOR.nc."""
    from bayesblis.console import show_progress
    from bayesblis.design import build_model_data
    from bayesblis.io.dataset import Dataset
    from bayesblis.model.fitting import fit_and_save, load_prior_overrides

    defaults = SUMMARY_DEFAULTS if method == "summary" else DEFAULTS
    if max_draws is None and draws is None and method == "nuts":
        max_draws = defaults["max_draws"]
    draws = defaults["draws"] if draws is None else draws
    if max_draws is not None and method not in ("nuts", "summary"):
        raise click.BadParameter(f"sampling until the diagnostics pass needs NUTS on nutpie "
                                 f"(--method nuts or summary), not {method}",
                                 param_hint="'--max-draws'")
    if max_draws is not None and max_draws < draws:
        raise click.BadParameter(f"{max_draws} < --draws {draws} (expected at least --draws)",
                                 param_hint="'--max-draws'")
    tune = defaults["tune"] if tune is None else tune
    target_accept = defaults["target_accept"] if target_accept is None else target_accept
    ds = Dataset.load(dataset)
    data = build_model_data(ds, hardware=hardware,
                            max_obs_per_config=max_obs_per_config or None, seed=seed)
    priors = load_prior_overrides(priors_path) if priors_path else None
    fit_and_save(data, out_path, method=method, priors=priors,
                 sampler_config={"draws": draws, "max_draws": max_draws,
                                 "extend_draws": max(draws // 2, 1) if max_draws else None,
                                 "tune": tune, "chains": chains, "seed": seed,
                                 "nuts_backend": nuts_backend, "target_accept": target_accept,
                                 "laplace": LAPLACE_CHOICES[laplace]},
                 echo=click.echo, progressbar=show_progress(quiet))
