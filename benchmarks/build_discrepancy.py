"""Write bayesblis/catalog/discrepancy.json (the simulator discrepancy `simulate` and `plan`
apply by default) from `bayesblis validate` REPORT.json files, and print it as a table.

    python3 benchmarks/build_discrepancy.py benchmarks/results/validate-experiment.json \
        --never-fitted benchmarks/results/validate-model.json \
        benchmarks/results/new_models_posterior_only.json

A report's `simulator_discrepancy` is calibrated on every held-out stage of every fold
(bayesblis.validate.pooled_discrepancy). Held out by experiment it says how far a new run of
a traced deployment falls from the simulation beyond what the posterior allows (`sd`); held
out by model the posterior's own spread already exceeds the errors (sd 0), and the `scale`
says by how much to scale that spread for a configuration never fitted
(bayesblis.discrepancy.spread_scale): the conformal quantile over every never-fitted stage of
the `--never-fitted` reports (validation reports held out by model, and `validate
--external` reports made without a discrepancy, such as the new-model check), with its
coverage when each held-out model gets the scale of the others (`scale_cv_coverage`). Held out by experiment, stages beyond the load their
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
from bayesblis.discrepancy import (CATALOG_FILE, load_discrepancy, never_fitted_records,  # noqa: E402
                                   spread_scale, spread_scale_coverage)
from bayesblis.io.text import load_json_checked  # noqa: E402


def _describe(report: dict, path) -> str:
    """Where a --never-fitted report's stages come from, in a few words."""
    if report.get("report") == "external_check":
        return (f"bayesblis validate --external, {len(report['runs'])} runs never traced "
                f"({Path(path).name}), posterior-only, seed {report['seed']}")
    return (f"bayesblis validate, {report['holdout']} held out, "
            f"{report['simulator_discrepancy']['n_runs']} {report['hardware']} runs, "
            f"seed {report['sampler']['seed']}, model version {MODEL_VERSION}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="REPORT.json of `bayesblis validate`")
    parser.add_argument("--never-fitted", type=Path, nargs="+", default=None,
                        help="REPORT.json files held out by model, or external-check reports "
                             "without a discrepancy: the spread scale of configurations never "
                             "fitted")
    parser.add_argument("--out", type=Path, default=CATALOG_FILE)
    args = parser.parse_args()
    load_discrepancy(args.report)  # checks the entries before anything is written
    report = load_json_checked(args.report)
    pooled = report["simulator_discrepancy"]
    metrics = {m: {k: v for k, v in e.items() if k not in ("scale", "n_stages_never_fitted")}
               for m, e in pooled["metrics"].items()}
    scale_source = None
    if args.never_fitted:
        records, sources = [], []
        for path in args.never_fitted:
            other = load_json_checked(path)
            found = never_fitted_records(other, path)
            if not found:
                sys.exit(f"{path}: no stage of a configuration never fitted (held out by model?)")
            records += found
            sources.append(_describe(other, path))
        metric_names = list(metrics)
        scales = spread_scale(records, metric_names)
        coverage = spread_scale_coverage(records, metric_names)
        for metric, entry in scales.items():
            metrics[metric].update(scale=entry["scale"], n_stages_never_fitted=entry["n_stages"])
            if metric in coverage:
                metrics[metric]["scale_cv_coverage"] = coverage[metric]["coverage"]
        scale_source = "; ".join(sources)
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
        doc.update(scale_source=scale_source,
                   scale_reports=[str(p) for p in args.never_fitted])
    write_json(args.out, doc)
    print(f"{'metric':<14} {'sd (log)':>9} {'observed':>9} {'posterior':>10} {'stages':>7}"
          f" {'slope':>6} {'stages':>7} {'scale':>6} {'stages':>7} {'cv cov':>6}")
    for metric, e in doc["metrics"].items():
        slope = (f"{e['extrapolation_slope']:>6.3f} {e['n_stages_extrapolated']:>7}"
                 if "extrapolation_slope" in e else f"{'':>6} {'':>7}")
        scale = (f"{e['scale']:>6.3f} {e['n_stages_never_fitted']:>7} "
                 f"{100 * e.get('scale_cv_coverage', float('nan')):>5.0f}%" if "scale" in e else "")
        print(f"{metric:<14} {e['sd']:>9.3f} {e['sd_observed']:>9.3f} "
              f"{e['sd_posterior']:>10.3f} {e['n_stages']:>7} {slope} {scale}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
