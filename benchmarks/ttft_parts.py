"""Time to first token, part by part (issue #19): what the simulator charges for each part
of a TTFT, against a journey-traced run with a known truth.

A TTFT is arrival -> queued (API, tokenization), queued -> scheduled (queue wait),
scheduled -> first token (the prefill chunk steps and the first sampled token), and the
return of that token to the client (`simulate.results.ttft_parts`; the server-side traces
end a TTFT at the engine's first token, so the last part is 0 measured; the simulator
charges it as alpha_frontend per request decoding then, since model version 6). The demo's held-out run has the other three in its OTEL journey traces; this script replays its traffic with the demo
posterior's draws for that (never fitted) configuration and with the true coefficients,
and prints each part's per-stage mean: measured, true-coefficient simulation, posterior
median [90% interval].

With ``--real POSTERIOR.nc`` it also replays each measured run of the shared data (client
traces: only the whole TTFT is measured) with that posterior's draws and prints, per run
and stage, the measured TTFT mean next to the simulated one and the simulated parts: where
the model puts a real TTFT.

Usage:
    bayesblis demo --out DIR            # once: the fleet, its traces and the posterior
    python3 benchmarks/ttft_parts.py DIR [--draws 40] [--out benchmarks/results/ttft_parts.json]
        [--real POSTERIOR.nc [--data ../shared/data/real/h100-inference-perf]]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def stage_means(parts: dict, stage: np.ndarray, n_stages: int, ok: np.ndarray) -> list[dict]:
    """Per stage, each part's mean over the requests selected by `ok` (ms)."""
    return [{name: float(np.mean(v[ok & (stage == s)]) * 1e3) if (ok & (stage == s)).any()
             else None for name, v in parts.items()} for s in range(n_stages)]


def main(argv=None):
    from bayesblis.coefficients import deployment_draws
    from bayesblis.features.alpha import ALPHA_FEATURES
    from bayesblis.features.beta import BETA_FEATURES
    from bayesblis.io.otel import read_otel
    from bayesblis.model.store import load_posterior
    from bayesblis.simulate.engine import STATUS_OK, deployment_constants, run_engine
    from bayesblis.simulate.results import TTFT_PARTS, ttft_parts
    from bayesblis.synth import Fleet

    ap = argparse.ArgumentParser()
    ap.add_argument("demo_dir", type=Path, help="output folder of `bayesblis demo`")
    ap.add_argument("--draws", type=int, default=40, help="posterior draws simulated")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/ttft_parts.json"))
    ap.add_argument("--real", type=Path, default=None,
                    help="a posterior fitted on the shared runs: decompose their TTFTs too")
    ap.add_argument("--data", type=Path,
                    default=ROOT.parent / "shared/data/real/h100-inference-perf")
    args = ap.parse_args(argv)
    fleet = Fleet.load(args.demo_dir / "fleet")
    posterior = load_posterior(args.demo_dir / "posterior.nc")
    run = fleet.spec.heldout[0]
    scenario = fleet.scenario(run.name)
    dep = scenario.deployment()
    w = scenario.build_workload(None)
    bounds = np.asarray(w.stage_bounds_s, float)

    # measured: the held-out run's journey traces (times on the trace clock)
    traced = read_otel(args.demo_dir / "fleet" / "heldout" / run.name / "traces.json").requests
    t0 = float(traced["arrived_s"].min())
    arrival = traced["arrived_s"].to_numpy(float) - t0
    measured_parts = ttft_parts(arrival, traced["queued_s"] - t0, traced["scheduled_s"] - t0,
                                traced["first_token_s"] - t0,
                                traced["first_token_s"] - traced["arrived_s"])
    measured_stage = np.searchsorted(bounds[:, 1], arrival, side="right").clip(0, len(bounds) - 1)
    measured = stage_means(measured_parts, measured_stage, len(bounds),
                           np.ones(len(arrival), bool))

    cfg = scenario.engine_config(dep)
    constants = deployment_constants(dep)
    ok_w = ~w.has_error

    def simulate(beta, alpha, sigma, nu, seed):
        r = run_engine(w, cfg, constants, beta, alpha, noise_sigma=float(sigma),
                       noise_nu=float(nu), seed=int(seed))
        parts = ttft_parts(w.arrival_s, r.queued_s, r.scheduled_s, r.first_token_s, r.ttft_s)
        return stage_means(parts, w.stage, w.n_stages, ok_w & (r.status == STATUS_OK))

    truth = fleet.truth["configs"][dep.config_key]
    true_runs = [simulate([truth["beta"][f] for f in BETA_FEATURES],
                          [truth["alpha"][f] for f in ALPHA_FEATURES], truth["noise_sigma"],
                          truth["noise_nu"], args.seed + 100 + i) for i in range(5)]
    cd = deployment_draws(posterior, dep, n_draws=args.draws, seed=args.seed)
    post_runs = [simulate(cd.beta[d], cd.alpha[d], cd.noise_sigma[d], cd.noise_nu[d],
                          args.seed + d) for d in range(cd.n_draws)]

    rows = []
    print(f"{run.name} ({dep.config_key}, never fitted): TTFT parts, per-stage means in ms")
    print(f"{'stage':<6}{'part':<17}{'measured':>10}{'true coefs':>12}{'posterior median [90%]':>30}")
    # the journey's first-token event is the engine's: the return to the client is not
    # traced, so the whole-TTFT row compares the engine's part (arrival -> first token)
    engine_parts = TTFT_PARTS[:-1]
    for s in range(len(bounds)):
        for part in (*TTFT_PARTS, "to_first_token_s"):
            def value(stage_row, measured_side=False):
                if part == "to_first_token_s":
                    vals = [stage_row[p] for p in engine_parts]
                    return None if any(v is None for v in vals) else float(sum(vals))
                if part == "return_s" and measured_side:
                    return None
                return stage_row[part]
            m = value(measured[s], measured_side=True)
            t = np.nanmedian([value(r[s]) if value(r[s]) is not None else np.nan for r in true_runs])
            p = np.array([value(r[s]) if value(r[s]) is not None else np.nan for r in post_runs])
            lo, med, hi = np.nanquantile(p, [0.05, 0.5, 0.95])
            covered = None if m is None else bool(lo <= m <= hi)
            rows.append({"stage": s, "part": part, "measured_ms": m, "true_coefficients_ms": t,
                         "posterior_median_ms": med, "posterior_lo_ms": lo, "posterior_hi_ms": hi,
                         "covered": covered})
            shown = "not traced" if m is None else f"{m:.2f}"
            print(f"{s:<6}{part:<17}{shown:>10}{t:>12.2f}{med:>14.2f} [{lo:.2f}, {hi:.2f}]"
                  + ("  not covered" if covered is False else ""))
    real_rows = real_parts(args.real, args.data, args.draws, args.seed) if args.real else []
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"run": run.name, "config": dep.config_key,
                                          "draws": int(cd.n_draws), "rows": rows,
                                          "real": real_rows,
                                          "args": {k: str(v) for k, v in vars(args).items()}},
                                         indent=1))
    print(f"wrote {args.out}")


def real_parts(posterior_path, data_dir, n_draws, seed) -> list[dict]:
    """Per measured run and stage: measured TTFT mean, simulated TTFT parts (medians over
    `n_draws` draws of the posterior, ms)."""
    from bayesblis.coefficients import deployment_draws
    from bayesblis.io.inference_perf import read_inference_perf
    from bayesblis.model.store import load_posterior
    from bayesblis.simulate.engine import STATUS_OK, deployment_constants, run_engine
    from bayesblis.simulate.results import TTFT_PARTS, ttft_parts
    from bayesblis.simulate.scenario import Scenario

    posterior = load_posterior(posterior_path)
    rows = []
    print(f"\nshared runs, posterior {posterior_path}: TTFT mean per stage (ms), measured vs "
          "simulated median, and the simulated parts")
    print(f"{'run':<44}{'stage':>6}{'measured':>10}{'simulated':>11}"
          + "".join(f"{p[:-2]:>10}" for p in TTFT_PARTS))
    for run_dir in sorted(p for p in Path(data_dir).iterdir() if p.is_dir()):
        scenario = Scenario.from_inference_perf(run_dir, "H100", replay=True, seed=seed)
        dep = scenario.deployment()
        w = scenario.build_workload(None)
        cfg, constants = scenario.engine_config(dep), deployment_constants(dep)
        cd = deployment_draws(posterior, dep, n_draws=n_draws, seed=seed, new_run=True)
        requests = read_inference_perf(run_dir).requests
        per_draw = []
        for d in range(cd.n_draws):
            r = run_engine(w, cfg, constants, cd.beta[d], cd.alpha[d],
                           noise_sigma=float(cd.noise_sigma[d]), noise_nu=float(cd.noise_nu[d]),
                           seed=seed + d)
            parts = ttft_parts(w.arrival_s, r.queued_s, r.scheduled_s, r.first_token_s, r.ttft_s)
            ok = ~w.has_error & (r.status == STATUS_OK)
            per_draw.append(stage_means(parts, w.stage, w.n_stages, ok))
        for s in range(w.n_stages):
            sel = (requests["stage"] == s) & ~requests["has_error"].astype(bool)
            measured = float(requests.loc[sel, "ttft_s"].mean() * 1e3)
            med = {p: float(np.nanmedian([pd[s][p] if pd[s][p] is not None else np.nan
                                          for pd in per_draw])) for p in TTFT_PARTS}
            total = float(np.nanmedian([sum(pd[s][p] for p in TTFT_PARTS)
                                        if all(pd[s][p] is not None for p in TTFT_PARTS)
                                        else np.nan for pd in per_draw]))
            rows.append({"run": run_dir.name, "stage": s, "measured_ttft_ms": measured,
                         "simulated_ttft_ms": total, **{f"{p[:-2]}_ms": med[p] for p in TTFT_PARTS}})
            print(f"{run_dir.name[16:60]:<44}{s:>6}{measured:>10.1f}{total:>11.1f}"
                  + "".join(f"{med[p]:>10.1f}" for p in TTFT_PARTS))
    return rows


if __name__ == "__main__":
    main()
