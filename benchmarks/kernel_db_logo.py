"""Leave one GPU out of kernel-db: a GPU's kernel times predicted from the other three.

For a GPU kernel-db lacks, step physics rests on its datasheet times an achieved fraction
measured elsewhere. This measures how far that carries, per operator group, on the kernel
prices bayesblis ships (`bayesblis.catalog.kernel_prices`, built from kernel-db vLLM 0.14.0;
the groups and points of `bayesblis.catalog.kernel_spread.log_ratios`: decode GEMMs whose
weights exceed every L2, prefill GEMMs, decode attention past L2, the all-reduce per byte
and per small message at TP 2, 4 and 8).

Predictions of the held-out GPU's ratios (measured time over datasheet time) at each point:
``hierarchy``, the predictive of `kernel_spread`'s model fitted on the other three GPUs (a
fresh GPU effect at the fitted spread tau, the points' effects, the error; its median and
90% interval); ``pooled``, the geometric mean of the other three GPUs' ratio at the same
point (what a deployment on a GPU kernel-db lacks is priced at, `kernel_prices.pooled`, for
its GEMMs, decode attention and compute; its all-reduce keeps the datasheet link); and
``h100``, the reference GPU's ratio (every kernel factor 1, what such a deployment was priced
at before 2026-11-28). Error = predicted time / measured time - 1: median |error| per group;
coverage = share of the points whose measured ratio lies in the 90% interval.

Usage: python3 benchmarks/kernel_db_logo.py [--out JSON] [--seed N]
Writes benchmarks/results/kernel_db_logo.json (docs/kernel-db.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from pathlib import Path

import numpy as np
from provenance import git_commit

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "benchmarks" / "results" / "kernel_db_logo.json"
TARGET_ABS_ERROR_PCT = 10.0


def _pct(log_error) -> float:
    return round(float(np.median(np.expm1(log_error))) * 100, 1)


def _abs_pct(log_error) -> float:
    return round(float(np.median(np.abs(np.expm1(log_error)))) * 100, 1)


def held_out(frame, held: str, reference: str, seed: int) -> dict:
    """{group: scores} for `held` predicted from the other GPUs of `frame`."""
    from bayesblis.catalog import kernel_spread

    train = frame[frame["gpu"] != held]
    idata = kernel_spread.fit(train, seed=seed)
    rng = np.random.default_rng(seed)
    out = {"diagnostics": kernel_spread.diagnostics(idata), "groups": {}}
    for group, rows in frame[frame["gpu"] == held].groupby("group"):
        truth = rows.set_index("point")["log_ratio"]
        others = train[train["group"] == group].pivot(index="gpu", columns="point", values="log_ratio")
        draws = kernel_spread.predict_new_gpu(idata, train, group, bool(rows["pcie"].iloc[0]), rng)
        draws = draws[truth.index]
        lo, mid, hi = (draws.quantile(q).to_numpy() for q in (0.05, 0.5, 0.95))
        y = truth.to_numpy()
        row = {"points": int(len(y)),
               "hierarchy_median_abs_error_pct": _abs_pct(mid - y),
               "hierarchy_median_signed_error_pct": _pct(mid - y),
               "hierarchy_coverage_90": round(float(np.mean((y >= lo) & (y <= hi))), 3),
               "hierarchy_interval_width_pct": round(float(np.median(np.exp(hi - lo) - 1)) * 100, 1),
               "pooled_median_abs_error_pct": _abs_pct(others.mean()[truth.index].to_numpy() - y),
               "pooled_median_signed_error_pct": _pct(others.mean()[truth.index].to_numpy() - y)}
        if held != reference and reference in others.index:
            ref = others.loc[reference, truth.index].to_numpy()
            row["h100_median_abs_error_pct"] = _abs_pct(ref - y)
            row["h100_median_signed_error_pct"] = _pct(ref - y)
        out["groups"][group] = row
    return out


def main(argv=None):
    from bayesblis import __version__
    from bayesblis.atomic import write_json
    from bayesblis.catalog import kernel_prices, kernel_spread

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=RESULT)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    frame = kernel_spread.log_ratios()
    gpus = sorted(frame["gpu"].unique())
    results = {}
    for held in gpus:
        print(f"fitting without {held} ...", flush=True)
        results[held] = held_out(frame, held, kernel_prices.REFERENCE[0], args.seed)
    groups = sorted(frame["group"].unique())
    by_group = {g: {gpu: results[gpu]["groups"][g] for gpu in gpus} for g in groups}
    within = {g: {gpu: row["hierarchy_median_abs_error_pct"] <= TARGET_ABS_ERROR_PCT
                  for gpu, row in rows.items()} for g, rows in by_group.items()}
    coverage = {g: round(float(np.mean([row["hierarchy_coverage_90"] for row in rows.values()])), 3)
                for g, rows in by_group.items()}
    report = {
        "benchmark": "kernel_db_logo", "created_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "package_version": __version__, "git_commit": git_commit(), "seed": args.seed,
        "inputs": {"catalog": "bayesblis/catalog/kernel_prices.json",
                   "source": kernel_prices.catalog().get("source")},
        "method": " ".join(__doc__.split("\n\n")[1:3]).replace("\n", " "),
        "target_abs_error_pct": TARGET_ABS_ERROR_PCT, "groups": by_group, "within_target": within,
        "coverage_90_mean_over_gpus": coverage,
        "diagnostics": {gpu: results[gpu]["diagnostics"] for gpu in gpus},
        "wall_s": round(time.perf_counter() - t0, 1)}
    write_json(args.out, report)
    print(f"{'group':<20}{'held-out GPU':<16}{'hierarchy':>10}{'90% cover':>10}{'width':>8}"
          f"{'pooled':>8}{'H100':>8}")
    for group, rows in by_group.items():
        for gpu, row in rows.items():
            h = row.get("h100_median_signed_error_pct")
            print(f"{group:<20}{gpu:<16}{row['hierarchy_median_signed_error_pct']:>+9.1f}%"
                  f"{row['hierarchy_coverage_90']:>10.0%}{row['hierarchy_interval_width_pct']:>7.0f}%"
                  f"{row['pooled_median_signed_error_pct']:>+7.1f}%" + (f"{h:>+7.1f}%" if h is not None else ""))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
