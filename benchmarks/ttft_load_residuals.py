"""What the fitted TTFT model leaves unexplained, against the server's load (issue #19).

For a posterior fitted on the shared runs (the README's quick tour), every fitted client
TTFT window's measured TTFT is set against the model's own prediction for it (median of
the posterior predictive); per run and stage the script prints the median residual
(measured - predicted, ms) next to the server's load at the requests' arrival: requests
decoding and their output-token rate (decoding / per-token decode time, thousand tokens
per second). Per model it fits residual = a + b x load by least squares (windows with
|residual| < 30 ms, queueing tails aside).

A model that prices the API server's return of each token behind the others decoding
(`alpha_frontend_s`, model version 6) should leave no slope; model version 5 left
0.4-1.1 ms per thousand tokens/s on every model (docs/model.md).

Usage:
    python3 benchmarks/ttft_load_residuals.py POSTERIOR.nc [--data DIR] [--draws 60]
        [--out benchmarks/results/ttft_load_residuals.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RESIDUAL_CAP_MS = 30.0
"""Windows with a larger |residual| (queueing tails, warm-up stragglers) are left out of
the per-model slopes."""


def load_at_arrival(run_dir: Path, request_ids: np.ndarray) -> pd.DataFrame:
    """Requests decoding at each listed request's arrival, its stage and the stage's
    per-token decode time (s)."""
    from bayesblis.features.alpha import decoding_at
    from bayesblis.io.inference_perf import correct_output_counts, read_inference_perf

    req = correct_output_counts(read_inference_perf(run_dir).requests)
    ok = req.dropna(subset=["ttft_s", "e2e_s"])
    first = (ok["arrival_s"] + ok["ttft_s"]).to_numpy(float)
    finish = (ok["arrival_s"] + ok["e2e_s"]).to_numpy(float)
    stage = req.loc[request_ids, "stage"].to_numpy()
    itl = ok.groupby("stage").apply(
        lambda g: (g["e2e_s"].mean() - g["ttft_s"].mean()) / (g["output_tokens"].mean() - 1))
    return pd.DataFrame({"stage": stage,
                         "decoding": decoding_at(first, finish, req.loc[request_ids, "arrival_s"]),
                         "itl_s": itl.reindex(stage).to_numpy(float)})


def main(argv=None):
    from bayesblis.model.store import load_posterior
    from bayesblis.ppc import predictive_draws

    ap = argparse.ArgumentParser()
    ap.add_argument("posterior", type=Path)
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared/data/real/h100-inference-perf")
    ap.add_argument("--draws", type=int, default=60)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/ttft_load_residuals.json"))
    args = ap.parse_args(argv)

    posterior = load_posterior(args.posterior)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pred = predictive_draws(posterior, n_draws=args.draws, loo=False)
    obs = pred.data.obs.reset_index(drop=True)
    obs["predicted_s"] = np.median(pred.y_rep, axis=0)
    ttft = obs[obs["kind"] == "client_ttft"]
    parts = []
    for run_dir in sorted(p for p in args.data.iterdir() if p.is_dir()):
        rows = ttft[ttft["source"] == run_dir.name]
        if rows.empty:
            continue
        load = load_at_arrival(run_dir, rows["request_id"].to_numpy().astype(int))
        load["run"] = run_dir.name
        load["model"] = run_dir.name[16:].split("-tp")[0].removesuffix("-hf")
        load["residual_ms"] = (rows["y_s"].to_numpy(float) - rows["predicted_s"].to_numpy(float)) * 1e3
        parts.append(load)
    table = pd.concat(parts, ignore_index=True)
    table["ktokens_per_s"] = table["decoding"] / table["itl_s"] / 1e3

    stages = (table.groupby(["run", "stage"])
              .agg(windows=("residual_ms", "size"), decoding=("decoding", "median"),
                   ktokens_per_s=("ktokens_per_s", "median"), residual_ms=("residual_ms", "median"))
              .reset_index())
    print(f"{'run':<40}{'stage':>6}{'windows':>8}{'decoding':>9}{'ktok/s':>8}{'residual ms':>13}")
    for r in stages.itertuples():
        print(f"{r.run[16:56]:<40}{r.stage:>6}{r.windows:>8}{r.decoding:>9.0f}"
              f"{r.ktokens_per_s:>8.2f}{r.residual_ms:>+13.2f}")
    slopes = []
    print(f"\n{'model':<22}{'windows':>8}{'ms per ktok/s':>15}{'ms per decoding request':>25}")
    for model, g in table[table["residual_ms"].abs() < RESIDUAL_CAP_MS].groupby("model"):
        fit = {}
        for load in ("ktokens_per_s", "decoding"):
            x = np.column_stack([np.ones(len(g)), g[load].to_numpy(float)])
            fit[load] = float(np.linalg.lstsq(x, g["residual_ms"].to_numpy(float), rcond=None)[0][1])
        slopes.append({"model": model, "windows": int(len(g)),
                       "ms_per_ktokens_per_s": fit["ktokens_per_s"],
                       "ms_per_decoding_request": fit["decoding"]})
        print(f"{model:<22}{len(g):>8}{fit['ktokens_per_s']:>+15.3f}{fit['decoding']:>+25.4f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({
        "posterior": str(args.posterior), "stages": stages.to_dict(orient="records"),
        "slopes": slopes, "args": {k: str(v) for k, v in vars(args).items()}}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
