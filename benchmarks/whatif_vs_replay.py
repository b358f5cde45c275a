"""What-if against replay: each shared run predicted from its profile and from its recorded
requests, from the same posterior, draws and seed; per-stage E2E / TTFT / ITL means.

The what-if path (`simulate RUN` without `--replay`, `plan`) generates the workload the
load generator sends (`simulate.workload`); if it is faithful, both predictions agree.
Writes benchmarks/results/whatif_vs_replay.json.

    python benchmarks/whatif_vs_replay.py --posterior POSTERIOR.nc [--draws 20]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from bayesblis import atomic
from bayesblis.coefficients import posterior_draws
from bayesblis.simulate.results import Draws, run_scenario
from bayesblis.simulate.scenario import Scenario

REAL = Path(__file__).resolve().parents[1].parent / "shared/data/real/h100-inference-perf"
METRICS = ("e2e_mean_s", "ttft_mean_s", "itl_mean_s")
OUT = Path(__file__).resolve().parent / "results/whatif_vs_replay.json"


def predict(folder: Path, posterior, replay: bool, n_draws: int, seed: int) -> dict:
    sc = Scenario.from_inference_perf(folder, "H100-SXM", replay=replay, seed=seed)
    dep = sc.deployment()
    cd = posterior_draws(posterior, dep, n_draws, seed=seed)
    return run_scenario(sc, Draws.from_coefficient_draws(cd, "posterior"), seed=seed,
                        deployment=dep)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--posterior", required=True)
    ap.add_argument("--draws", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", default=str(REAL))
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    rows = []
    t0 = time.perf_counter()
    for folder in sorted(p for p in Path(args.runs).iterdir() if p.is_dir()):
        res = {mode: predict(folder, args.posterior, mode == "replay", args.draws, args.seed)
               for mode in ("generated", "replay")}
        for s, (g, r) in enumerate(zip(res["generated"]["stages"], res["replay"]["stages"])):
            row = {"run": folder.name, "stage": s, "rate_rps": r["rate_rps"],
                   "workload_generated": res["generated"]["workload"][s],
                   "workload_replay": res["replay"]["workload"][s]}
            for m in METRICS:
                gm, rm = g[m]["median"], r[m]["median"]
                row[f"generated_{m}"], row[f"replay_{m}"] = gm, rm
                row[f"pct_diff_{m}"] = (gm - rm) / rm * 100 if rm else None
            rows.append(row)
            print(f"{folder.name[16:]:40s} stage {s}: " + "  ".join(
                f"{m[:-7]} {row[f'pct_diff_{m}']:+5.1f}%" for m in METRICS), flush=True)
    diffs = {m: [abs(r[f"pct_diff_{m}"]) for r in rows if r[f"pct_diff_{m}"] is not None]
             for m in METRICS}
    doc = {"benchmark": "whatif_vs_replay", "posterior": args.posterior, "draws": args.draws,
           "seed": args.seed, "wall_s": round(time.perf_counter() - t0, 1),
           "summary": {m: {"median_abs_pct_diff": float(np.median(v)),
                           "max_abs_pct_diff": float(np.max(v)),
                           "stages_within_2pct": int(sum(x <= 2 for x in v)), "stages": len(v)}
                       for m, v in diffs.items()},
           "stages": rows}
    atomic.write_text(args.out, json.dumps(doc, indent=1))
    print(json.dumps(doc["summary"], indent=1))
    return doc


if __name__ == "__main__":
    main()
