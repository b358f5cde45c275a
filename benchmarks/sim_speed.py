"""Simulator speed: simulated seconds per wall second, one draw and many draws.

Scenario: the real inference-perf experiment
``h100-inference-perf/20260217-202857-llama-2-70b-tp4-general`` (Llama-2-70B, TP4, H100-SXM,
shared-prefix data, constant load 8 req/s x 600 s then 20 req/s x 600 s = 16,800 requests over
1,200 s), simulated from its profile (not replayed). Coefficients are fixed: the synthetic
ground truth `bayesblis.synth.Truth(0)` of that configuration (no fit needed); "posterior
draws" are the truth times a seeded log-normal perturbation (5% per coefficient), each draw
with its own step-noise seed, exactly as `run_scenario` runs posterior draws.

Speed = scenario span (1,200 s of arrivals) / wall time. The numba kernel is compiled (or
loaded from its cache) by a warm-up run before any timing. Every timing is repeated
``--reps`` times; the table shows medians (min and max in the JSON).

Targets (issue): one draw >= 2,000x real time; 100 draws >= 100x real time in total
(1,200 s / wall time of all 100 draws).

Usage (from the repository root)::

    python3 benchmarks/sim_speed.py                    # full run, ~3-5 minutes on 2 cores
    python3 benchmarks/sim_speed.py --reps 3 --quick   # smaller sweep for a smoke test

Writes benchmarks/results/sim_speed.json (or --out).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))

from provenance import shared_data_dir  # noqa: E402 (benchmarks/, the script's folder)

import numpy as np  # noqa: E402

EXPERIMENT = "20260217-202857-llama-2-70b-tp4-general"
HARDWARE = "H100-SXM"


def build(folder: Path):
    """(scenario, deployment, Draws factory) of the benchmark scenario."""
    from bayesblis.simulate.results import Draws
    from bayesblis.simulate.scenario import Scenario
    from bayesblis.synth import NOISE_NU, Truth

    sc = Scenario.from_inference_perf(folder, hardware=HARDWARE)
    dep = sc.deployment()
    truth = Truth(0).coefficients(dep)
    from bayesblis.features.alpha import ALPHA_FEATURES
    from bayesblis.features.beta import BETA_FEATURES

    beta = np.array([truth["beta"][f] for f in BETA_FEATURES])
    alpha = np.array([truth["alpha"][f] for f in ALPHA_FEATURES])

    def draws(n: int) -> Draws:
        rng = np.random.default_rng(12345)
        if n == 1:
            return Draws(beta[None], alpha[None], truth["noise_sigma"], NOISE_NU, "synthetic truth")
        b = beta * np.exp(0.05 * rng.standard_normal((n, len(beta))))
        a = alpha * np.exp(0.05 * rng.standard_normal((n, len(alpha))))
        return Draws(b, a, truth["noise_sigma"], NOISE_NU, "synthetic truth x lognormal(0.05)")

    return sc, dep, draws


def scaled(sc, n_requests: int, rate: float = 20.0):
    """The same deployment and data at a constant `rate` with about `n_requests` requests."""
    spec = dict(sc.workload_spec)
    spec["stages"] = [{"rate": rate, "duration": n_requests / rate}]
    return replace(sc, workload_spec=spec, vllm=dict(sc.vllm))


def timed(fn, reps: int) -> dict:
    ts = []
    out = None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(ts), "min_s": min(ts), "max_s": max(ts),
            "reps": reps, "all_s": [round(t, 4) for t in ts], "_out": out}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5, help="repetitions per timing (median reported)")
    ap.add_argument("--quick", action="store_true", help="sizes 1e3/1e4 only, draws up to 10")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "sim_speed.json")
    args = ap.parse_args(argv)

    from bayesblis import __version__
    from bayesblis.atomic import write_json
    from bayesblis.simulate.engine import deployment_constants, run_engine
    from bayesblis.simulate.results import run_scenario

    folder = shared_data_dir() / "real" / "h100-inference-perf" / EXPERIMENT
    sc, dep, draws = build(folder)
    cfg = sc.engine_config(dep)
    w = sc.build_workload()
    span_s = float(w.stage_bounds_s[-1][1] - w.stage_bounds_s[0][0])
    constants = deployment_constants(dep)
    cpus = os.cpu_count() or 1
    load0 = os.getloadavg()

    # -- warm-up: compile or load the numba kernels before any timing
    t0 = time.perf_counter()
    d1 = draws(1)
    run_engine(sc.build_workload(10.0), cfg, constants, d1.beta[0], d1.alpha[0],
               noise_sigma=float(d1.noise_sigma[0]), noise_nu=float(d1.noise_nu[0]), seed=0)
    warm_s = time.perf_counter() - t0
    print(f"scenario {EXPERIMENT}: {len(w)} requests over {span_s:.0f} s, {HARDWARE}, "
          f"tp{sc.tp}, max_num_seqs {cfg.max_num_seqs}, {cfg.kv_blocks_total} KV blocks")
    print(f"numba JIT warmed first ({warm_s:.2f} s, includes compile or cache load); "
          f"{args.reps} reps per timing, medians; {cpus} CPUs, load average at start "
          f"{load0[0]:.2f}")

    rows = []

    def row(name, n_req, n_draws, workers, t, sim_s, extra=None):
        med = t["median_s"]
        r = {"case": name, "n_requests": n_req, "draws": n_draws, "workers": workers,
             "wall_median_s": round(med, 4), "wall_min_s": round(t["min_s"], 4),
             "wall_max_s": round(t["max_s"], 4), "wall_all_s": t["all_s"], "reps": t["reps"],
             "per_draw_s": round(med / n_draws, 4), "simulated_s": round(sim_s, 1),
             "x_real_time": round(sim_s / med, 1)}
        r.update(extra or {})
        rows.append(r)
        print(f"{name:<28}{n_req:>9}{n_draws:>6}{str(workers):>8}{med:>11.3f}"
              f"{med / n_draws:>11.4f}{sim_s / med:>13,.0f}x", flush=True)

    print(f"\n{'case':<28}{'requests':>9}{'draws':>6}{'workers':>8}{'wall (s)':>11}"
          f"{'s / draw':>11}{'x real time':>14}")
    print("-" * 87)

    # 1) one draw: the engine alone, then run_scenario (engine + per-draw Python work)
    eng = timed(lambda: run_engine(w, cfg, constants, d1.beta[0], d1.alpha[0],
                                   noise_sigma=float(d1.noise_sigma[0]),
                                   noise_nu=float(d1.noise_nu[0]), seed=1), args.reps)
    run = eng.pop("_out")
    row("engine only, 1 draw", len(w), 1, 1, eng, span_s,
        {"n_steps": run.n_steps, "simulated_end_s": round(run.end_s, 1)})
    one = timed(lambda: run_scenario(sc, d1, deployment=dep, n_workers=1), args.reps)
    one.pop("_out")
    row("run_scenario, 1 draw", len(w), 1, 1, one, span_s)

    # 2) draws: 1, 10, 100 of the same scenario (serial, then threads = all CPUs)
    draw_list = (10,) if args.quick else (10, 100)
    for n in draw_list:
        dn = draws(n)
        for workers in (1, cpus):
            t = timed(lambda: run_scenario(sc, dn, deployment=dep, n_workers=workers), args.reps)
            t.pop("_out")
            row(f"run_scenario, {n} draws", len(w), n, workers, t, span_s)
            if cpus == 1:
                break

    # 3) requests: 1e3, 1e4, 1e5 at a constant 20 req/s (one draw, engine + metrics)
    sizes = (1_000, 10_000) if args.quick else (1_000, 10_000, 100_000)
    for n_req in sizes:
        s2 = scaled(sc, n_req)
        w2 = s2.build_workload()
        t = timed(lambda: run_scenario(s2, d1, deployment=dep, n_workers=1), args.reps)
        t.pop("_out")
        span2 = float(w2.stage_bounds_s[-1][1])
        row("20 req/s constant, 1 draw", len(w2), 1, 1, t, span2)

    # targets
    one_x = next(r for r in rows if r["case"] == "run_scenario, 1 draw")["x_real_time"]
    hundred = [r for r in rows if r["draws"] == 100]
    best100 = max(hundred, key=lambda r: r["x_real_time"]) if hundred else None
    targets = {"one_draw_x_real_time": one_x, "one_draw_target": 2000,
               "one_draw_met": one_x >= 2000}
    if best100:
        total_x = round(span_s / best100["wall_median_s"], 1)
        targets.update({"hundred_draws_total_x_real_time": total_x,
                        "hundred_draws_workers": best100["workers"],
                        "hundred_draws_target": 100, "hundred_draws_met": total_x >= 100})
    print("\ntargets: one draw "
          f"{one_x:,.0f}x real time (target >= 2,000x: {'met' if one_x >= 2000 else 'MISSED'})")
    if best100:
        print(f"         100 draws {targets['hundred_draws_total_x_real_time']:,.0f}x real time "
              f"in total ({best100['workers']} worker(s); target >= 100x: "
              f"{'met' if targets['hundred_draws_met'] else 'MISSED'})")

    doc = {"benchmark": "sim_speed", "package_version": __version__,
           "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "machine": {"cpus": cpus, "python": platform.python_version(),
                       "platform": platform.platform(), "load_average_start": load0,
                       "load_average_end": os.getloadavg()},
           "scenario": {"experiment": EXPERIMENT, "hardware": HARDWARE, "tp": sc.tp,
                        "n_requests": len(w), "span_s": span_s, "engine": cfg.__dict__,
                        "coefficients": "bayesblis.synth.Truth(0) of the configuration; "
                                        "multi-draw runs: x lognormal(0, 0.05) per coefficient"},
           "method": {"reps": args.reps, "statistic": "median", "jit_warmup_s": round(warm_s, 3),
                      "speed": "scenario span (s) / wall time (s)",
                      "command": "python3 benchmarks/sim_speed.py" + (" --quick" if args.quick else "")
                      + (f" --reps {args.reps}" if args.reps != 5 else "")},
           "rows": rows, "targets": targets}
    write_json(args.out, doc)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
