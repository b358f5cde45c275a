"""`bayesblis report`: one self-contained HTML report of a posterior (and a plan)."""

from __future__ import annotations

import click


@click.command("report")
@click.argument("posterior", type=click.Path(exists=True, dir_okay=False))
@click.option("--plan", "plan_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="PLAN.json from `bayesblis plan`: adds the capacity plan and its "
                   "probability-of-SLO curves.")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False),
              help="HTML file to write, e.g. report.html.")
@click.option("--draws", "n_draws", default=200, show_default=True, type=click.IntRange(min=10),
              help="Posterior draws used by the posterior-predictive checks.")
@click.option("--no-loo", is_flag=True, help="Skip PSIS-LOO in the checks.")
@click.option("--dataset", type=click.Path(exists=True, file_okay=False), default=None,
              help="Dataset folder the posterior was fitted on (only for posterior files "
                   "without an observation table).")
@click.option("--max-obs-per-config", type=int, default=None,
              help="With --dataset: the subsample the fit used (the demo uses 400).")
@click.option("--seed", default=0, show_default=True, type=int)
def command(posterior, plan_path, out_path, n_draws, no_loo, dataset, max_obs_per_config, seed):
    """Data summary, diagnostics, coefficients, shrinkage, posterior-predictive checks and
    (with --plan) the capacity plan, in one HTML file that needs no network."""
    from bayesblis.report.html import write_report

    out = write_report(posterior, out_path, plan_path=plan_path, n_draws=n_draws, seed=seed,
                       loo=not no_loo, dataset=dataset, max_obs_per_config=max_obs_per_config)
    click.echo(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)")
