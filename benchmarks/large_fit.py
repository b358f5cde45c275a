"""Large step tables with honest intervals (issue #21): the 'summary' fit against NUTS and ADVI.

Data: the 24-configuration synthetic step fleet (`synthetic_fleet(n, match_model=True)`:
true coefficients drawn with the model's own pooling, so that an exact posterior covers
them at the nominal rate; with ``--fleet legacy`` every coefficient also gets the family
and configuration effects the model does not have, the fleet of earlier benchmarks).

Each (method, size) runs in its own process (peak RSS is that process's: generating the
table included) and reports wall time (build + fit: summaries, compile, sampling,
importance weighting), sampler diagnostics, Pareto k, and the share of the true beta
coefficients inside the 90% intervals. Where NUTS on every row also ran at a size, the
other methods' intervals are compared with it (width ratio, NUTS means inside).

Methods: ``summary`` (NUTS on per-configuration likelihood summaries, PSIS-corrected:
bayesblis.model.summary), ``nuts`` (nutpie on every row, JAX, Laplace-preconditioned),
``advi`` (minibatch mean-field ADVI, 1,024 rows per step, the earlier large-table path).

Usage (from the repository root)::

    python3 benchmarks/large_fit.py                       # the recorded run (~12 min)
    python3 benchmarks/large_fit.py --sizes 200000 --methods summary
    python3 benchmarks/large_fit.py --sizes 5000000 --seed 1 --out ...   # other truths

Writes benchmarks/results/large_fit.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SAMPLER = {"draws": 2000, "tune": 1000, "chains": 2, "seed": 1, "store_obs_means": False,
           "target_accept": 0.95}
"""Sampler settings of the summary fit: its gradient costs nothing per row, so long chains
(1,000 draws gave r_hat 1.011-1.013 at 1M and 5M rows; at 0.9 target acceptance one
divergence at 1M); 1,000 of the 4,000 draws are
importance weighted and kept (the package default ``importance_draws``)."""
NUTS = {"draws": 500, "tune": 200, "chains": 2, "seed": 1, "store_obs_means": False,
        "nuts_backend": "jax", "max_treedepth": 6}
"""NUTS on every row: the fastest settings measured clean-ish at 200k (fit_speed.py)."""
ADVI = {"advi_iterations": 30000, "advi_learning_rate": 0.01, "draws": 500, "chains": 2,
        "seed": 1, "store_obs_means": False, "advi_mode": "NUMBA"}
TARGET_WALL_S, TARGET_PEAK_BYTES = 600.0, 4 * 1024**3
DEFAULT_RUNS = [("nuts", 200_000), ("summary", 200_000), ("advi", 200_000),
                ("summary", 1_000_000), ("summary", 5_000_000)]


def one(method: str, n_obs: int, fleet: str, seed: int = 0) -> dict:
    """Generate the fleet (truths and rows from `seed`), fit it with `method`; the result row
    (run in a child process)."""
    from fit_speed import beta_summary

    from bayesblis.model.hierarchy import LatencyModel
    from bayesblis.model.synthetic_steps import synthetic_fleet, truth_coverage

    warnings.simplefilter("ignore")
    t0 = time.perf_counter()
    data, truth = synthetic_fleet(n_obs, seed=seed, match_model=fleet == "model")
    generate_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    if method == "summary":
        model = LatencyModel(sampler_config=SAMPLER)
        model.build_model(data, likelihood="summary")
    elif method == "nuts":
        model = LatencyModel(sampler_config=NUTS)
        model.build_model(data)
    else:
        model = LatencyModel(sampler_config=ADVI)
        model.build_model(data, minibatch_size=1024)
    build_s = time.perf_counter() - t0
    idata = model.fit(method=method, progressbar=False)
    diag = model.fit_info["diagnostics"]
    keep = ("r_hat_max", "ess_bulk_min", "ess_tail_min", "divergences", "pareto_k",
            "importance_ess", "passed", "problems")
    return {"method": method, "n_rows": int(len(data.obs)), "truth_seed": seed,
            "generate_s": round(generate_s, 1),
            "build_s": round(build_s, 1), "fit_s": round(model.fit_info["wall_s"], 1),
            "wall_s": round(build_s + model.fit_info["wall_s"], 1),
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "diagnostics": {k: diag[k] for k in keep if k in diag},
            "importance": model.fit_info.get("importance"),
            "coverage_of_truth": round(truth_coverage(idata.posterior, truth), 3),
            "coverage_of_identified": round(truth_coverage(idata.posterior, truth,
                                                           identified_in=data), 3),
            "beta": beta_summary(idata)}


def run_child(method: str, n_obs: int, fleet: str, seed: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--one", method, str(n_obs), "--fleet", fleet,
                          "--seed", str(seed)],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{method} at {n_obs:,} rows failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--one", nargs=2, metavar=("METHOD", "N"), help=argparse.SUPPRESS)
    ap.add_argument("--sizes", type=int, nargs="*", help="rows (default: the recorded runs)")
    ap.add_argument("--methods", nargs="*", default=None, choices=["summary", "nuts", "advi"])
    ap.add_argument("--fleet", choices=["model", "legacy"], default="model")
    ap.add_argument("--seed", type=int, default=0, help="the fleet's truths and rows")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "large_fit.json")
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one[0], int(args.one[1]), args.fleet, args.seed)))
        return 0
    runs = DEFAULT_RUNS
    if args.sizes or args.methods:
        runs = [(m, n) for n in (args.sizes or sorted({n for _, n in DEFAULT_RUNS}))
                for m in (args.methods or ["summary"])]
    load0 = os.getloadavg()
    print(f"large_fit: {os.cpu_count()} CPUs, load {load0[0]:.2f}; fleet '{args.fleet}'", flush=True)
    rows = []
    head = (f"{'method':<9}{'rows':>11}{'wall s':>8}{'peak RSS':>10}{'r_hat':>7}{'ESS b/t':>11}"
            f"{'div':>5}{'k':>6}{'cover':>7}{'ident.':>7}{'w/NUTS':>8}{'in':>6}")
    print(head, flush=True)
    for method, n_obs in runs:
        row = run_child(method, n_obs, args.fleet, args.seed)
        rows.append(row)
        print(format_row(row, rows), flush=True)
    for row in rows:
        row.pop("beta")
    summary_rows = [r for r in rows if r["method"] == "summary"]
    largest = max(summary_rows, key=lambda r: r["n_rows"]) if summary_rows else None
    targets = None
    if largest:
        targets = {"n_rows": largest["n_rows"], "wall_s": largest["wall_s"],
                   "wall_met": largest["wall_s"] <= TARGET_WALL_S,
                   "peak_rss_bytes": largest["peak_rss_bytes"],
                   "memory_met": largest["peak_rss_bytes"] < TARGET_PEAK_BYTES,
                   "coverage": largest["coverage_of_truth"],
                   "coverage_met": 0.80 <= largest["coverage_of_truth"] <= 0.95}
        print(f"targets at {largest['n_rows']:,} rows: wall {largest['wall_s']} s (<= 600: "
              f"{ok(targets['wall_met'])}), peak RSS {largest['peak_rss_bytes'] / 1024**3:.2f} GB "
              f"(< 4: {ok(targets['memory_met'])}), coverage {largest['coverage_of_truth']:.0%} "
              f"(80-95%: {ok(targets['coverage_met'])})")
    from bayesblis import __version__
    from bayesblis.atomic import write_json

    write_json(args.out, {
        "benchmark": "large_fit", "package_version": __version__,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_average_start": load0, "load_average_end": os.getloadavg()},
        "command": "python3 benchmarks/large_fit.py" + "".join(f" {a}" for a in sys.argv[1:]),
        "fleet": args.fleet, "truth_seed": args.seed, "summary_sampler": SAMPLER,
        "nuts_sampler": NUTS, "advi": ADVI,
        "runs": rows, "targets": targets})
    print(f"wrote {args.out}")
    return 0


def ok(flag: bool) -> str:
    return "met" if flag else "MISSED"


def format_row(row: dict, rows: list[dict]) -> str:
    """One table line; compared with NUTS on every row at the same size when it ran."""
    from fit_speed import compare_beta

    d = row["diagnostics"]
    nuts = [r for r in rows if r["method"] == "nuts" and r["n_rows"] == row["n_rows"] and "beta" in r]
    vs = compare_beta(nuts[0]["beta"], row["beta"]) if nuts and row["method"] != "nuts" else None
    row["vs_nuts"] = vs
    fmt = (lambda key, spec: format(d[key], spec) if d.get(key) is not None else "-")
    ess = f"{fmt('ess_bulk_min', '.0f')}/{fmt('ess_tail_min', '.0f')}"
    return (f"{row['method']:<9}{row['n_rows']:>11,}{row['wall_s']:>8.1f}"
            f"{row['peak_rss_bytes'] / 1024**3:>9.2f}G{fmt('r_hat_max', '.3f'):>7}{ess:>11}"
            f"{fmt('divergences', 'd'):>5}{fmt('pareto_k', '.2f'):>6}{row['coverage_of_truth']:>7.0%}"
            f"{row['coverage_of_identified']:>7.0%}"
            + (f"{vs['width_ratio_median']:>8.2f}{vs['reference_means_inside_share']:>6.0%}" if vs else
               f"{'-':>8}{'-':>6}"))


if __name__ == "__main__":
    raise SystemExit(main())
