"""The README's quick tour, timed: `bayesblis ingest` of the 16 shared H100 runs, then
`bayesblis fit`, each a fresh process, once per sampler seed.

Records, per seed, the wall time of both commands (what a user waits), the fit's own wall
time (compiling and sampling) and its compile step, the draws per chain at which the
diagnostics passed (every look the sampler took), the diagnostics and the posterior file's
size. The issue's target:
ingest and fit within 3 minutes on 2 cores, diagnostics PASS on three seeds. Run it alone
on the machine: other work on the 2 cores slows the fit, not its draws.

    python3 benchmarks/quick_tour.py [--seeds 1 2 3] [--out benchmarks/results/quick_tour.json]
        [--keep DIR]

Writes benchmarks/results/quick_tour.json (or --out); with --keep, each seed's dataset and
posterior stay in DIR (`posterior-SEED.nc`: what benchmarks/new_models.py reads).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))

from provenance import git_commit, shared_data_dir  # noqa: E402 (benchmarks/, the script's folder)

TARGET_S = 180.0
RUNS = "real/h100-inference-perf"


def timed(argv: list[str]) -> float:
    """Wall seconds of one command, run as a user would (a fresh process); its output is
    kept out of the way and shown only if it fails."""
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    wall_s = time.perf_counter() - started
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"{' '.join(argv)} failed with exit code {done.returncode}")
    return wall_s


def one_seed(seed: int, work: Path) -> dict:
    """Ingest and fit in fresh processes; what the posterior file says of the fit."""
    from bayesblis.model.store import load_posterior

    dataset, posterior = work / f"ds-{seed}", work / f"posterior-{seed}.nc"
    cli = [sys.executable, "-m", "bayesblis"]
    ingest_s = timed([*cli, "ingest", str(shared_data_dir() / RUNS), "--hardware", "H100",
                      "--out", str(dataset)])
    fit_s = timed([*cli, "fit", str(dataset), "--out", str(posterior), "--seed", str(seed),
                   "--quiet"])
    info = load_posterior(posterior).fit_info
    checks = info.get("draw_checks") or []
    diagnostics = info["diagnostics"]
    return {"seed": seed, "ingest_s": round(ingest_s, 1), "fit_command_s": round(fit_s, 1),
            "total_s": round(ingest_s + fit_s, 1), "fit_wall_s": round(info["wall_s"], 1),
            "compile_s": round(info.get("compile_s") or 0.0, 1),
            "draws_checked": [c["draws"] for c in checks],
            "passed_at_draws": next((c["draws"] for c in checks if c["passed"]), None),
            "passed": bool(diagnostics.get("passed")),
            "diagnostics": {k: diagnostics.get(k) for k in
                            ("r_hat_max", "ess_bulk_min", "ess_tail_min", "divergences",
                             "e_bfmi_min", "problems")},
            "posterior_bytes": posterior.stat().st_size}


def main(argv=None) -> int:
    from bayesblis import __version__
    from bayesblis.atomic import write_json
    from bayesblis.constants import MODEL_VERSION

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/quick_tour.json")
    ap.add_argument("--keep", type=Path, help="keep each seed's dataset and posterior here")
    args = ap.parse_args(argv)
    if not (shared_data_dir() / RUNS).is_dir():
        raise SystemExit(f"{shared_data_dir() / RUNS}: not found (set BAYESBLIS_DATA to the shared data)")
    load_start = os.getloadavg()
    rows = []
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bayesblis-quick-tour-") as tmp:
        for seed in args.seeds:
            rows.append(one_seed(seed, args.keep or Path(tmp)))
            r = rows[-1]
            print(f"seed {seed}: ingest {r['ingest_s']:.1f} s + fit {r['fit_command_s']:.1f} s = "
                  f"{r['total_s']:.1f} s; {'PASS' if r['passed'] else 'FAIL'} at "
                  f"{r['passed_at_draws'] or r['draws_checked'][-1]} draws per chain", flush=True)
    totals = [r["total_s"] for r in rows]
    result = {
        "benchmark": "quick_tour", "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "package_version": __version__, "model_version": MODEL_VERSION, "git_commit": git_commit(),
        "commands": [f"bayesblis ingest ../shared/data/{RUNS} --hardware H100 --out DS",
                     "bayesblis fit DS --out POSTERIOR.nc --seed SEED --quiet"],
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform(), "load_average_start": load_start,
                    "load_average_end": os.getloadavg()},
        "target_total_s": TARGET_S, "seeds": rows,
        "summary": {"median_total_s": statistics.median(totals), "max_total_s": max(totals),
                    "all_passed": all(r["passed"] for r in rows),
                    "seeds_within_target": sum(t <= TARGET_S for t in totals)},
    }
    write_json(args.out, result)
    print(f"median {result['summary']['median_total_s']:.1f} s, max {max(totals):.1f} s; "
          f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
