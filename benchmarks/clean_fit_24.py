"""The 24-configuration synthetic step fleet (3 GPUs x 4 families, dense and MoE, TP 1/2)
fitted with NUTS: sampler diagnostics and 90% coverage of the true coefficients.

Usage: python3 benchmarks/clean_fit_24.py [--n-obs 1440] [--draws 1000]
Writes benchmarks/results/clean_fit_24.json.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

from bayesblis.atomic import write_json
from bayesblis.model.diagnostics import format_diagnostics
from bayesblis.model.hierarchy import LatencyModel
from bayesblis.model.synthetic_steps import synthetic_fleet, truth_coverage

RESULT = Path(__file__).resolve().parent / "results" / "clean_fit_24.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-obs", type=int, default=1440, help="step observations in all")
    parser.add_argument("--draws", type=int, default=1000, help="draws (and tuning steps) per chain")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    data, truth = synthetic_fleet(args.n_obs, seed=0)
    model = LatencyModel(sampler_config={"draws": args.draws, "tune": args.draws, "chains": 2,
                                         "seed": 1})
    model.build_model(data)
    started = time.perf_counter()
    model.fit(progressbar=False)
    wall_s = time.perf_counter() - started
    diag = model.fit_info["diagnostics"]
    coverage = truth_coverage(model.idata.posterior, truth)
    print(f"{len(data.configs)} configurations, {len(data.obs)} step observations, "
          f"2 chains x {args.draws} draws, fit {wall_s:.0f} s (compile included)")
    print(format_diagnostics(diag))
    print(f"90% intervals containing the true beta: {coverage:.3f}")
    write_json(RESULT, {"n_configs": int(len(data.configs)), "n_obs": int(len(data.obs)),
                        "draws": args.draws, "fit_wall_s": wall_s, "diagnostics": diag,
                        "truth_coverage_90": coverage})
    print(f"wrote {RESULT}")


if __name__ == "__main__":
    main()
