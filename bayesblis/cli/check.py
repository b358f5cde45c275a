"""`bayesblis check`: posterior and prior predictive checks per configuration (CHECK.json)."""

from __future__ import annotations

from pathlib import Path

import click


def ppc_options(command):
    """The options shared by `check` and `report`: draws, LOO, and where the fitted data is."""
    options = [
        click.option("--draws", "n_draws", default=200, show_default=True,
                     type=click.IntRange(min=10),
                     help="Posterior draws used (evenly thinned)."),
        click.option("--no-loo", is_flag=True, help="Skip PSIS-LOO (no log-likelihood evaluation)."),
        click.option("--dataset", type=click.Path(exists=True), default=None,
                     help="Dataset folder the posterior was fitted on (`check` also takes the raw "
                          "traces: an inference-perf folder, an OTEL run, a BLIS TraceV2/V3 "
                          "header); only needed for posterior files that hold no observation "
                          "table."),
        click.option("--max-obs-per-config", type=int, default=None,
                     help="With --dataset: the subsample the fit used (the demo uses 400; the seed "
                          "must be the fit's too)."),
        click.option("--seed", default=0, show_default=True, type=int),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@click.command("check")
@click.argument("posterior", type=click.Path(exists=True, dir_okay=False))
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None,
              help="Write the checks as JSON (data_specs/check.md), e.g. check.json.")
@click.option("--plots", "plots_dir", type=click.Path(file_okay=False), default=None,
              help="Folder for PNG figures: one per configuration (observed vs replicated "
                   "ECDF and PIT), coverage, Pareto k and the load response.")
@ppc_options
@click.option("--hardware", default=None, help="With --dataset: GPU of sources that name none.")
def command(posterior, out_path, plots_dir, n_draws, no_loo, dataset, hardware,
            max_obs_per_config, seed):
    """Observed vs replicated observations, interval coverage, PIT and PSIS-LOO per
    configuration and observation kind; flags configurations whose fit is poor. Then the
    prior predictive check: where each observed median falls among the replicates of the
    prior draws the fit stored."""
    import tempfile

    from bayesblis.atomic import write_json
    from bayesblis.ppc import check_posterior, format_check

    with tempfile.TemporaryDirectory(prefix="bayesblis-check-") as tmp:
        doc, draws = check_posterior(posterior, n_draws=n_draws, seed=seed, loo=not no_loo,
                                     dataset=dataset_folder(dataset, tmp), hardware=hardware,
                                     max_obs_per_config=max_obs_per_config, return_draws=True)
    click.echo(format_check(doc))
    if out_path:
        write_json(out_path, doc)
        click.echo(f"wrote {out_path}")
    if plots_dir:
        written = write_plots(doc, draws, Path(plots_dir), seed=seed)
        click.echo(f"wrote {len(written)} figures to {plots_dir}")


def dataset_folder(path, tmp) -> str | None:
    """`path` when it is an ingested dataset folder (or None); raw traces (inference-perf
    folder, OTEL run, BLIS TraceV2/V3 pair) are ingested into a dataset under `tmp`."""
    if path is None or (Path(path) / "manifest.json").is_file():
        return path
    from bayesblis.io.dataset import ingest

    return str(ingest([path]).save(Path(tmp) / "dataset"))


def write_plots(doc, draws, folder: Path, seed: int = 0) -> list[Path]:
    """PNG figures of a check into `folder`; returns the paths."""
    import re

    from bayesblis.report.figures import (fig_coverage, fig_load_response, fig_pareto_k,
                                          fig_ppc_config, save_png)

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    figs = [("coverage.png", fig_coverage(doc))]
    if draws.loo is not None:
        figs.append(("pareto_k.png", fig_pareto_k(draws)))
    if doc.get("load_response"):
        figs.append(("load_response.png", fig_load_response(doc["load_response"])))
    for i, cfg in enumerate(dict.fromkeys(draws.data.obs["config"].astype(str))):
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", cfg)
        figs.append((f"ppc_{i + 1:02d}_{safe}.png", fig_ppc_config(draws, cfg, seed=seed)))
    for name, fig in figs:
        save_png(fig, folder / name)
        written.append(folder / name)
    return written
