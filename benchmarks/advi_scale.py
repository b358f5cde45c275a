"""ADVI at scale: minibatch ADVI on millions of step observations (issue #7, part 3).

Data: `bayesblis.model.synthetic_steps.synthetic_fleet` (24 configurations of single
steps, 5% Student-t step noise). The large table is fitted with mean-field ADVI
(`LatencyModel.build_model(data, minibatch_size=B)` + ``fit(method="advi")``: each
gradient step sees B random rows, scaled to the table by ``total_size``).

Then, on a subset small enough for NUTS (the first n / 24 steps of every configuration
of the same table), NUTS (nutpie) and ADVI (minibatch, same settings; and full batch) are
compared per configuration and beta coefficient: 90% interval width ratio ADVI / NUTS,
share of NUTS posterior means inside ADVI's 90% interval, and |mean difference| in NUTS
posterior sds. ADVI is known to be over-confident (mean-field ignores correlations).

Memory: peak resident set size, from ``getrusage`` (whole process up to that point) and a
thread sampling /proc/self/statm every 0.1 s (peak per phase). The large phase runs first
so that the process peak at its end is that of the large fit.

Targets (issue): >= 5M observations in <= 10 min wall and < 4 GB peak memory.

Usage (from the repository root)::

    python3 benchmarks/advi_scale.py --quick   # 200k rows, NUTS subset 5k
    python3 benchmarks/advi_scale.py --subset 5000
                                               # the recorded run: 5M rows, ~23 min at load 4-8

Writes benchmarks/results/advi_scale.json (or --out).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import threading
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fit_speed import beta_summary, compare_beta, head_per_config  # noqa: E402

ADVI = {"advi_iterations": 30000, "advi_learning_rate": 0.01, "draws": 500, "chains": 2,
        "seed": 1, "store_obs_means": False, "advi_mode": "NUMBA"}
"""ADVI settings: package defaults (1,000 draws from the approximation), but the step
compiled by numba (a longer compile, then ~1.2 ms instead of ~7.5 ms per step here)."""

NUTS = {"draws": 500, "tune": 500, "chains": 2, "seed": 1, "store_obs_means": False}
TARGET_WALL_S = 600.0
TARGET_PEAK_BYTES = 4 * 1024**3
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


class RssPeak:
    """Peak resident set size of this process over a `with` block (sampled)."""

    def __init__(self, every_s: float = 0.1):
        self.every_s = every_s
        self.peak_bytes = 0
        self._stop = threading.Event()

    def _rss_bytes(self) -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * PAGE_BYTES

    def _run(self):
        while not self._stop.is_set():
            self.peak_bytes = max(self.peak_bytes, self._rss_bytes())
            self._stop.wait(self.every_s)

    def __enter__(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak_bytes = max(self.peak_bytes, self._rss_bytes())


def process_peak_bytes() -> int:
    """Peak RSS of the process so far (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def gb(n_bytes: float) -> str:
    return f"{n_bytes / 1024**3:.2f} GB"


def fit_advi(data, batch_size: int | None, label: str) -> dict:
    """Build and fit ADVI (minibatch when batch_size); timings and beta summary."""
    from bayesblis.model.hierarchy import LatencyModel

    t0 = time.perf_counter()
    lm = LatencyModel(sampler_config=ADVI)
    lm.build_model(data, minibatch_size=batch_size)
    build_s = time.perf_counter() - t0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = lm.fit(method="advi", progressbar=False)
    loss = lm.fit_info.get("advi_loss", [])
    return {"label": label, "method": "advi", "batch_size": batch_size, "n_rows": len(data.obs),
            "build_s": round(build_s, 1), "fit_s": round(lm.fit_info["wall_s"], 1),
            "iterations": ADVI["advi_iterations"], "final_loss_median": float(np.median(loss)) if loss else None,
            "beta": beta_summary(idata)}


def fit_nuts(data, label: str) -> dict:
    """nutpie NUTS (compile included in fit_s; diagnostics kept)."""
    from bayesblis.model.hierarchy import LatencyModel

    lm = LatencyModel(sampler_config=NUTS)
    lm.build_model(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = lm.fit(method="nuts", progressbar=False)
    diag = lm.fit_info["diagnostics"]
    return {"label": label, "method": "nuts", "n_rows": len(data.obs),
            "fit_s": round(lm.fit_info["wall_s"], 1),
            "diagnostics": {k: diag.get(k) for k in ("r_hat_max", "ess_bulk_min", "ess_tail_min",
                                                      "divergences", "passed")},
            "beta": beta_summary(idata)}


def large_phase(n_obs: int, batch_size: int) -> tuple[dict, object]:
    """Generate `n_obs` steps and fit minibatch ADVI; timings and memory."""
    from bayesblis.model.synthetic_steps import synthetic_fleet

    with RssPeak() as mem:
        t0 = time.perf_counter()
        data, truth = synthetic_fleet(n_obs)
        gen_s = time.perf_counter() - t0
        print(f"generated {len(data.obs):,} steps of {len(data.configs)} configurations in "
              f"{gen_s:.1f} s", flush=True)
        row = fit_advi(data, batch_size, f"ADVI minibatch {batch_size}, {len(data.obs):,} steps")
    row.update(generate_s=round(gen_s, 1), peak_rss_bytes=mem.peak_bytes,
               process_peak_rss_bytes=process_peak_bytes())
    row["wall_s"] = round(row["build_s"] + row["fit_s"], 1)
    row["coverage_of_truth"] = coverage(row["beta"], truth)
    return row, data


def coverage(beta: dict, truth: dict) -> float:
    """Share of true beta coefficients inside the 90% intervals."""
    lo, hi = np.array(beta["lo"]), np.array(beta["hi"])
    true = np.array([truth[c] for c in beta["config"]])
    return round(float(((lo <= true) & (true <= hi)).mean()), 3)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="200k rows, subset 5k")
    ap.add_argument("--n-obs", type=int, default=None, help="rows of the large table")
    ap.add_argument("--subset", type=int, default=None, help="rows of the NUTS subset")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "advi_scale.json")
    args = ap.parse_args(argv)
    n_obs = args.n_obs or (200_000 if args.quick else 5_000_000)
    n_sub = args.subset or (5_000 if args.quick else 20_000)
    load0 = os.getloadavg()
    print(f"advi_scale: {os.cpu_count()} CPUs, load average at start {load0[0]:.2f}; ADVI "
          f"{ADVI['advi_iterations']} iterations (adam {ADVI['advi_learning_rate']}), "
          f"minibatch {args.batch_size}")

    large, data = large_phase(n_obs, args.batch_size)
    print(f"\n{'fit':<42}{'rows':>11}{'build s':>9}{'fit s':>8}{'wall s':>8}{'peak RSS':>10}")
    print(f"{large['label']:<42}{large['n_rows']:>11,}{large['build_s']:>9.1f}{large['fit_s']:>8.1f}"
          f"{large['wall_s']:>8.1f}{gb(large['peak_rss_bytes']):>10}")
    print(f"  (+ {large['generate_s']} s generating the table; process peak RSS "
          f"{gb(large['process_peak_rss_bytes'])}; 90% intervals cover "
          f"{large['coverage_of_truth']:.0%} of the true beta)", flush=True)

    subset = head_per_config(data, n_sub)
    del data
    print(f"\nsubset: {len(subset.obs):,} steps (first {n_sub // 24:,} of every configuration)")
    fits = [fit_nuts(subset, f"NUTS (nutpie) {len(subset.obs):,}"),
            fit_advi(subset, args.batch_size, f"ADVI minibatch {args.batch_size}"),
            fit_advi(subset, None, "ADVI full batch")]
    nuts = fits[0]
    d = nuts["diagnostics"]
    print(f"  NUTS: {nuts['fit_s']} s incl. compile; r_hat max {d['r_hat_max']:.3f}, bulk ESS min "
          f"{d['ess_bulk_min']:.0f}, divergences {d['divergences']} -> {'PASS' if d['passed'] else 'FAIL'}")
    print(f"\n{'ADVI vs NUTS on the subset':<34}{'fit s':>7}{'w ratio':>9}{'min':>7}{'max':>7}"
          f"{'NUTS in':>9}{'|dmean|/sd':>11}{'median':>8}")
    comparisons = {}
    for row in fits[1:]:
        c = compare_beta(nuts["beta"], row["beta"])
        comparisons[row["label"]] = c
        print(f"{row['label']:<34}{row['fit_s']:>7.1f}{c['width_ratio_median']:>9.3f}"
              f"{c['width_ratio_min']:>7.3f}{c['width_ratio_max']:>7.3f}"
              f"{c['reference_means_inside_share']:>9.1%}{c['mean_shift_sd_max']:>11.2f}"
              f"{c['mean_shift_sd_median']:>8.2f}")
    print("  (w ratio: 90% interval width ADVI / NUTS, median over 24 configs x 10 coefficients;"
          "\n   NUTS in: share of NUTS means inside ADVI's 90% interval; |dmean|/sd: in NUTS sds)")

    met_wall = large["wall_s"] <= TARGET_WALL_S
    met_mem = large["process_peak_rss_bytes"] < TARGET_PEAK_BYTES
    print(f"\ntargets: {large['n_rows']:,} rows in {large['wall_s']} s build+fit "
          f"(<= {TARGET_WALL_S:.0f} s: {'met' if met_wall else 'MISSED'}), process peak RSS "
          f"{gb(large['process_peak_rss_bytes'])} (< 4 GB: {'met' if met_mem else 'MISSED'})")
    finish(args, load0, large, fits, comparisons, met_wall, met_mem)
    return 0


def finish(args, load0, large, fits, comparisons, met_wall, met_mem) -> None:
    from bayesblis import __version__
    from bayesblis.atomic import write_json

    large.pop("beta", None)
    for row in fits:
        row.pop("beta", None)
    doc = {"benchmark": "advi_scale", "package_version": __version__,
           "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                       "platform": platform.platform(), "load_average_start": load0,
                       "load_average_end": os.getloadavg()},
           "command": "python3 benchmarks/advi_scale.py" + "".join(f" {a}" for a in sys.argv[1:]),
           "advi": ADVI, "nuts": NUTS, "large": large, "subset_fits": fits,
           "advi_vs_nuts": comparisons,
           "targets": {"wall_s": large["wall_s"], "wall_target_s": TARGET_WALL_S, "wall_met": met_wall,
                       "peak_rss_bytes": large["process_peak_rss_bytes"],
                       "peak_target_bytes": TARGET_PEAK_BYTES, "memory_met": met_mem}}
    write_json(args.out, doc)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    raise SystemExit(main())
