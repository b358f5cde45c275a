"""`bayesblis calibrate`: a posterior for a new deployment from a few minutes of its traces,
with the fitted population as the prior (no refit; see bayesblis/calibrate.py)."""

from __future__ import annotations

from pathlib import Path

import click

from bayesblis.cli.params import FiniteFloatRange


@click.command("calibrate")
@click.argument("posterior", type=click.Path(exists=True, dir_okay=False))
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False),
              help="Calibrated posterior file to write (NetCDF), e.g. new.nc.")
@click.option("--hardware", default=None,
              help="GPU of sources whose traces do not name one (e.g. H100 for "
                   "inference-perf runs and BLIS traces without server.hardware).")
@click.option("--max-requests", type=click.IntRange(min=0), default=None,
              help="Keep only each run's first N requests (by arrival); 0: the population-level "
                   "prior alone.")
@click.option("--first-seconds", type=FiniteFloatRange(min=0), default=None,
              help="Keep only the requests arriving in each run's first S seconds.")
@click.option("--warmup-s", type=FiniteFloatRange(min=0), default=None,
              help="Seconds at the start of each client-traced run whose requests give no "
                   "window (a cold server runs slower); --max-requests and --first-seconds "
                   "count after it. [default: 20]")
@click.option("--max-obs-per-config", default=2000, show_default=True, type=int,
              help="Subsample windows per configuration (0 = all).")
@click.option("--as-new", is_flag=True,
              help="Answer configurations the posterior fitted as new configurations of their "
                   "levels (population-level prior; e.g. a new vLLM version of a fitted "
                   "deployment). Default: their own posterior is the prior.")
@click.option("--draws", default=1000, show_default=True, type=int)
@click.option("--tune", default=300, show_default=True, type=int)
@click.option("--chains", default=2, show_default=True, type=int)
@click.option("--seed", default=1, show_default=True, type=int)
@click.option("--quiet", is_flag=True,
              help="No progress display (also off when stderr is not a terminal, and in CI).")
def command(posterior, inputs, out_path, hardware, max_requests, first_seconds, warmup_s,
            max_obs_per_config, as_new, draws, tune, chains, seed, quiet):
    """Calibrate POSTERIOR.nc to the deployment(s) of INPUTS (ingested dataset folders or
    raw traces: inference-perf folders, OTEL traces, BLIS TraceV2/V3 header .yaml + .csv
    pairs); write NEW.nc for coefficients,
    simulate and plan."""
    import time

    from bayesblis.calibrate import (WARMUP_S, calibrate, calibration_data, format_calibration,
                                     save_calibration)
    from bayesblis.console import show_progress
    from bayesblis.io.dataset import Dataset, ingest
    from bayesblis.model.diagnostics import format_diagnostics
    from bayesblis.model.store import load_posterior

    started = time.perf_counter()
    warmup_s = WARMUP_S if warmup_s is None else warmup_s
    parent = load_posterior(posterior)
    sources = []
    raw = []
    for item in inputs:
        if (Path(item) / "manifest.json").is_file():
            sources += Dataset.load(item).sources
        else:
            raw.append(item)
    if raw:
        sources += ingest(raw).sources
    configs, obs = calibration_data(Dataset(sources=sources), hardware=hardware,
                                    max_requests=max_requests, first_seconds=first_seconds,
                                    max_obs_per_config=max_obs_per_config or None, seed=seed,
                                    warmup_s=warmup_s)
    click.echo(f"calibrating {posterior} to {len(configs)} configuration(s) on "
               f"{len(obs)} window observation(s) ...")
    cal = calibrate(parent, configs, obs, progressbar=show_progress(quiet), seed=seed,
                    as_new=as_new,
                    sampler_config={"draws": draws, "tune": tune, "chains": chains, "seed": seed})
    cal.fit_info["calibration"].update(
        {"inputs": [str(i) for i in inputs], "max_requests": max_requests,
         "first_seconds": first_seconds, "hardware": hardware,
         "warmup_s": warmup_s})
    if cal.fit_info["diagnostics"].get("passed") is not None:
        click.echo(format_diagnostics(cal.fit_info["diagnostics"]))
    click.echo(format_calibration(cal))
    if len(obs):
        from bayesblis.model.bounds import format_bound_report

        click.echo(format_bound_report(cal.fit_info["physical_bounds"]))
    save_calibration(cal, out_path)
    click.echo(f"calibration took {time.perf_counter() - started:.1f} s "
               f"(sampling and prior {cal.fit_info['wall_s']:.1f} s)")
    click.echo(f"wrote {out_path}")
