"""`bayesblis ingest PATH [PATH ...] --out DATASET`: read traces into a dataset folder."""

from __future__ import annotations

import time

import click


@click.command("ingest")
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=str))
@click.option("--out", "out", required=True, type=click.Path(path_type=str),
              help="Dataset folder to write (replaced atomically if it is a dataset).")
@click.option("--sample", is_flag=True, help="Ingest the bundled sample inputs (no PATH needed).")
@click.option("--hardware", default=None,
              help="GPU name recorded for sources whose inputs do not name one (e.g. H100-SXM-80GB).")
@click.option("--scheduler", default=None,
              help="Read the inputs on Dask, one task per input: 'local' (a LocalCluster) or "
                   "tcp://host:port (workers must see the same paths). Default: serially in "
                   "this process (same dataset).")
@click.option("--dask-workers", type=click.IntRange(min=1), default=2, show_default=True,
              help="Worker processes of --scheduler local.")
@click.option("--quiet", is_flag=True,
              help="No progress bar (also off when stderr is not a terminal, and in CI).")
def command(paths, out, sample, hardware, scheduler, dask_workers, quiet):
    """Read inference-perf folders, OTEL traces.json, kv_events.jsonl, TraceV2 pairs or
    operator-profiles folders (compute/**/mlp.csv, network/*/all_reduce.csv)
    (kind auto-detected; a folder of experiments expands to its children) into a
    dataset folder, and print one summary row per source."""
    import pandas as pd

    from bayesblis.console import progress_bar
    from bayesblis.distributed import check_scheduler
    from bayesblis.io.dataset import ingest, sample_paths, warn_unknown_name

    check_scheduler(scheduler)
    if hardware:
        warn_unknown_name("hardware", hardware, "option --hardware")

    if sample:
        paths = tuple(str(p) for p in sample_paths()) + tuple(paths)
    if not paths:
        raise click.UsageError("give at least one PATH (or --sample)")
    t0 = time.perf_counter()

    def progress(items):
        return progress_bar(items, quiet=quiet, desc="ingest", unit="input", leave=False)

    ds = ingest(paths, progress=progress, scheduler=scheduler, dask_workers=dask_workers)
    if hardware:
        for src in ds.sources:
            if not src.settings.get("hardware"):
                src.settings["hardware"] = hardware
    folder = ds.save(out)
    summary = ds.summary()
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_colwidth", 48):
        click.echo(summary.drop(columns=["n_stages", "n_snapshots"]).to_string(index=False))
    totals = summary[["n_requests", "n_ok", "n_steps"]].sum()
    click.echo(f"{len(ds)} source(s), {int(totals.n_requests)} requests ({int(totals.n_ok)} ok), "
               f"{int(totals.n_steps)} traced steps -> {folder} ({time.perf_counter() - t0:.1f} s)")
