"""Write bayesblis/catalog/discrepancy.json (the simulator discrepancy `simulate` and `plan`
apply by default) from a `bayesblis validate` REPORT.json, and print it as a table.

    python3 benchmarks/build_discrepancy.py benchmarks/results/validate-experiment.json

The report's `simulator_discrepancy` is calibrated on every held-out stage of every fold
(bayesblis.validate.pooled_discrepancy). Held out by experiment it says how far a new run of
a traced deployment falls from the simulation beyond what the posterior allows; held out by
model the posterior's own spread already exceeds the errors (sd 0).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bayesblis import __version__  # noqa: E402
from bayesblis.atomic import write_json  # noqa: E402
from bayesblis.constants import MODEL_VERSION  # noqa: E402
from bayesblis.discrepancy import CATALOG_FILE, load_discrepancy  # noqa: E402
from bayesblis.io.text import load_json_checked  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="REPORT.json of `bayesblis validate`")
    parser.add_argument("--out", type=Path, default=CATALOG_FILE)
    args = parser.parse_args()
    load_discrepancy(args.report)  # checks the entry before anything is written
    report = load_json_checked(args.report)
    pooled = report["simulator_discrepancy"]
    doc = {"source": (f"bayesblis validate, {report['holdout']} held out, "
                      f"{pooled['n_runs']} {report['hardware']} runs, seed "
                      f"{report['sampler']['seed']}, model version {MODEL_VERSION}"),
           "report": str(args.report), "holdout": report["holdout"],
           "hardware": report["hardware"], "ci_prob": pooled["ci_prob"],
           "point_prediction": pooled["point_prediction"], "n_runs": pooled["n_runs"],
           "package_version": __version__, "model_version": MODEL_VERSION,
           "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "metrics": pooled["metrics"]}
    write_json(args.out, doc)
    print(f"{'metric':<14} {'sd (log)':>9} {'observed':>9} {'posterior':>10} {'stages':>7}")
    for metric, e in doc["metrics"].items():
        print(f"{metric:<14} {e['sd']:>9.3f} {e['sd_observed']:>9.3f} "
              f"{e['sd_posterior']:>10.3f} {e['n_stages']:>7}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
