"""`bayesblis plan`: capacity per deployment option under SLOs held with a probability."""

from __future__ import annotations

from pathlib import Path

import click

from bayesblis.cli.discrepancy_option import discrepancy_option, resolve_discrepancy
from bayesblis.cli.params import FiniteFloatRange, PROBABILITY


@click.command("plan", context_settings={"show_default": True})
@click.argument("scenario", type=click.Path(exists=True, path_type=Path))
@click.argument("more_options", nargs=-1, metavar="[KEY=V1,V2 ...]")
@click.option("--posterior", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="POSTERIOR.nc from `bayesblis fit` (or `calibrate`).")
@click.option("--coefficients", "coefficients", multiple=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Fixed coefficients instead of --posterior: a file `bayesblis coefficients` "
                   "writes (JSON, BLIS YAML, bayesblis-go) or a hand-written one "
                   "(data_specs/coefficients-input.md); repeat it for several files, one draw "
                   "each. Every option gets them.")
@click.option("--slo", "slo_text", required=True,
              help="Latency SLOs, comma separated: METRIC<SECONDS (or <=; 'ms' suffix allowed), "
                   "METRIC one of ttft_mean, ttft_p90, ttft_p99, itl_mean, tpot_mean, e2e_mean, "
                   "e2e_p90, e2e_p99; e.g. 'ttft_p90<0.2,itl_mean<0.05'.")
@click.option("--prob", type=PROBABILITY, default=0.9,
              help="Posterior probability with which all SLOs must hold.")
@click.option("--options", "options", multiple=True, metavar="KEY=V1,V2",
              help="An option axis (tp, ep, hardware, dtype or a vLLM setting such as "
                   "max_num_batched_tokens); repeat the flag or list several axes after it "
                   "(--options tp=1,2 hardware=H100,A100). Options are the product of the axes; "
                   "none: the scenario as it is.")
@click.option("--draws", type=click.IntRange(min=2), default=50,
              help="Posterior draws simulated at every rate.")
@click.option("--duration-s", type=FiniteFloatRange(min=0, min_open=True), default=None,
              help="Traffic simulated per rate (default: the scenario's total duration).")
@click.option("--hardware", help="GPU catalog name (fills / overrides the scenario's hardware).")
@click.option("--replay", is_flag=True,
              help="Inference-perf folder: resample its recorded requests instead of its profile.")
@click.option("--allow-unseen", is_flag=True,
              help="Allow population-level draws for options with levels the posterior never saw.")
@click.option("--start-rate", type=FiniteFloatRange(min=0, min_open=True), default=None,
              help="First rate tried, req/s (default: the scenario's highest stage rate).")
@click.option("--min-rate", type=FiniteFloatRange(min=0, min_open=True), default=None,
              help="Lowest rate tried (default: max(start/1024, 5 requests per duration)).")
@click.option("--max-rate", type=FiniteFloatRange(min=0, min_open=True), default=None,
              help="Highest rate tried (default: 64 x start).")
@click.option("--rel-tol", type=FiniteFloatRange(min=0, min_open=True), default=0.02,
              help="Stop when the capacity bracket [lo, hi] has hi/lo - 1 <= this.")
@click.option("--max-evals", type=click.IntRange(min=2), default=12,
              help="Rate evaluations per option at most.")
@click.option("--curve", "curve_text", default="", show_default=False, metavar="F1,F2",
              help="After the search, also evaluate capacity x each factor (e.g. 0.5,1.5,2) so "
                   "PLAN.json shows the curve away from the crossing. Default: none.")
@click.option("--seed", type=int, default=0, help="Seed of draws, requests and noise.")
@click.option("--scheduler", default=None,
              help="Evaluate options on Dask: 'local' (a LocalCluster) or tcp://host:port. "
                   "Default: serially in this process (same results).")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Threads running draws in parallel per evaluation (default: all CPUs).")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("plan.json"), help="PLAN.json to write (data_specs/plan.md).")
@click.option("--no-progress", is_flag=True,
              help="No progress bar (also off when stderr is not a terminal, and in CI).")
@discrepancy_option
def command(scenario, more_options, posterior, coefficients, slo_text, prob, options, draws,
            duration_s, hardware, replay, allow_unseen, start_rate, min_rate, max_rate, rel_tol,
            max_evals, curve_text, seed, scheduler, workers, out, no_progress, discrepancy):
    """For every deployment option of SCENARIO (scenario YAML, inference-perf folder or
    TraceV2 header.yaml), find the highest arrival rate at which all SLOs hold with
    posterior probability >= --prob, and write PLAN.json (probability-vs-rate curves,
    GPUs, tokens/s per GPU at capacity)."""
    from bayesblis.atomic import write_json
    from bayesblis.catalog.models import load_model
    from bayesblis.console import progress_bar
    from bayesblis.plan import (PlanSpecError, SearchSettings, default_duration_s,
                                default_start_rate, format_plan, parse_options, parse_slos, run_plan)
    from bayesblis.simulate.scenario import load_scenario

    if (posterior is None) == (not coefficients):
        raise click.UsageError("give exactly one of --posterior or --coefficients")
    try:
        slos = parse_slos(slo_text)
    except PlanSpecError as exc:
        raise click.BadParameter(str(exc).split(": ", 1)[1], param_hint="'--slo'") from None
    for extra in more_options:
        if "=" not in extra:
            raise click.UsageError(f"unexpected argument {extra!r}: after SCENARIO only option "
                                   f"axes KEY=V1,V2 are accepted (e.g. tp=1,2)")
    try:
        settings = parse_options(list(options) + list(more_options))
    except PlanSpecError as exc:
        raise click.BadParameter(str(exc).split(": ", 1)[1], param_hint="'--options'") from None
    factors = []
    for token in (t.strip() for t in curve_text.split(",")) if curve_text.strip() else ():
        try:
            f = float(token)
        except ValueError:
            f = -1.0
        if not 0 < f < float("inf"):
            raise click.BadParameter(f"{token!r} in {curve_text!r} is not a positive factor "
                                     f"(expected e.g. 0.5,1.5,2)", param_hint="'--curve'")
        factors.append(f)
    if scheduler is not None and scheduler != "local" and "://" not in scheduler:
        raise click.BadParameter(f"{scheduler!r} (expected 'local' or tcp://host:port)",
                                 param_hint="'--scheduler'")

    discrepancy = resolve_discrepancy(discrepancy)
    sc = load_scenario(scenario, hardware=hardware, replay=replay, seed=seed)
    load_model(sc.model)  # an unknown model fails here, before the posterior is read
    dur = float(duration_s) if duration_s is not None else default_duration_s(sc)
    search = SearchSettings(prob=float(prob), duration_s=dur,
                            start_rate=float(start_rate or default_start_rate(sc)),
                            min_rate=min_rate, max_rate=max_rate, rel_tol=float(rel_tol),
                            max_evals=int(max_evals), curve_factors=tuple(factors), seed=int(seed))
    lo, hi = search.bounds()
    if lo >= hi:
        raise click.BadParameter(f"lowest rate {lo:g} >= highest rate {hi:g} req/s",
                                 param_hint="'--min-rate' / '--max-rate'")
    click.echo(f"{len(settings)} option(s) x {draws} draws, {dur:g} s of traffic per rate, "
               f"start {search.start_rate:g} req/s, search range [{lo:.3g}, {hi:.3g}] req/s")
    bar = progress_bar(total=len(settings), quiet=no_progress, desc="plan", unit="option")

    def on_eval(label, rec):
        bar.set_postfix_str(f"{label} {rec['rate_per_s']:.3g} req/s P={rec['p_all']:.2f}")

    fixed = None
    if coefficients:
        from bayesblis.coefficients import read_coefficient_files

        fixed = read_coefficient_files(coefficients)
        click.echo(f"coefficients: {fixed.metadata()['meaning']}")
    try:
        plan = run_plan(sc, fixed or posterior, slos, settings, search=search, n_draws=draws,
                        allow_unseen=allow_unseen, scheduler=scheduler, n_workers=workers,
                        posterior_source=fixed.source() if fixed else str(posterior),
                        progress=lambda i: bar.update(1),
                        on_eval=on_eval, discrepancy=discrepancy)
    finally:
        bar.close()
    plan["metadata"]["scenario_path"] = str(scenario)
    if fixed is not None:
        plan["metadata"]["coefficients"] = fixed.metadata()
    write_json(out, plan)
    click.echo(format_plan(plan))
    n_sim = plan["metadata"]["n_simulations"]
    click.echo(f"{plan['metadata']['n_evaluations']} rate evaluations, {n_sim} simulations, "
               f"{plan['metadata']['wall_s']:.1f} s")
    click.echo(f"wrote {out}")
