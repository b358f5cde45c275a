"""Write bayesblis/catalog/discrepancy.json (the simulator discrepancy `simulate` and `plan`
apply by default) from `bayesblis validate` REPORT.json files, and print it as a table.

    python3 benchmarks/build_discrepancy.py benchmarks/results/validate-experiment.json \
        --never-fitted benchmarks/results/validate-model.json

A report's `simulator_discrepancy` is calibrated on every held-out stage of every fold
(bayesblis.validate.pooled_discrepancy). Held out by experiment it says how far a new run of
a traced deployment falls from the simulation beyond what the posterior allows (`sd`); held
out by model the posterior's own spread already exceeds the errors (sd 0), and its `scale`
says by how much to scale that spread for a configuration never fitted
(bayesblis.discrepancy.spread_scale). Held out by experiment, stages beyond the load their
configuration was fitted at set `extrapolation_slope` (bayesblis.discrepancy.extrapolation_slope)
and the others `sd`.
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
    parser.add_argument("--never-fitted", type=Path, default=None,
                        help="REPORT.json held out by model: the spread scale of "
                             "configurations never fitted")
    parser.add_argument("--out", type=Path, default=CATALOG_FILE)
    args = parser.parse_args()
    load_discrepancy(args.report)  # checks the entries before anything is written
    report = load_json_checked(args.report)
    pooled = report["simulator_discrepancy"]
    metrics = {m: {k: v for k, v in e.items() if k not in ("scale", "n_stages_never_fitted")}
               for m, e in pooled["metrics"].items()}
    scale_source = None
    if args.never_fitted is not None:
        if not load_discrepancy(args.never_fitted).scale:
            sys.exit(f"{args.never_fitted}: no spread scale (a report held out by model?)")
        other = load_json_checked(args.never_fitted)
        for metric, entry in other["simulator_discrepancy"]["metrics"].items():
            if metric in metrics and "scale" in entry:
                metrics[metric].update(scale=entry["scale"],
                                       n_stages_never_fitted=entry["n_stages_never_fitted"])
        scale_source = (f"bayesblis validate, {other['holdout']} held out, "
                        f"{other['simulator_discrepancy']['n_runs']} {other['hardware']} runs, "
                        f"seed {other['sampler']['seed']}, model version {MODEL_VERSION}")
    doc = {"source": (f"bayesblis validate, {report['holdout']} held out, "
                      f"{pooled['n_runs']} {report['hardware']} runs, seed "
                      f"{report['sampler']['seed']}, model version {MODEL_VERSION}"),
           "report": str(args.report), "holdout": report["holdout"],
           "hardware": report["hardware"], "ci_prob": pooled["ci_prob"],
           "point_prediction": pooled["point_prediction"], "n_runs": pooled["n_runs"],
           "package_version": __version__, "model_version": MODEL_VERSION,
           "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "metrics": metrics}
    if scale_source:
        doc.update(scale_source=scale_source, scale_report=str(args.never_fitted))
    write_json(args.out, doc)
    print(f"{'metric':<14} {'sd (log)':>9} {'observed':>9} {'posterior':>10} {'stages':>7}"
          f" {'slope':>6} {'stages':>7} {'scale':>6} {'stages':>7}")
    for metric, e in doc["metrics"].items():
        slope = (f"{e['extrapolation_slope']:>6.3f} {e['n_stages_extrapolated']:>7}"
                 if "extrapolation_slope" in e else f"{'':>6} {'':>7}")
        scale = f"{e['scale']:>6.3f} {e['n_stages_never_fitted']:>7}" if "scale" in e else ""
        print(f"{metric:<14} {e['sd']:>9.3f} {e['sd_observed']:>9.3f} "
              f"{e['sd_posterior']:>10.3f} {e['n_stages']:>7} {slope} {scale}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
