"""Load response (issue #19): does the held-out ITL rise with the arrival rate as vLLM's does?

Reads a `bayesblis validate` report (default: the leave-one-experiment-out one) and, for
every measured run with two normal-load stages, prints the ITL mean at each rate, measured
and predicted (predictive median [90% interval], the run held out of the fit), and the rise
from the lower to the higher rate, measured and predicted; draws the same as a figure.

Usage:
    python3 benchmarks/itl_vs_rate.py [REPORT.json] [--png benchmarks/results/itl_vs_rate.png]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def pairs(records: list[dict]) -> list[dict]:
    """Runs with two normal-load stages: [{run, rates, measured, pred, lo, hi}] (ITL, ms)."""
    by_run: dict[str, list] = {}
    for r in records:
        if not r["overloaded"] and r.get("measured_itl_mean_s") is not None:
            by_run.setdefault(r["experiment"], []).append(r)
    out = []
    for run, rows in sorted(by_run.items()):
        if len(rows) < 2:
            continue
        rows = sorted(rows, key=lambda r: r["rate_rps"])
        get = lambda key: [r[key] * 1e3 for r in rows]  # noqa: E731
        out.append({"run": run, "rates": [r["rate_rps"] for r in rows],
                    "measured": get("measured_itl_mean_s"), "pred": get("pred_itl_mean_s"),
                    "lo": get("pred_itl_mean_s_lo"), "hi": get("pred_itl_mean_s_hi")})
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("report", nargs="?", default=str(ROOT / "benchmarks/results/validate-experiment.json"))
    ap.add_argument("--png", default=str(ROOT / "benchmarks/results/itl_vs_rate.png"))
    args = ap.parse_args(argv)
    report = json.loads(Path(args.report).read_text())
    rows = pairs(report["records"])
    print(f"ITL mean vs arrival rate, held out by {report['holdout']} ({args.report})")
    print(f"{'run':<44}{'rate':>6}{'measured':>10}{'predicted [90%]':>24}")
    rises = []
    for p in rows:
        for i, rate in enumerate(p["rates"]):
            print(f"{p['run'][16:60]:<44}{rate:>6g}{p['measured'][i]:>10.2f}"
                  f"{p['pred'][i]:>10.2f} [{p['lo'][i]:.2f}, {p['hi'][i]:.2f}]")
        m = p["measured"][-1] / p["measured"][0] - 1
        q = p["pred"][-1] / p["pred"][0] - 1
        rises.append((m, q))
        print(f"{'':<44}{'rise':>6}{m:>+10.1%}{q:>+10.1%}")
    m, q = np.array(rises).T
    print(f"median rise from the lower to the higher rate: measured {np.median(m):+.1%}, "
          f"predicted {np.median(q):+.1%}; |predicted - measured| median "
          f"{np.median(np.abs(q - m)) * 100:.1f} points over {len(rows)} runs")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncols = int(np.ceil(len(rows) / 2))
    fig, axes = plt.subplots(2, ncols, figsize=(2.6 * ncols, 5.4), squeeze=False)
    for ax in axes.ravel()[len(rows):]:
        ax.set_visible(False)
    for ax, p in zip(axes.ravel(), rows):
        ax.plot(p["rates"], p["measured"], "ko-", label="measured")
        ax.errorbar(p["rates"], p["pred"], yerr=[np.subtract(p["pred"], p["lo"]),
                                                 np.subtract(p["hi"], p["pred"])],
                    fmt="s--", color="C0", capsize=3, label="predicted (held out)")
        ax.set_title(p["run"][16:].replace("-tp", "\ntp"), fontsize=7)
        ax.set_xlabel("req/s", fontsize=8)
        ax.tick_params(labelsize=7)
    for row in axes:
        row[0].set_ylabel("ITL mean (ms)", fontsize=8)
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(args.png, dpi=90)
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
