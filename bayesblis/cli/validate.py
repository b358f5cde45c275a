"""`bayesblis validate`: leave-one-out validation against measured inference-perf runs (BLIS
TraceV2/V3 traces among DIRS are written as inference-perf folders first)."""

from __future__ import annotations

import click

from bayesblis.cli.params import FiniteFloatRange, PROBABILITY


@click.command("validate")
@click.argument("dirs", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--holdout", type=click.Choice(["experiment", "model"]), default="experiment",
              show_default=True, help="Leave one experiment out, or one whole model out.")
@click.option("--hardware", default="H100", show_default=True,
              help="GPU the runs were measured on (inference-perf folders do not say).")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False),
              help="REPORT JSON to write (see data_specs/validation-report.md).")
@click.option("--draws", "n_draws", default=None, type=click.IntRange(min=2),
              help="Posterior draws simulated per held-out experiment (default: 30 held out "
                   "by experiment, 150 by model, whose wider predictive spread needs more "
                   "draws for a steady median; 200 per run with --external).")
@click.option("--fit-draws", default=300, show_default=True, type=int)
@click.option("--fit-tune", default=300, show_default=True, type=int)
@click.option("--max-obs-per-run", default=400, show_default=True, type=int,
              help="Windows kept per run (half decode, half TTFT).")
@click.option("--max-duration-s", default=None, type=FiniteFloatRange(min=0, min_open=True),
              help="Simulate only the first seconds of each run (quick checks).")
@click.option("--max-treedepth", default=10, show_default=True, type=int,
              help="NUTS tree-depth cap per fold (lower = faster, less efficient sampling).")
@click.option("--target-accept", default=0.95, show_default=True, type=PROBABILITY,
              help="NUTS target acceptance per fold. Real client windows leave a narrow neck "
                   "between decode compute and KV cost where a chain at 0.9 can stick.")
@click.option("--no-discrepancy", is_flag=True,
              help="Posterior-only intervals: do not widen them by the simulator discrepancy "
                   "calibrated on the other folds' held-out errors.")
@click.option("--profiles", type=click.Path(exists=True, file_okay=False), default=None,
              help="Operator-profiles folder: its linear-layer rows of --hardware join every "
                   "fold's fit as evidence (never held out; NCCL all-reduce rows do not: "
                   "vLLM's steps run its own all-reduce).")
@click.option("--external", is_flag=True,
              help="The check on configurations never traced: predict each run folder (server "
                   "settings + profile.yaml + measured.json or requests.json) from its load "
                   "profile with --posterior, no fit (data_specs/external-check.md).")
@click.option("--posterior", type=click.Path(exists=True, dir_okay=False), default=None,
              help="With --external: the posterior to predict from.")
@click.option("--model-configs", multiple=True, type=click.Path(exists=True, file_okay=False),
              help="With --external: folders of <model>/config.json for models not in the "
                   "catalog (matched by the HF id's last part).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="With --external: a PNG of every stage's predicted / measured - 1 with its "
                   "interval (E2E, TTFT, ITL).")
@click.option("--seed", default=1, show_default=True, type=int)
def command(dirs, holdout, hardware, out_path, n_draws, fit_draws, fit_tune, max_obs_per_run,
            max_duration_s, max_treedepth, target_accept, no_discrepancy, profiles, external,
            posterior, model_configs, plot_path, seed):
    """Fit without each held-out run (or model), replay it with posterior draws, compare.

    With --external: predict measured runs of configurations never traced from their load
    profiles with a posterior, and score every stage."""
    from bayesblis import atomic

    if external:
        _external(dirs, posterior, model_configs, hardware, n_draws, no_discrepancy, seed, out_path,
                  plot_path)
        return
    if posterior is not None or model_configs or plot_path:
        raise click.UsageError("--posterior, --model-configs and --plot go with --external")
    from bayesblis.validate import expand_dirs, format_table, run_validation

    import tempfile

    from bayesblis.io.tracev2 import as_inference_perf_folders

    # BLIS TraceV2/V3 files among DIRS: written as inference-perf folders (removed on return)
    converted = tempfile.TemporaryDirectory(prefix="bayesblis-validate-")
    dirs = as_inference_perf_folders(dirs, converted.name, hardware=hardware)
    report = run_validation(expand_dirs(dirs), holdout=holdout, hardware=hardware,
                            n_draws=n_draws, fit_draws=fit_draws, fit_tune=fit_tune, seed=seed,
                            max_obs_per_run=max_obs_per_run, echo=click.echo,
                            max_duration_s=max_duration_s, max_treedepth=max_treedepth,
                            target_accept=target_accept, discrepancy=not no_discrepancy,
                            profiles=profiles)
    click.echo(format_table(report))
    atomic.write_json(out_path, report)
    click.echo(f"wrote {out_path}")


EXTERNAL_DRAWS = 200
"""Draws per run with --external: a configuration never fitted has a wide predictive spread
(90% intervals 30-100% of the median for a family never traced), whose median moves by
several percent between sets of 40 draws."""


def _external(dirs, posterior, model_configs, hardware, n_draws, no_discrepancy, seed, out_path,
              plot_path=None):
    from bayesblis.external_check import expand_runs, format_table, run_check, write_report

    if posterior is None:
        raise click.UsageError("--external needs --posterior")
    discrepancy = None
    if not no_discrepancy:
        from bayesblis.discrepancy import load_discrepancy

        discrepancy = load_discrepancy()
    report = run_check(expand_runs(dirs), posterior, hardware=hardware,
                       n_draws=n_draws or EXTERNAL_DRAWS, seed=seed, discrepancy=discrepancy,
                       model_configs=model_configs, echo=click.echo)
    click.echo(format_table(report))
    write_report(out_path, report)
    click.echo(f"wrote {out_path}")
    if plot_path:
        from bayesblis.report.figures import fig_external_check, save_png

        save_png(fig_external_check(report), plot_path)
        click.echo(f"wrote {plot_path}")
