"""`bayesblis report`: one self-contained HTML report of a posterior (and a plan)."""

from __future__ import annotations

import click

from bayesblis.cli.check import ppc_options


@click.command("report")
@click.argument("posterior", type=click.Path(exists=True, dir_okay=False))
@click.option("--plan", "plan_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="PLAN.json from `bayesblis plan`: adds the capacity plan and its "
                   "probability-of-SLO curves.")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False),
              help="HTML file to write, e.g. report.html.")
@ppc_options
def command(posterior, plan_path, out_path, n_draws, no_loo, dataset, max_obs_per_config, seed):
    """Data summary, diagnostics, coefficients, shrinkage, posterior-predictive checks and
    (with --plan) the capacity plan, in one HTML file that needs no network."""
    from bayesblis.report.html import write_report

    out = write_report(posterior, out_path, plan_path=plan_path, n_draws=n_draws, seed=seed,
                       loo=not no_loo, dataset=dataset, max_obs_per_config=max_obs_per_config)
    click.echo(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)")
