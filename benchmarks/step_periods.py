"""Step periods as a check: measured vLLM step periods (real step tracing) against the
step time a posterior predicts for the same batches, per bin of requests in flight.

Measured: consecutive step ids of `io.step_traces` (start-to-start time of step k to step
k + 1, exact), decode-only pairs (no prefill at either end) with the same running depth at
both ends; in flight = the running depth of the first step. Predicted: the posterior's
coefficient draws of the deployment (`coefficients.posterior_draws`, the configuration's
own draws, no new-run factor) times the step features (`features.beta.beta_features`) of
each measured step's batch: its decode requests and an estimate of their KV tokens from the
traced KV usage (`io.step_traces.decode_context_estimate`; per-request lengths are not
traced). The simulator is not run: the batches are the measured ones. Per bin: the
measured median period (bootstrap 90% interval) and, per draw, the median predicted time
of the bin's steps (median and 90% interval over draws); error = predicted / measured - 1.
The step noise the simulator adds is left out (it is centred: it moves means, not this
median). The posterior must not have seen these step tables (a posterior of client-side
windows only, e.g. `bayesblis fit` of the 16 inference-perf runs).

Also the slope of the period in the number of requests below and above `KNEE` in flight
(least squares on the pairs): the step time's concavity.

Usage: python3 benchmarks/step_periods.py [--posterior P.nc] [--steps steps.parquet]
       [--draws 400] [--out JSON] [--figure PNG]
Writes benchmarks/results/step_periods.json and step_periods.png (docs/kernel-db.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import time
from pathlib import Path

import numpy as np
import pandas as pd
from provenance import git_commit

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "benchmarks" / "results" / "step_periods.json"
FIGURE = REPO / "benchmarks" / "results" / "step_periods.png"
DEFAULT_STEPS = REPO.parent / "shared" / "data" / "real" / "h100-step-traces" / "batch_summary_steps.parquet"
DEFAULT_POSTERIOR = Path("/tmp/w/posterior.nc")
HARDWARE = "H100-SXM"
EDGES = (9, 20, 30, 45, 60, 75, 90, 105, 115, 128)
"""In-flight bins (lo, hi]: 10-20, 21-30, ..., 116-128."""
KNEE = 45
MIN_PAIRS = 5
"""Bins with fewer pairs are reported but not scored."""
TARGET = 0.03
PROB = 0.9


def model_name(name: str) -> str:
    """A step-trace model name as a catalog model ('llama-2-70b-hf' -> 'llama-2-70b')."""
    from bayesblis.catalog.models import load_model

    for candidate in (name, name.removesuffix("-hf")):
        try:
            load_model(candidate)
            return candidate
        except Exception:  # noqa: BLE001 - try the next spelling
            continue
    raise SystemExit(f"model {name!r} of the step traces is not in the model catalog")


def deployment(model: str, tp: int):
    from bayesblis.catalog.models import load_model
    from bayesblis.features.physics import Deployment

    return Deployment(load_model(model), HARDWARE, tp=int(tp), ep=1, dtype="auto", block_size=16)


def predicted_steps(pairs: pd.DataFrame, dep, beta: np.ndarray) -> np.ndarray:
    """[pairs, draws] predicted step seconds of each pair's first step."""
    from bayesblis.features.beta import beta_features
    from bayesblis.io.step_traces import decode_context_estimate

    n = len(pairs)
    features = beta_features(dep, prefill_tokens=np.zeros(n), prefill_context_tokens=np.zeros(n),
                             prefill_attention_pairs=np.zeros(n), num_prefill_reqs=np.zeros(n),
                             num_decode_reqs=pairs["num_decode_reqs"].to_numpy(float),
                             decode_context_tokens=decode_context_estimate(pairs, dep.block_size))
    return features @ beta.T


def bootstrap_median(values: np.ndarray, rng, n_boot: int = 2000) -> tuple[float, float]:
    if len(values) < 2:
        return float("nan"), float("nan")
    boots = np.median(rng.choice(values, (n_boot, len(values)), replace=True), axis=1)
    return tuple(float(x) for x in np.quantile(boots, [(1 - PROB) / 2, (1 + PROB) / 2]))


def slope_us(x: np.ndarray, y_s: np.ndarray) -> float | None:
    if len(x) < 3 or np.ptp(x) == 0:
        return None
    return round(float(np.polyfit(x, y_s, 1)[0]) * 1e6, 1)


def per_bin(pairs: pd.DataFrame, pred: np.ndarray, rng) -> list[dict]:
    bins = pd.cut(pairs["running_depth"], list(EDGES))
    rows = []
    for interval in bins.cat.categories:
        mask = (bins == interval).to_numpy()
        measured = pairs.loc[mask, "period_s"].to_numpy(float)
        label = f"{int(interval.left) + 1}-{int(interval.right)}"
        if not mask.any():
            rows.append({"bin": label, "n_pairs": 0})
            continue
        med = float(np.median(measured))
        lo, hi = bootstrap_median(measured, rng)
        per_draw = np.median(pred[mask], axis=0)
        p_lo, p_med, p_hi = np.quantile(per_draw, [(1 - PROB) / 2, 0.5, (1 + PROB) / 2])
        rows.append({
            "bin": label, "n_pairs": int(mask.sum()), "scored": bool(mask.sum() >= MIN_PAIRS),
            "mean_in_flight": round(float(pairs.loc[mask, "running_depth"].mean()), 1),
            "measured_median_ms": round(med * 1e3, 3),
            "measured_median_interval_ms": [round(lo * 1e3, 3), round(hi * 1e3, 3)],
            "predicted_median_ms": round(float(p_med) * 1e3, 3),
            "predicted_interval_ms": [round(float(p_lo) * 1e3, 3), round(float(p_hi) * 1e3, 3)],
            "error_pct": round((float(p_med) / med - 1) * 100, 2),
            "measured_inside_interval": bool(p_lo <= med <= p_hi)})
    return rows


def summary(rows: list[dict]) -> dict:
    scored = [r for r in rows if r.get("scored")]
    errors = np.array([r["error_pct"] for r in scored])
    if not len(errors):
        return {"bins_scored": 0}
    return {"bins_scored": len(scored), "max_abs_error_pct": round(float(np.max(np.abs(errors))), 2),
            "median_abs_error_pct": round(float(np.median(np.abs(errors))), 2),
            "bins_within_target": int(np.sum(np.abs(errors) <= TARGET * 100)),
            "measured_inside_interval": int(sum(r["measured_inside_interval"] for r in scored)),
            **({"measured_inside_new_run_interval": int(sum(r["measured_inside_new_run_interval"] for r in scored))}
               if all("measured_inside_new_run_interval" in r for r in scored) else {}),
            "target_met": bool(np.all(np.abs(errors) <= TARGET * 100))}


def figure(groups: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(groups), figsize=(6.2 * len(groups), 4.4), squeeze=False)
    for ax, (label, g) in zip(axes[0], groups.items()):
        pairs, pred, rows = g["pairs"], g["pred"], g["rows"]
        ax.scatter(pairs["running_depth"], pairs["period_s"] * 1e3, s=5, alpha=0.25, color="0.5",
                   label="measured pair (decode-only)")
        order = np.argsort(pairs["running_depth"].to_numpy())
        ax.scatter(pairs["running_depth"].to_numpy()[order], np.median(pred, axis=1)[order] * 1e3, s=4,
                   color="tab:blue", alpha=0.3, label="predicted, same batch")
        have = [r for r in rows if r["n_pairs"]]
        x = [r["mean_in_flight"] for r in have]
        ax.errorbar(x, [r["measured_median_ms"] for r in have],
                    yerr=np.abs(np.array([r["measured_median_interval_ms"] for r in have]).T
                                - [r["measured_median_ms"] for r in have]),
                    fmt="o", color="black", capsize=3, label="measured median per bin (90% bootstrap)")
        ax.errorbar(x, [r["predicted_median_ms"] for r in have],
                    yerr=np.abs(np.array([r["predicted_interval_ms"] for r in have]).T
                                - [r["predicted_median_ms"] for r in have]),
                    fmt="s", color="tab:blue", capsize=3, label="predicted median per bin (90% over draws)")
        for r in have:
            ax.annotate(f"{r['error_pct']:+.1f}%", (r["mean_in_flight"], r["predicted_interval_ms"][1]),
                        textcoords="offset points", xytext=(0, 4), ha="center", fontsize=7,
                        color="tab:red" if abs(r["error_pct"]) > TARGET * 100 else "tab:green")
        lo, hi = np.percentile(pairs["period_s"] * 1e3, [1, 99])
        ax.set_ylim(lo - 0.6, hi + 0.8)  # a few pairs straddle a hiccup; keep the bins readable
        ax.set_title(f"{label}: {len(pairs)} decode-only step pairs (bins of >= {MIN_PAIRS} scored)")
        ax.set_xlabel("requests in flight (running)")
        ax.set_ylabel("step period (ms)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.suptitle("vLLM step period, measured (step tracing) vs predicted (posterior without them)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)



def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--posterior", type=Path, default=DEFAULT_POSTERIOR)
    ap.add_argument("--steps", type=Path, default=DEFAULT_STEPS)
    ap.add_argument("--draws", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=RESULT)
    ap.add_argument("--figure", type=Path, default=FIGURE)
    args = ap.parse_args(argv)
    from bayesblis import __version__
    from bayesblis.atomic import write_json
    from bayesblis.coefficients import posterior_draws
    from bayesblis.io.dataset import file_info
    from bayesblis.io.step_traces import read_step_traces, step_periods
    from bayesblis.model.data import config_row
    from bayesblis.model.store import load_posterior

    started = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    posterior = load_posterior(args.posterior)
    kinds = sorted(set(posterior.data.obs["kind"].astype(str))) if getattr(posterior, "data", None) is not None else None
    steps = read_step_traces(args.steps)
    pairs = step_periods(steps)
    used = pairs[pairs["decode_only"] & pairs["steady"]].copy()
    deps = {}
    for model, tp in used[["model", "tp"]].drop_duplicates().itertuples(index=False):
        dep = deployment(model_name(model), tp)
        deps[(model, tp)] = (config_row(dep)["config"], dep)
    used["config"] = [deps[(m, t)][0] for m, t in zip(used["model"], used["tp"])]
    out, groups = {}, {}
    for key, g in used.groupby("config", sort=False):
        dep = next(d for k, d in deps.values() if k == key)
        tp = dep.tp
        draws = posterior_draws(posterior, dep, args.draws, new_run=False, seed=args.seed)
        pred = predicted_steps(g, dep, draws.beta)
        fresh = posterior_draws(posterior, dep, args.draws, new_run=True, seed=args.seed)
        pred_new_run = predicted_steps(g, dep, fresh.beta)
        label = f"{dep.model.name} TP{tp}"
        rows = per_bin(g, pred, rng)
        for r, r_new in zip(rows, per_bin(g, pred_new_run, rng)):
            if r["n_pairs"]:
                r["predicted_interval_new_run_ms"] = r_new["predicted_interval_ms"]
                r["measured_inside_new_run_interval"] = r_new["measured_inside_interval"]
        runs = {}
        for run, gr in g.groupby("run", sort=True):
            m = (g["run"] == run).to_numpy()
            run_rows = per_bin(gr, pred[m], rng)
            runs[run] = {"bins": run_rows, "summary": summary(run_rows)}
        x = g["running_depth"].to_numpy(float)
        y = g["period_s"].to_numpy(float)
        yp = np.median(pred, axis=1)
        below, above = (x >= 10) & (x <= KNEE), x > KNEE
        slopes = {"measured_us_per_request_below_knee": slope_us(x[below], y[below]),
                  "measured_us_per_request_above_knee": slope_us(x[above], y[above]),
                  "predicted_us_per_request_below_knee": slope_us(x[below], yp[below]),
                  "predicted_us_per_request_above_knee": slope_us(x[above], yp[above]), "knee": KNEE}
        out[label] = {"config": key, "seen_config": bool(draws.seen_config), "n_pairs": int(len(g)),
                      "runs": sorted(g["run"].unique()), "bins": rows, "summary": summary(rows),
                      "slopes": slopes, "per_run": runs,
                      "mean_coefficients": dict(zip(draws.beta_features, np.round(draws.beta.mean(0), 4)))}
        groups[label] = {"pairs": g, "pred": pred, "rows": rows}
        s = out[label]["summary"]
        print(f"\n{label} ({key}; {len(g)} decode-only pairs from {g['run'].nunique()} run(s))")
        print(f"{'bin':>8} {'n':>4} {'measured ms':>12} {'predicted ms (90%)':>26} {'error':>7}")
        for r in rows:
            if not r["n_pairs"]:
                print(f"{r['bin']:>8} {0:>4}")
                continue
            flag = "" if r["scored"] else "  (too few pairs, not scored)"
            print(f"{r['bin']:>8} {r['n_pairs']:>4} {r['measured_median_ms']:>12.2f} "
                  f"{r['predicted_median_ms']:>9.2f} [{r['predicted_interval_ms'][0]:.2f}, "
                  f"{r['predicted_interval_ms'][1]:.2f}] {r['error_pct']:>+6.1f}%{flag}")
        print(f"max |error| {s.get('max_abs_error_pct')}% over {s.get('bins_scored')} scored bins "
              f"(target {TARGET:.0%}: {'met' if s.get('target_met') else 'not met'}); slopes (us/request) "
              f"measured {slopes['measured_us_per_request_below_knee']} / {slopes['measured_us_per_request_above_knee']}, "
              f"predicted {slopes['predicted_us_per_request_below_knee']} / {slopes['predicted_us_per_request_above_knee']} "
              f"(<= / > {KNEE} in flight)")
    figure(groups, args.figure)
    write_json(args.out, {
        "benchmark": "step_periods",
        "created_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "package_version": __version__, "git_commit": git_commit(),
        "inputs": {"steps": file_info(args.steps), "posterior": file_info(args.posterior),
                   "posterior_observation_kinds": kinds, "draws": args.draws, "seed": args.seed},
        "method": {
            "measured": "start-to-start time of consecutive step ids (exact one-step period), decode-only "
                        "pairs with the same running depth at both ends; in flight = running depth",
            "predicted": "coefficient draws of the configuration (no new-run factor; the interval with it "
                         "in predicted_interval_new_run_ms) x beta features of the "
                         "measured first step's batch (decode requests; KV tokens from KV usage x blocks x 16 "
                         "less half a block per request); simulator not run; step noise left out",
            "bins": [f"{a + 1}-{b}" for a, b in zip(EDGES[:-1], EDGES[1:])], "min_pairs_scored": MIN_PAIRS,
            "target_abs_error": TARGET},
        "deployments": out,
        "figure": str(args.figure.relative_to(REPO)) if args.figure.is_relative_to(REPO) else str(args.figure),
        "wall_s": round(time.perf_counter() - started, 1),
    })
    print(f"-> {args.out}, {args.figure}")


if __name__ == "__main__":
    main()
