"""`bayesblis demo`: synthetic fleet -> ingest -> fit -> held-out coefficients -> simulation.

The end-to-end main job on data with a known truth (bayesblis.synth):

1. generate a fleet of simulated vLLM runs (OTEL traces) into OUT/fleet;
2. ingest them (bayesblis.io.dataset.ingest) into OUT/dataset;
3. turn traces into window observations (bayesblis.design.build_model_data), fit the
   hierarchical model, print diagnostics, save OUT/posterior.nc;
4. coefficients of the held-out configuration (never fitted, every level seen) with
   90% intervals next to the truth: OUT/heldout_coefficients.json;
5. simulate the held-out configuration's scenario with posterior draws and with the
   true coefficients: OUT/result.json.
"""

from __future__ import annotations

import shutil
import time
import warnings
from pathlib import Path

import click

from bayesblis.cli.fit import DEFAULTS as FIT_DEFAULTS
from bayesblis.cli.params import FiniteFloatRange
from bayesblis.model.laplace import CHOICES as LAPLACE_CHOICES
from bayesblis.reconstruct import FIT_KINDS


class _Phases:
    """Wall time per phase, printed as status lines."""

    def __init__(self):
        self.times: dict[str, float] = {}
        self._t0 = time.perf_counter()

    def start(self, key: str, text: str):
        click.echo(click.style(f"\n[{len(self.times) + 1}/5] {text}", bold=True))
        self._key, self._t = key, time.perf_counter()

    def done(self, note: str = ""):
        dt = time.perf_counter() - self._t
        self.times[self._key] = round(dt, 2)
        click.echo(f"    done in {dt:.1f} s" + (f" ({note})" if note else ""))

    @property
    def total(self) -> float:
        return time.perf_counter() - self._t0


def _prepare_out(out: Path):
    fleet_dir = out / "fleet"
    if fleet_dir.exists():
        if not (fleet_dir / "fleet.json").is_file() and any(fleet_dir.iterdir()):
            raise click.UsageError(f"{fleet_dir} exists and is not a synthetic fleet; "
                                   f"choose another --out")
        shutil.rmtree(fleet_dir)
    out.mkdir(parents=True, exist_ok=True)


def coefficient_table(cd, truth: dict, prob: float) -> list[dict]:
    """Rows (kind, coefficient, true, mean, lo, hi, covered) of a CoefficientDraws."""
    summ = cd.summary(prob)
    rows = []
    for kind in ("beta", "alpha"):
        for name, s in summ[kind].items():
            t = truth[kind][name]
            rows.append({"kind": kind, "coefficient": name, "true": t, "mean": s["mean"],
                         "median": s["median"], "lo": s["lo"], "hi": s["hi"],
                         "covered": bool(s["lo"] <= t <= s["hi"])})
    return rows


def format_coefficient_table(rows: list[dict], prob: float) -> str:
    pct = f"{prob:.0%}"
    head = f"{'coefficient':<22}{'true':>11}{'mean':>11}{pct + ' lo':>11}{pct + ' hi':>11}  covered"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['coefficient']:<22}{r['true']:>11.4g}{r['mean']:>11.4g}{r['lo']:>11.4g}"
                     f"{r['hi']:>11.4g}  {'yes' if r['covered'] else 'NO'}")
    n = sum(r["covered"] for r in rows)
    lines.append(f"{n}/{len(rows)} true coefficients inside their {pct} intervals")
    return "\n".join(lines)


_METRICS_SHOWN = (("ttft_mean_s", "TTFT mean"), ("itl_mean_s", "ITL mean"), ("e2e_mean_s", "E2E mean"),
                  ("ttft_p90_s", "TTFT p90"), ("e2e_p90_s", "E2E p90"))


def format_latency_table(post_res: dict, true_res: dict, prob: float) -> str:
    """True-coefficient value, then the posterior draws' median (the point prediction, as in
    `validate`), mean (pulled up by draws near saturation) and `prob` interval."""
    pct = f"{prob:.0%}"
    head = (f"{'metric':<12}{'true coefs':>12}{'median':>11}{'mean':>11}{pct + ' interval':>24}"
            "  covered")
    lines = [head, "-" * len(head)]
    for key, label in _METRICS_SHOWN:
        p, t = post_res["summary"][key], true_res["summary"][key]
        if p["mean"] is None or t["mean"] is None:
            continue
        cov = p["lo"] <= t["mean"] <= p["hi"]
        lines.append(f"{label:<12}{_ms(t['mean']):>12}{_ms(p['median']):>11}{_ms(p['mean']):>11}"
                     f"{'[' + _ms(p['lo']) + ', ' + _ms(p['hi']) + ']':>24}  {'yes' if cov else 'NO'}")
    return "\n".join(lines)


def _ms(v):
    return f"{v * 1e3:.1f} ms" if abs(v) < 1 else f"{v:.2f} s"


@click.command("demo")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path),
              default=Path("bayesblis-demo"), show_default=True, help="Output folder.")
@click.option("--fleet", "fleet_name", type=click.Choice(["demo", "full", "tiny", "long_prompt"]),
              default="demo", show_default=True,
              help="Synthetic fleet preset (tiny: for tests, seconds; long_prompt: 1-4k-token "
                   "prompts at four rising rates).")
@click.option("--method", type=click.Choice(["nuts", "advi"]), default="nuts", show_default=True,
              help="Fit method: NUTS (nutpie) or ADVI.")
@click.option("--draws", type=click.IntRange(min=10), default=1000, show_default=True,
              help="Posterior draws per chain before the first diagnostics check (tuning steps: "
                   "as many). At 300 the fit failed its diagnostics (docs/sampler.md, model "
                   "version 7); model version 11 passed at 1,500 (2,000 from the start: 2 min "
                   "more).")
@click.option("--max-draws", type=click.IntRange(min=10), default=FIT_DEFAULTS["max_draws"],
              show_default=True,
              help="Sample on, a quarter of --draws at a time, until the diagnostics pass, at "
                   "most this many draws per chain (as `bayesblis fit`; NUTS only).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of truth, traffic and fit.")
@click.option("--max-obs-per-config", type=click.IntRange(min=20), default=400, show_default=True,
              hidden=True, help="Window observations kept per configuration (subsample).")
@click.option("--tune", type=click.IntRange(min=10), default=None, hidden=True,
              help="Tuning steps per chain (default: --draws).")
@click.option("--chains", type=click.IntRange(min=1), default=2, hidden=True)
@click.option("--sim-draws", type=click.IntRange(min=2), default=40, show_default=True, hidden=True,
              help="Posterior draws simulated in phase 5.")
@click.option("--sim-duration-s", type=FiniteFloatRange(min=1), default=None, hidden=True,
              help="Simulated traffic of phase 5 (default: the run's duration).")
@click.option("--kinds", default=",".join(FIT_KINDS), show_default=True, hidden=True,
              help="Observation kinds to fit (comma separated).")
@click.option("--nuts-backend", type=click.Choice(["numba", "jax"]), default="jax",
              show_default=True, hidden=True,
              help="nutpie backend (jax compiles in seconds, numba in about a minute).")
@click.option("--laplace", type=click.Choice(list(LAPLACE_CHOICES)), default="on",
              show_default=True, hidden=True,
              help="Precondition NUTS at the posterior mode.")
@click.option("--quiet", "--no-progress", "quiet", is_flag=True,
              help="No progress displays (also off when stderr is not a terminal, and in CI).")
def command(out, fleet_name, method, draws, max_draws, seed, max_obs_per_config, tune, chains, sim_draws,
            sim_duration_s, kinds, nuts_backend, laplace, quiet):
    """Run the whole pipeline on a synthetic fleet with a known truth and compare the
    held-out configuration's coefficients and latencies to it."""
    from bayesblis.atomic import write_json
    from bayesblis.constants import CI_PROB
    from bayesblis.io.dataset import ingest
    from bayesblis.synth import FleetSpec, generate_fleet

    from bayesblis.console import progress_bar, show_progress

    progress = show_progress(quiet)
    out = Path(out)
    _prepare_out(out)
    ph = _Phases()
    kinds = [k.strip() for k in kinds.split(",") if k.strip()]

    # 1 -------------------------------------------------------------------- fleet
    spec = FleetSpec.preset(fleet_name)
    ph.start("generate", f"generating the '{fleet_name}' fleet: {len(spec.train)} training runs + "
                         f"{len(spec.heldout)} held out, {spec.duration_s:.0f} s of traffic each")
    fleet = generate_fleet(spec, out / "fleet", seed=seed, progress=progress)
    n_req = int(fleet.configs["n_requests"].sum())
    ph.done(f"{n_req} requests, traces in {out / 'fleet'}")

    # 2 -------------------------------------------------------------------- ingest
    ph.start("ingest", "ingesting the OTEL traces of the training runs")
    wrap = (lambda items: progress_bar(items, shown=True, desc="ingest", unit="run")) if progress else None
    dataset = ingest([fleet.root / "runs"], progress=wrap)
    dataset.save(out / "dataset")
    ph.done(f"{len(dataset)} sources -> {out / 'dataset'}")

    # 3 -------------------------------------------------------------------- fit
    ph.start("fit", f"building window observations and fitting ({method})")
    try:
        from bayesblis.design import build_model_data
    except ImportError:
        raise click.ClickException("bayesblis.design is not available in this build; "
                                   "phases 3-5 need it") from None
    from bayesblis.model.bounds import format_bound_report, physical_bound_report
    from bayesblis.model.diagnostics import format_diagnostics
    from bayesblis.model.fitting import quiet_pymc_info
    from bayesblis.model.hierarchy import LatencyModel
    from bayesblis.model.store import save_posterior

    t_design = time.perf_counter()
    md = build_model_data(dataset, kinds=kinds, max_obs_per_config=max_obs_per_config, seed=seed)
    counts = md.obs["kind"].value_counts().to_dict()
    click.echo(f"    {len(md.obs)} window observations over {len(md.configs)} configurations "
               f"({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}) "
               f"in {time.perf_counter() - t_design:.1f} s")
    sampler = {"draws": draws, "tune": tune or draws, "chains": chains, "seed": seed + 1,
               "nuts_backend": nuts_backend,
               # `bayesblis fit`'s (0.9 left divergent transitions in the demo's fit, model version 8)
               "target_accept": FIT_DEFAULTS["target_accept"],
               **({"max_draws": max_draws, "extend_draws": max(draws // 4, 1)}
                  if method == "nuts" and max_draws > draws else {}),
               "laplace": LAPLACE_CHOICES[laplace]}
    if method == "advi":
        sampler["advi_iterations"] = 15000
    model = LatencyModel(sampler_config=sampler)
    model.build_model(md)
    with quiet_pymc_info():  # prior draws for `bayesblis check`'s prior predictive check
        model.sample_prior_predictive(samples=100)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(method=method, progressbar=progress)
    diag = model.fit_info["diagnostics"]
    click.echo(format_diagnostics(diag))
    click.echo(format_bound_report(physical_bound_report(model.idata.posterior, md.obs,
                                                         floors=model.floors())))
    post_path = save_posterior(model, out / "posterior.nc")
    ph.done(f"posterior -> {post_path}")

    # 4 -------------------------------------------------------------------- coefficients
    from bayesblis.coefficients import deployment_draws
    from bayesblis.model.store import load_posterior

    held = list(spec.heldout)
    if not held:
        raise click.ClickException(f"fleet '{fleet_name}' has no held-out configuration")
    run = held[0]
    dep = run.deployment()
    ph.start("coefficients", f"held-out configuration {run.name}: coefficients vs truth")
    posterior = load_posterior(post_path)
    cd = deployment_draws(posterior, dep, seed=seed)
    key = cd.config
    truth = fleet.truth_for(key)
    rows = coefficient_table(cd, truth, CI_PROB)
    click.echo(f"    {key} was never fitted; its levels were: "
               + ", ".join(f"{k}={v}" for k, v in fleet.truth["configs"][key]["levels"].items()))
    click.echo(format_coefficient_table(rows, CI_PROB))
    n_cov = sum(r["covered"] for r in rows)
    write_json(out / "heldout_coefficients.json", {
        "config": key, "run": run.name, "ci_prob": CI_PROB, "seen_config": cd.seen_config,
        "n_draws": int(cd.n_draws), "coefficients": rows,
        "coverage": {"covered": n_cov, "total": len(rows), "fraction": n_cov / len(rows)},
        "posterior": str(post_path), "truth": str(fleet.root / "truth.json")})
    ph.done(f"{n_cov}/{len(rows)} covered")

    # 5 -------------------------------------------------------------------- simulate
    from bayesblis.simulate.results import Draws, run_scenario

    ph.start("simulate", f"simulating {run.name} with {sim_draws} posterior draws and with the "
                         f"true coefficients")
    sc = fleet.scenario(run.name, duration_s=sim_duration_s)
    rng_draws = deployment_draws(posterior, dep, n_draws=sim_draws, seed=seed)
    d_post = Draws.from_coefficient_draws(rng_draws, source=f"posterior {post_path}")
    d_true = fleet.true_draws(key, max(5, sim_draws // 4))
    bar = progress_bar(total=d_post.n_draws + d_true.n_draws, shown=progress, desc="simulate",
                       unit="draw")
    res_post = run_scenario(sc, d_post, seed=seed, deployment=dep, progress=lambda i: bar.update(1))
    res_true = run_scenario(sc, d_true, seed=seed + 7, deployment=dep,
                            progress=lambda i: bar.update(1))
    bar.close()
    click.echo(format_latency_table(res_post, res_true, CI_PROB))
    ph.done()

    timings = dict(ph.times)
    timings["total"] = round(ph.total, 2)
    result = {"config": key, "run": run.name, "posterior_draws": res_post, "true_coefficients": res_true,
              "comparison": {m: {"true": res_true["summary"][m]["mean"],
                                 **{k: res_post["summary"][m][k]
                                    for k in ("median", "mean", "lo", "hi")},
                                 "covered": (None if res_true["summary"][m]["mean"] is None
                                             or res_post["summary"][m]["lo"] is None else
                                             bool(res_post["summary"][m]["lo"]
                                                  <= res_true["summary"][m]["mean"]
                                                  <= res_post["summary"][m]["hi"]))}
                             for m, _ in _METRICS_SHOWN},
              "demo": {"fleet": fleet_name, "method": method, "draws": draws, "seed": seed,
                       "kinds": kinds, "max_obs_per_config": max_obs_per_config,
                       "n_obs": int(len(md.obs)), "diagnostics": diag,
                       "heldout_coverage": f"{n_cov}/{len(rows)}", "wall_s": timings}}
    write_json(out / "result.json", result)

    click.echo(click.style("\nsummary", bold=True))
    click.echo(f"  fleet (OTEL traces, truth.json)  {out / 'fleet'}")
    click.echo(f"  ingested dataset                 {out / 'dataset'}")
    click.echo(f"  posterior                        {post_path}   diagnostics "
               + {True: "PASS", False: "FAIL", None: "n/a (ADVI)"}[diag.get("passed")])
    click.echo(f"  held-out coefficients            {out / 'heldout_coefficients.json'}   "
               f"({n_cov}/{len(rows)} true values inside {CI_PROB:.0%} intervals)")
    click.echo(f"  simulation result                {out / 'result.json'}")
    click.echo("  wall time: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
