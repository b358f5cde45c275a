"""`bayesblis simulate`: run the vLLM scheduler simulator with coefficient draws."""

from __future__ import annotations

from pathlib import Path

import click

from bayesblis.cli.discrepancy_option import discrepancy_option, resolve_discrepancy
from bayesblis.cli.params import FiniteFloatRange


@click.command("simulate")
@click.argument("scenario", type=click.Path(exists=True, path_type=Path))
@click.option("--posterior", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="POSTERIOR.nc from `bayesblis fit` (coefficients drawn per configuration).")
@click.option("--coefficients", "coefficients", multiple=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Fixed coefficients: a file `bayesblis coefficients` writes (JSON: its "
                   "medians, or its draws; BLIS YAML; bayesblis-go), or a hand-written JSON / "
                   "YAML (data_specs/coefficients-input.md). Repeat it for several files, one "
                   "draw each (e.g. the .drawNNN files of --draws N).")
@click.option("--draws", type=click.IntRange(min=1), default=50, show_default=True,
              help="Posterior draws (one simulation each).")
@click.option("--hardware", help="GPU catalog name (overrides / fills the scenario's hardware).")
@click.option("--replay", is_flag=True, help="Inference-perf folder: replay the recorded requests.")
@click.option("--allow-unseen", is_flag=True,
              help="Allow population-level draws for configurations the posterior never saw.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of draws and noise.")
@click.option("--max-duration-s", type=FiniteFloatRange(min=0, min_open=True), default=None,
              help="Simulate only requests arriving before this time (s).")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Threads running draws in parallel (default: all CPUs).")
@click.option("--scheduler", default=None,
              help="Run the draws on Dask in chunks, one task per chunk: 'local' (a "
                   "LocalCluster) or tcp://host:port. Default: in this process (same result).")
@click.option("--dask-workers", type=click.IntRange(min=1), default=2, show_default=True,
              help="Worker processes of --scheduler local.")
@click.option("--chunk-size", type=click.IntRange(min=1), default=None,
              help="Draws per Dask task (default: about 4 tasks per local worker).")
@click.option("--trace-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also write traces.json + kv_events.jsonl of one run at the mean coefficients.")
@discrepancy_option
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="RESULT.json to write.")
def command(scenario, posterior, coefficients, draws, hardware, replay, allow_unseen, seed,
            max_duration_s, workers, scheduler, dask_workers, chunk_size, trace_dir, discrepancy,
            out):
    """Simulate SCENARIO (scenario YAML, inference-perf folder or TraceV2 header.yaml)
    once per coefficient draw and write RESULT.json (latency metrics with intervals)."""
    from bayesblis.atomic import write_json
    from bayesblis.console import progress_bar
    from bayesblis.distributed import check_scheduler
    from bayesblis.simulate.results import Draws, run_scenario
    from bayesblis.simulate.scenario import load_scenario

    if (posterior is None) == (not coefficients):
        raise click.UsageError("give exactly one of --posterior or --coefficients")
    check_scheduler(scheduler)
    discrepancy = resolve_discrepancy(discrepancy)
    sc = load_scenario(scenario, hardware=hardware, replay=replay, seed=seed)
    deployment = sc.deployment()
    if posterior is not None:
        from bayesblis.coefficients import posterior_draws

        cd = posterior_draws(posterior, deployment, draws, allow_unseen=allow_unseen, seed=seed)
        d = Draws.from_coefficient_draws(cd, source=f"posterior {posterior}")
        if discrepancy is not None:
            discrepancy = discrepancy.for_configuration(cd.seen_config, cd.unseen_levels,
                                                        cd.fitted_load)
    else:
        from bayesblis.coefficients import read_coefficient_files

        fixed = read_coefficient_files(coefficients)
        if discrepancy is not None:   # fixed coefficients: as a new run of their configuration
            discrepancy = discrepancy.for_configuration(True)
        # one set without step noise is deterministic: one run; else --draws runs (of the
        # file's draws, or of one set with fresh noise)
        varies = fixed.n_sets > 1 or float(fixed.noise_sigma.max()) > 0
        cd = fixed.draws_for(deployment, draws if varies else 1, seed=seed)
        d = Draws.from_coefficient_draws(cd, source=fixed.source())
    with progress_bar(total=d.n_draws, desc="draws", unit="draw") as bar:
        result = run_scenario(sc, d, seed=seed, max_duration_s=max_duration_s,
                              progress=lambda i: bar.update(1), deployment=deployment,
                              n_workers=workers, scheduler=scheduler, chunk_size=chunk_size,
                              dask_workers=dask_workers, discrepancy=discrepancy)
    if coefficients:
        result["metadata"]["coefficients"] = fixed.metadata()
        click.echo(f"coefficients: {fixed.metadata()['meaning']}")
    if trace_dir is not None:
        result["metadata"]["trace_dir"] = str(trace_dir)
        _write_traces(sc, d, deployment, trace_dir, seed, max_duration_s)
    write_json(out, result)
    click.echo(format_summary(result))
    click.echo(f"wrote {out}")


def _write_traces(sc, d, deployment, trace_dir, seed, max_duration_s):
    import numpy as np

    from bayesblis.simulate.engine import deployment_constants, run_engine
    from bayesblis.simulate.trace_writer import write_traces

    w = sc.build_workload(max_duration_s)
    cfg = sc.engine_config(deployment)
    run = run_engine(w, cfg, deployment_constants(deployment), d.beta.mean(0), d.alpha.mean(0),
                     noise_sigma=float(np.mean(d.noise_sigma)),
                     noise_nu=float(np.median(d.noise_nu)), seed=seed, record=True)
    write_traces(run, w, cfg, trace_dir, seed=seed)


def format_summary(result: dict) -> str:
    """Compact text table: one row per metric, summary then per stage: the median over draws
    [interval] and the mean; then the share of draws that saturate each stage."""
    import math

    from bayesblis.discrepancy import NEW_CONFIGURATION, NEW_GPU, UNMEASURED_GPU
    from bayesblis.simulate.results import METRICS, SATURATION_LAG_GROWTH
    from bayesblis.simulate.workload import format_workload_summary

    blocks = [("all", result["summary"])] + [(f"stage {s['stage']}", s) for s in result["stages"]]
    if len(blocks) == 2:
        blocks = blocks[:1]
    width = 42
    ci = int(round(result["metadata"].get("ci_prob", 0.9) * 100))
    head = f"{'metric':<26}" + "".join(f"{name:>{width}}" for name, _ in blocks)
    disc = result["metadata"].get("discrepancy")
    scaled = {NEW_CONFIGURATION: "draws' spread x scale (configuration never fitted)",
              NEW_GPU: "draws' spread x scale, with the new GPU's own spread",
              UNMEASURED_GPU: "draws' spread x scale, with the new GPU's own spread and "
                              "kernel-db's spread across GPUs"}
    rule = (disc or {}).get("applies")
    never_fitted = rule in scaled
    kind = (f"{ci}% prediction interval: {scaled[rule]}" if never_fitted else
            f"{ci}% prediction interval: draws x simulator discrepancy" if disc
            else f"{ci}% interval of the posterior draws")
    lines = [f"median over draws [{kind}] and mean (a few saturated draws inflate the mean)",
             head, "-" * len(head)]
    for m in METRICS:
        row = f"{m:<26}"
        for _, b in blocks:
            v = b.get(m) or {}
            if v.get("median") is None:
                row += f"{'n/a':>{width}}"
            else:
                row += (f"{_fmt(v['median'], m)} [{_fmt(v['lo'], m)}, {_fmt(v['hi'], m)}] "
                        f"mean {_fmt(v['mean'], m)}").rjust(width)
        lines.append(row)
    c = result["counts"]
    shares = [c.get("saturated_share_any_stage")] + [s.get("saturated_share")
                                                     for s in result["stages"]]
    row = f"{'saturated draws':<26}"
    for share in shares[:len(blocks)]:
        row += f"{'n/a' if share is None else f'{share:.0%}':>{width}}"
    lines.append(row)
    hits = [c.get("prefix_cache_hit_share")] + [s.get("prefix_cache_hit_share")
                                               for s in result["stages"]]
    if any(hits):
        row = f"{'prefix-cache hits':<26}"
        for h in hits[:len(blocks)]:
            row += f"{'n/a' if not h or h.get('median') is None else format(h['median'], '.0%'):>{width}}"
        lines.append(row)
    lines.append(f"requests {c['n_requests']}  dropped {c['n_dropped']}  "
                 f"excluded (errors) {c['n_excluded_errors']}  preemptions (mean) "
                 f"{(c['n_preemptions'] or {}).get('mean') or 0:.0f}  draws {result['metadata']['draws']}")
    if result.get("workload"):
        arrival = ((result["metadata"].get("scenario") or {}).get("workload") or {}).get("arrival")
        lines.append("workload simulated:")
        lines.append(format_workload_summary(result["workload"], arrival))
    if never_fitted:
        scaled = ", ".join(f"{m} x{disc['scale'][m]:.2f}" for m in METRICS if m in disc["scale"])
        lines.append(f"a configuration the posterior never fitted: its spread about the median "
                     f"is scaled as measured held out by model ({disc['scale_source']}): "
                     f"{scaled}; the other metrics are posterior-only (--discrepancy none: all)")
    elif disc:
        widened = ", ".join(m for m in METRICS if m in disc["sd"])
        lines.append(f"discrepancy ({disc['source']}) widens {widened}; the other metrics are "
                     "posterior-only (--discrepancy none: all)")
        beyond = [s for s in result["stages"] if s.get("load_excess", 0) > 0]
        if beyond:
            lines.append("beyond the load the configuration was fitted at ("
                         f"{disc.get('fitted_load', 0):.0f} requests in flight), intervals "
                         "widen further: " + ", ".join(
                             f"stage {s['stage']} {s['in_flight']:.0f} in flight "
                             f"({math.exp(s['load_excess']):.1f}x)" for s in beyond))
    for text in result["metadata"].get("caveats") or ():
        lines.append(f"caveat: {text}")
    lines.append(f"saturated draws: the share of draws whose queue keeps growing through the stage "
                 f"(completion lag grows > {SATURATION_LAG_GROWTH:.0%} of the elapsed time; "
                 "data_specs/simulation-result.md)")
    return "\n".join(lines)


def _fmt(v, metric):
    if metric.endswith("_per_s"):
        return f"{v:.0f}"
    return f"{v * 1e3:.1f}ms" if abs(v) < 1 else f"{v:.2f}s"
