"""GPUs never traced, against measurements: public A100-80GB and L40S runs of the BLIS
sim-to-real study predicted from their load profiles with a posterior of the 16 traced H100
runs.

The study (`inference-sim/sim-to-real-accuracy-validation`, `results/cluster_2000req/
error_records.csv`, commit 9bcf9391) publishes measured stage aggregates (ms) of vLLM runs
on several GPUs, one row per simulator x stage x metric (`actual` is the measurement). Its
load profiles and server settings are not published. This check assumes what the H100 runs
of the same study with the same workload names used (`h100-new-models`, `h100-inference-perf`):

- `general-lite`: 100 shared-prefix prompts of 100 + 447 tokens, 248 output tokens, 600 s at
  2.5 then 6 req/s; `general`: the same data at 8 then 20 req/s (`WORKLOADS`);
- max_model_len 4096 and max_num_seqs 128 (`SERVER`), the KV cache from the GPU's memory at
  the run's `gpu_mem_util` (no KV block count is published).

Nothing here is fitted on these runs. Download the CSV from the study's repository and run

    python benchmarks/other_gpus.py --measured error_records.csv --posterior POSTERIOR.nc \
        [--draws 100] [--seed 1] [--discrepancy none] [--out benchmarks/results/other_gpus.json]

Writes the `validate --external` report plus, per run and stage, the study's own simulators'
predictions of the same measurements (`reference`).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from bayesblis.discrepancy import load_discrepancy
from bayesblis.errors import InputError
from bayesblis.external_check import METRICS, format_table, run_check, write_report

SHARED = Path(__file__).resolve().parents[1].parent / "shared/data"
OUT = Path(__file__).resolve().parent / "results/other_gpus.json"
SHARED_PREFIX = {"num_unique_system_prompts": 9, "num_users_per_system_prompt": 5,
                 "output_len": 248, "question_len": 447, "system_prompt_len": 100,
                 "enable_multi_turn_chat": True}
WORKLOADS = {"general-lite": (2.5, 6.0), "general": (8.0, 20.0)}
"""Stage rates (req/s, 600 s each) of the study's workloads, as its H100 runs' profiles give
them; a run of another workload is left out."""
SERVER = {"max_model_len": 4096, "max_num_seqs": 128}
HARDWARE = {"A100-80GB": "A100", "L40S": "L40S", "H200": "H200"}
"""The study's hardware names -> measured.json `hardware` (external_check.HARDWARE_NAMES)."""
STUDY_METRICS = {"e2e_mean": "e2e_mean_ms", "e2e_p90": "e2e_p90_ms", "e2e_p99": "e2e_p99_ms",
                 "ttft_mean": "ttft_mean_ms", "ttft_p90": "ttft_p90_ms",
                 "ttft_p99": "ttft_p99_ms", "itl_mean": "itl_mean_ms"}
NEEDED = ("simulator", "experiment_folder", "model", "workload", "stage_index", "metric_name",
          "predicted", "actual", "hardware", "tp", "max_num_batched_tokens", "gpu_mem_util")


def read_study(path: Path) -> dict:
    """{experiment folder: {"row": settings, "measured": {stage: {metric: ms}},
    "predicted": {simulator: {stage: {metric: ms}}}}} of the runs on GPUs other than H100."""
    runs: dict = {}
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in NEEDED if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(path, f"columns missing: {', '.join(missing)}",
                             expected="the study's error_records.csv")
        for line, row in enumerate(reader, start=2):
            if row["hardware"] == "H100" or row["metric_name"] not in STUDY_METRICS:
                continue
            try:
                stage, actual, predicted = int(row["stage_index"]), float(row["actual"]), float(row["predicted"])
            except ValueError:
                raise InputError(path, "not a number", record=f"line {line}",
                                 field="stage_index/actual/predicted", expected="numbers") from None
            run = runs.setdefault(row["experiment_folder"], {
                "row": row, "measured": defaultdict(dict), "predicted": defaultdict(lambda: defaultdict(dict))})
            key = "summary" if stage < 0 else f"stage_{stage}"
            run["measured"][key][STUDY_METRICS[row["metric_name"]]] = actual
            run["predicted"][row["simulator"]][key][STUDY_METRICS[row["metric_name"]]] = predicted
    return runs


def write_run_folder(root: Path, name: str, run: dict) -> Path | None:
    """exp-config.yaml, profile.yaml and measured.json of one study run (None: its workload
    or hardware is not one this check knows)."""
    row = run["row"]
    if row["workload"] not in WORKLOADS or row["hardware"] not in HARDWARE:
        return None
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "exp-config.yaml").write_text(
        f'model: "{row["model"]}"\ntensor_parallelism: {int(row["tp"])}\n'
        f'max_model_len: {SERVER["max_model_len"]}\n'
        f'max_num_batched_tokens: {int(row["max_num_batched_tokens"])}\n'
        f'max_num_seqs: {SERVER["max_num_seqs"]}\ngpu_memory_utilization: {float(row["gpu_mem_util"])}\n'
        'cpu_offload: false\napp: "inference-perf"\n')
    stages = [{"rate": rate, "duration": 600} for rate in WORKLOADS[row["workload"]]]
    (folder / "profile.yaml").write_text(json.dumps({
        "api": {"streaming": True, "type": "completion"},
        "data": {"type": "shared_prefix", "shared_prefix": SHARED_PREFIX},
        "load": {"type": "constant", "stages": stages}}))
    (folder / "measured.json").write_text(json.dumps(
        {"measured": run["measured"], "hardware": HARDWARE[row["hardware"]]}, indent=1))
    return folder


def study_errors(records: list[dict], runs: dict) -> dict:
    """{simulator: {metric: {"median_abs_pct_error", "bayesblis_median_abs_pct_error",
    "n_stages"}}}: each of the study's simulators and bayesblis on the stages that simulator
    predicted (the study does not run every simulator on every run)."""
    errors: dict = defaultdict(lambda: defaultdict(list))
    for r in records:
        for simulator, stages in runs[r["run"]]["predicted"].items():
            for m in METRICS:
                pred = stages.get(f"stage_{r['stage']}", {}).get(m[:-2] + "_ms")
                if pred is not None and f"measured_{m}" in r:
                    errors[simulator][m].append((abs(pred / 1e3 / r[f"measured_{m}"] - 1) * 100,
                                                 r[f"abs_pct_error_{m}"]))
    return {s: {m: {"median_abs_pct_error": float(np.median([a for a, _ in v])),
                    "bayesblis_median_abs_pct_error": float(np.median([b for _, b in v])),
                    "n_stages": len(v)}
                for m, v in by_metric.items()} for s, by_metric in errors.items()}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measured", required=True, type=Path, help="the study's error_records.csv")
    ap.add_argument("--posterior", required=True)
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--discrepancy", default=None,
                    help="a discrepancy file; 'none': posterior-only intervals (default: packaged)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    runs = read_study(args.measured)
    with tempfile.TemporaryDirectory() as tmp:
        folders = [f for f in (write_run_folder(Path(tmp), name, run) for name, run in sorted(runs.items()))
                   if f is not None]
        if not folders:
            sys.exit(f"{args.measured}: no run on a GPU other than H100 with a known workload")
        discrepancy = None if args.discrepancy == "none" else load_discrepancy(args.discrepancy)
        report = run_check(folders, args.posterior, n_draws=args.draws, seed=args.seed,
                           discrepancy=discrepancy, model_configs=[SHARED / "model_configs"], echo=print)
    report.update(source="inference-sim/sim-to-real-accuracy-validation "
                         "results/cluster_2000req/error_records.csv (measured: `actual`, ms)",
                  assumptions={"workloads_req_per_s": WORKLOADS, "shared_prefix": SHARED_PREFIX,
                               "server": SERVER, "kv_cache": "from gpu_mem_util"},
                  study_simulators=study_errors(report["records"], runs),
                  wall_s=round(time.perf_counter() - t0, 1))
    by_gpu = defaultdict(list)
    for r in report["records"]:
        by_gpu[next(x["hardware"] for x in report["runs"] if x["run"] == r["run"])].append(r)
    report["summary_by_gpu_stage"] = {
        f"{gpu} stage {stage}": {m: {"median_abs_pct_error": float(np.median([r[f"abs_pct_error_{m}"] for r in rows if r["stage"] == stage])),
                                     "median_signed_pct_error": float(np.median([r[f"signed_pct_error_{m}"] for r in rows if r["stage"] == stage])),
                                     "coverage": float(np.mean([r[f"covered_{m}"] for r in rows if r["stage"] == stage]))}
                                 for m in METRICS}
        for gpu, rows in by_gpu.items() for stage in sorted({r["stage"] for r in rows})}
    write_report(args.out, report)
    print(format_table(report))
    for key, block in report["summary_by_gpu_stage"].items():
        print(key, {m: round(v["median_signed_pct_error"], 1) for m, v in block.items()})
    for simulator, block in report["study_simulators"].items():
        print(f"{simulator} against bayesblis on the same stages (median |error| %):",
              {m: (round(v["median_abs_pct_error"], 1), round(v["bayesblis_median_abs_pct_error"], 1),
                   v["n_stages"]) for m, v in block.items()})
    print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
