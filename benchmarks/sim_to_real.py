"""The BLIS sim-to-real study's measured runs that the 16 traced runs are not, predicted from
their load profiles with a posterior of the traced runs: models never traced, server settings
never traced (chunk size, TP, memory share), and GPUs never traced (A100-80GB, L40S).

The study (`inference-sim/sim-to-real-accuracy-validation`, `results/cluster_2000req/
error_records.csv`, commit 9bcf9391) publishes measured stage aggregates (ms), one row per
simulator x stage x metric (`actual` is the measurement), with each run's model, GPU, TP,
chunk size (`max_num_batched_tokens`), memory share, CPU offload and data parallelism. Its
load profiles and KV block counts are not published. Every run of the study whose profile
is published (`h100-inference-perf`, `h100-new-models`, BLIS's `trained_physics_iter29.json`)
has the same profile for the same workload name, so this check assumes that profile
(`WORKLOADS`), max_model_len 4096 and max_num_seqs 128 (`SERVER`), and sizes the KV cache
from the GPU's memory at the run's memory share.

Left out, with the reason printed: runs with CPU offload (its size is not published; the
traced runs are among them), data parallelism above 1 (not modelled), a workload or model
with no known profile or config, runs whose measured values differ between the study's
simulators' rows, and an experiment the study lists under two runs. Nothing here is fitted on these runs. Download the CSV from the study's
repository and run

    python benchmarks/sim_to_real.py --measured error_records.csv --posterior POSTERIOR.nc \
        [--gpus H100,A100-80GB,L40S] [--draws 100] [--seed 1] [--discrepancy none] [--out F.json]

Writes the `validate --external` report, its summary per GPU and stage, the skipped runs,
and the study's own simulators' errors beside bayesblis's on the same stages.
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
from bayesblis.errors import BayesBlisError, InputError
from bayesblis.external_check import (METRICS, format_table, read_run, run_check,
                                      run_scenario_of, summary_block, write_report)

SHARED = Path(__file__).resolve().parents[1].parent / "shared/data"
OUT = Path(__file__).resolve().parent / "results/sim_to_real.json"
SHORT = {"system_prompt_len": 100, "question_len": 447, "output_len": 248,
         "num_unique_system_prompts": 9, "num_users_per_system_prompt": 5}
CODE = {"system_prompt_len": 100, "question_len": 466, "output_len": 247,
        "num_unique_system_prompts": 11, "num_users_per_system_prompt": 4}
CHAT = {"system_prompt_len": 150, "question_len": 600, "output_len": 251,
        "num_unique_system_prompts": 10, "num_users_per_system_prompt": 5}
LONG = {"system_prompt_len": 100, "question_len": 934, "output_len": 1448,
        "num_unique_system_prompts": 23, "num_users_per_system_prompt": 1}
WORKLOADS = {"general": (SHORT, [(8.0, 600), (20.0, 600)]),
             "general-lite": (SHORT, [(2.5, 600), (6.0, 600)]),
             "codegen": (CODE, [(5.0, 600), (10.0, 600)]),
             "roleplay": (CHAT, [(6.0, 1200)]),
             "reasoning": (LONG, [(4.0, 1200)]),
             "reasoning-lite": (LONG, [(1.0, 1200)])}
"""Workload name -> (shared-prefix data, [(rate req/s, duration s)]), as every published
profile of the study with that name gives it."""
SERVER = {"max_model_len": 4096, "max_num_seqs": 128}
HARDWARE = {"H100": "H100", "A100-80GB": "A100", "L40S": "L40S", "H200": "H200"}
"""The study's hardware names -> measured.json `hardware` (external_check.HARDWARE_NAMES)."""
STUDY_METRICS = {"e2e_mean": "e2e_mean_ms", "e2e_p90": "e2e_p90_ms", "e2e_p99": "e2e_p99_ms",
                 "ttft_mean": "ttft_mean_ms", "ttft_p90": "ttft_p90_ms",
                 "ttft_p99": "ttft_p99_ms", "itl_mean": "itl_mean_ms"}
NEEDED = ("simulator", "experiment_folder", "model", "workload", "stage_index", "metric_name",
          "predicted", "actual", "hardware", "tp", "max_num_batched_tokens", "gpu_mem_util",
          "cpu_offload", "dp", "exp_id")


def read_study(path: Path) -> dict:
    """{experiment folder: {"row": settings, "measured": {stage: {metric: ms}},
    "predicted": {simulator: {stage: {metric: ms}}}, "conflicts": [keys]}}."""
    runs: dict = {}
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in NEEDED if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(path, f"columns missing: {', '.join(missing)}",
                             expected="the study's error_records.csv")
        for line, row in enumerate(reader, start=2):
            if row["metric_name"] not in STUDY_METRICS:
                continue
            try:
                stage, actual, predicted = int(row["stage_index"]), float(row["actual"]), float(row["predicted"])
            except ValueError:
                raise InputError(path, "not a number", record=f"line {line}",
                                 field="stage_index/actual/predicted", expected="numbers") from None
            run = runs.setdefault(row["experiment_folder"], {
                "row": row, "measured": defaultdict(dict), "conflicts": [],
                "predicted": defaultdict(lambda: defaultdict(dict))})
            key, metric = ("summary" if stage < 0 else f"stage_{stage}"), STUDY_METRICS[row["metric_name"]]
            known = run["measured"][key].get(metric)
            if known is not None and abs(known - actual) > 1e-6 * max(abs(known), 1.0):
                run["conflicts"].append(f"{key}.{metric}")
            run["measured"][key][metric] = actual
            run["predicted"][row["simulator"]][key][metric] = predicted
    return runs


def skip_reason(run: dict, gpus, folders_of_id: dict) -> str | None:
    """Why a study run is left out (None: it is predicted)."""
    row = run["row"]
    if len(folders_of_id[row["exp_id"]]) > 1:
        return (f"the study gives experiment {row['exp_id']} two runs "
                f"({', '.join(sorted(folders_of_id[row['exp_id']]))})")
    if row["hardware"] not in gpus:
        return f"GPU {row['hardware']} not asked for"
    if row["cpu_offload"].strip().lower() == "true":
        return "CPU offload of unpublished size (the traced runs are among these)"
    if row["dp"].strip() and float(row["dp"]) > 1:
        return f"data parallelism {row['dp']}"
    if row["workload"] not in WORKLOADS:
        return f"workload {row['workload']} has no published profile"
    if row["hardware"] not in HARDWARE:
        return f"GPU {row['hardware']} not in the catalog"
    if run["conflicts"]:
        return f"measured values differ between the study's rows ({', '.join(run['conflicts'][:3])})"
    return None


def write_run_folder(root: Path, name: str, run: dict) -> Path:
    """exp-config.yaml, profile.yaml and measured.json of one study run."""
    row = run["row"]
    data, stages = WORKLOADS[row["workload"]]
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "exp-config.yaml").write_text(
        f'model: "{row["model"]}"\ntensor_parallelism: {int(row["tp"])}\n'
        f'max_model_len: {SERVER["max_model_len"]}\n'
        f'max_num_batched_tokens: {int(row["max_num_batched_tokens"])}\n'
        f'max_num_seqs: {SERVER["max_num_seqs"]}\ngpu_memory_utilization: {float(row["gpu_mem_util"])}\n'
        'cpu_offload: false\napp: "inference-perf"\n')
    (folder / "profile.yaml").write_text(json.dumps({
        "api": {"streaming": True, "type": "completion"},
        "data": {"type": "shared_prefix", "shared_prefix": {**data, "enable_multi_turn_chat": True}},
        "load": {"type": "constant", "stages": [{"rate": r, "duration": d} for r, d in stages]}}))
    (folder / "measured.json").write_text(json.dumps(
        {"measured": run["measured"], "hardware": HARDWARE[row["hardware"]]}, indent=1))
    return folder


def unpredictable(folder: Path, model_configs) -> str | None:
    """Why a run folder cannot be simulated (its model's config unknown, ...); None if it can."""
    try:
        run_scenario_of(read_run(folder), model_configs)
    except BayesBlisError as exc:
        return str(exc).splitlines()[0]
    return None


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


def group_summary(records: list[dict], key) -> dict:
    """{group: `external_check.summary_block`} of the records grouped by key(record)."""
    groups = defaultdict(list)
    for r in records:
        groups[key(r)].append(r)
    return {g: summary_block(rows) for g, rows in sorted(groups.items())}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measured", required=True, type=Path, help="the study's error_records.csv")
    ap.add_argument("--posterior", required=True)
    ap.add_argument("--gpus", default=",".join(HARDWARE), help="the study's GPU names to predict")
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--discrepancy", default=None,
                    help="a discrepancy file; 'none': posterior-only intervals (default: packaged)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    runs, configs = read_study(args.measured), [SHARED / "model_configs"]
    folders_of_id = defaultdict(set)
    for name, run in runs.items():
        folders_of_id[run["row"]["exp_id"]].add(name)
    skipped = {name: reason for name, run in runs.items()
               if (reason := skip_reason(run, set(args.gpus.split(",")), folders_of_id))}
    with tempfile.TemporaryDirectory() as tmp:
        folders = []
        for name in sorted(set(runs) - set(skipped)):
            folder = write_run_folder(Path(tmp), name, runs[name])
            reason = unpredictable(folder, configs)
            if reason:
                skipped[name] = reason
            else:
                folders.append(folder)
        for name, reason in sorted(skipped.items()):
            print(f"left out {name}: {reason}")
        if not folders:
            sys.exit(f"{args.measured}: no run left to predict")
        discrepancy = None if args.discrepancy == "none" else load_discrepancy(args.discrepancy)
        report = run_check(folders, args.posterior, n_draws=args.draws, seed=args.seed,
                           discrepancy=discrepancy, model_configs=configs, echo=print)
    gpu_of = {x["run"]: x["hardware"] for x in report["runs"]}
    report.update(
        source="inference-sim/sim-to-real-accuracy-validation "
               "results/cluster_2000req/error_records.csv (measured: `actual`, ms)",
        assumptions={"workloads": {k: {"shared_prefix": d, "stages_req_per_s_s": s}
                                   for k, (d, s) in WORKLOADS.items()},
                     "server": SERVER, "kv_cache": "from gpu_mem_util"},
        skipped=skipped, study_simulators=study_errors(report["records"], runs),
        summary_by_gpu_stage=group_summary(report["records"],
                                           lambda r: f"{gpu_of[r['run']]} stage {r['stage']}"),
        summary_by_gpu=group_summary(report["records"], lambda r: gpu_of[r["run"]]),
        wall_s=round(time.perf_counter() - t0, 1))
    write_report(args.out, report)
    print(format_table(report))
    for key, block in report["summary_by_gpu_stage"].items():
        print(key, {m: round(block[m]["median_signed_pct_error"], 1) for m in METRICS if m in block})
    for simulator, block in report["study_simulators"].items():
        print(f"{simulator} against bayesblis on the same stages (median |error| %):",
              {m: (round(v["median_abs_pct_error"], 1), round(v["bayesblis_median_abs_pct_error"], 1),
                   v["n_stages"]) for m, v in block.items()})
    print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
