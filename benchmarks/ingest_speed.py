"""Streaming ingest of a large OTEL export: throughput (MB/s) and peak memory vs file size.

The input is a vLLM OTEL journey + step trace (`traces.json`, OTLP/JSON lines) built in a
temporary folder (deleted afterwards):

1. a base trace is simulated and written by `bayesblis.simulate.trace_writer`
   (Llama-2-70B TP4 on H100-SXM, synthetic truth coefficients, shared-prefix requests at
   8 req/s; journey sampling 1.0, step summaries sampled at 1%), then
2. replicated line by line up to the target size; copy k renames every request id
   (``cmpl-`` -> ``cmpl-<k>-``), span id and parent span id, and offsets step ids by
   k x 10^8, so every copy adds distinct requests and steps (the last copy is cut at a
   line boundary).

Each measurement runs `bayesblis.io.dataset.ingest([traces.json])` (the whole
`bayesblis ingest` read path: OTEL reader + sha256 of the input) in a fresh subprocess
and reports wall time, throughput and the child's peak RSS: on Linux the high-water mark
is reset after the imports (``/proc/self/clear_refs``) and read back as ``VmHWM``
(elsewhere ``getrusage(RUSAGE_SELF).ru_maxrss``); the RSS after imports, before reading,
is the baseline. Runs
are repeated ``--reps`` times; the table shows medians.

Usage (from the repository root)::

    python3 benchmarks/ingest_speed.py                  # 100 MB and 1 GB (default)
    python3 benchmarks/ingest_speed.py --size-mb 4000   # 100 MB and 4 GB

Writes benchmarks/results/ingest_speed.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))

from provenance import shared_data_dir  # noqa: E402 (benchmarks/, the script's folder)

EXPERIMENT = "20260217-202857-llama-2-70b-tp4-general"
STEP_ID = re.compile(rb'("key":"step\.id","value":\{"intValue":")(\d+)(")')

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[2])
from bayesblis.io.dataset import ingest

def status_kb(key):
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith(key + ":"))

try:  # Linux: reset the RSS high-water mark so the import peak does not hide the read
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    base = status_kb("VmRSS")
except OSError:  # elsewhere: ru_maxrss after imports as the baseline
    base = None
base = base if base is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
ds = ingest([sys.argv[1]])
wall = time.perf_counter() - t0
try:
    peak = status_kb("VmHWM")
except OSError:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
c = ds.sources[0].counts()
print(json.dumps({"wall_s": wall, "baseline_rss_kb": base, "peak_rss_kb": peak,
                  "n_requests": c["n_requests"], "n_journey_events": c["n_journey_events"],
                  "n_steps": c["n_steps"], "n_snapshots": c["n_snapshots"]}))
"""


def write_base(folder: Path, n_requests: int) -> Path:
    """Simulate `n_requests` requests and write their OTEL trace into `folder`."""
    from bayesblis.simulate.engine import deployment_constants, run_engine
    from bayesblis.simulate.scenario import Scenario
    from bayesblis.simulate.trace_writer import write_traces
    from bayesblis.synth import NOISE_NU, Truth

    sc = Scenario.from_inference_perf(shared_data_dir() / "real" / "h100-inference-perf" / EXPERIMENT,
                                      hardware="H100-SXM")
    spec = dict(sc.workload_spec)
    spec["stages"] = [{"rate": 8.0, "duration": n_requests / 8.0}]
    sc = replace(sc, workload_spec=spec, vllm=dict(sc.vllm))
    dep = sc.deployment()
    w, cfg = sc.build_workload(), sc.engine_config(dep)
    truth = Truth(0)
    run = run_engine(w, cfg, deployment_constants(dep), truth.beta_vector(dep),
                     truth.alpha_vector(dep), noise_sigma=truth.coefficients(dep)["noise_sigma"],
                     noise_nu=NOISE_NU, seed=0, record=True)
    return write_traces(run, w, cfg, folder, seed=0, kv_events=False)["traces"]


def replicate(base: Path, out: Path, size_bytes: int) -> dict:
    """Copies of `base` with distinct request/span/step ids, cut at `size_bytes`."""
    lines = base.read_bytes().splitlines(keepends=True)  # the base is small (tens of MB)
    written, copies = 0, 0
    with open(out, "wb") as fh:
        while written < size_bytes:
            k = copies
            for line in lines:
                if k:
                    line = (line.replace(b'"cmpl-', b'"cmpl-%x-' % k)
                            .replace(b'"spanId":"', b'"spanId":"%04x' % k)
                            .replace(b'"parentSpanId":"', b'"parentSpanId":"%04x' % k))
                    if b'"step.id"' in line:
                        line = STEP_ID.sub(lambda m: m[1] + b"%d" % (int(m[2]) + k * 10**8)
                                           + m[3], line)
                fh.write(line)
                written += len(line)
                if written >= size_bytes:
                    break
            copies += 1
    return {"bytes": written, "copies": copies}


def measure(path: Path, reps: int) -> dict:
    runs = []
    for _ in range(reps):
        p = subprocess.run([sys.executable, "-c", CHILD, str(path), str(ROOT)],
                           capture_output=True, text=True, check=False)
        if p.returncode != 0:
            raise SystemExit(f"ingest child failed:\n{p.stderr}")
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    size = path.stat().st_size
    med = statistics.median(r["wall_s"] for r in runs)
    peak = statistics.median(r["peak_rss_kb"] for r in runs) / 1024
    base = statistics.median(r["baseline_rss_kb"] for r in runs) / 1024
    return {"file_mb": round(size / 1e6, 1), "wall_median_s": round(med, 2),
            "wall_all_s": [round(r["wall_s"], 2) for r in runs], "reps": reps,
            "mb_per_s": round(size / 1e6 / med, 1), "peak_rss_mb": round(peak, 1),
            "baseline_rss_mb": round(base, 1), "peak_above_baseline_mb": round(peak - base, 1),
            **{k: runs[0][k] for k in ("n_requests", "n_journey_events", "n_steps",
                                       "n_snapshots")}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mb", type=float, default=1000.0, help="large file size (MB)")
    ap.add_argument("--small-mb", type=float, default=100.0, help="small file size (MB)")
    ap.add_argument("--base-requests", type=int, default=10_000,
                    help="requests in the simulated base trace")
    ap.add_argument("--reps", type=int, default=3, help="ingest runs per file (median)")
    ap.add_argument("--tmp", type=Path, default=None, help="parent of the temporary folder")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "ingest_speed.json")
    args = ap.parse_args(argv)

    from bayesblis import __version__
    from bayesblis.atomic import write_json

    tmp = Path(tempfile.mkdtemp(prefix="bayesblis-ingest-bench-", dir=args.tmp))
    try:
        t0 = time.perf_counter()
        base = write_base(tmp / "base", args.base_requests)
        base_s = time.perf_counter() - t0
        print(f"base trace: {args.base_requests} simulated requests, "
              f"{base.stat().st_size / 1e6:.1f} MB ({base_s:.1f} s)")
        rows = []
        print(f"\n{'file (MB)':>10}{'copies':>8}{'requests':>10}{'journey ev':>12}{'wall (s)':>10}"
              f"{'MB/s':>8}{'peak RSS (MB)':>15}{'above base (MB)':>17}")
        print("-" * 90)
        for mb in (args.small_mb, args.size_mb):
            path = tmp / f"{int(mb)}mb" / "traces.json"
            path.parent.mkdir()
            t1 = time.perf_counter()
            info = replicate(base, path, int(mb * 1e6))
            gen_s = time.perf_counter() - t1
            r = measure(path, args.reps)
            r.update(copies=info["copies"], generate_s=round(gen_s, 1))
            rows.append(r)
            print(f"{r['file_mb']:>10.0f}{r['copies']:>8}{r['n_requests']:>10}"
                  f"{r['n_journey_events']:>12}{r['wall_median_s']:>10.1f}{r['mb_per_s']:>8.1f}"
                  f"{r['peak_rss_mb']:>15.0f}{r['peak_above_baseline_mb']:>17.0f}", flush=True)
            path.unlink()
        small, big = rows
        d_mem = big["peak_above_baseline_mb"] - small["peak_above_baseline_mb"]
        d_req = big["n_requests"] - small["n_requests"]
        per_req_kb = d_mem * 1024 / d_req if d_req else None
        per_mb = d_mem / (big["file_mb"] - small["file_mb"])
        growth = {"peak_ratio_big_over_small": round(big["peak_above_baseline_mb"]
                                                     / max(small["peak_above_baseline_mb"], 1e-9), 2),
                  "size_ratio_big_over_small": round(big["file_mb"] / small["file_mb"], 2),
                  "kb_per_request": round(per_req_kb, 2) if per_req_kb else None,
                  "mb_memory_per_mb_file": round(per_mb, 3)}
        print(f"\npeak memory above baseline grows x{growth['peak_ratio_big_over_small']} for "
              f"x{growth['size_ratio_big_over_small']} the file size: "
              f"{growth['kb_per_request']} kB per request "
              f"({growth['mb_memory_per_mb_file']} MB per MB of trace): the reader streams lines, "
              f"the tidy tables (rows per request, journey event, sampled step) accumulate")
        doc = {"benchmark": "ingest_speed", "package_version": __version__,
               "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                           "platform": platform.platform(), "load_average_end": os.getloadavg()},
               "method": {"reps": args.reps, "statistic": "median",
                          "measured": "bayesblis.io.dataset.ingest([traces.json]) in a fresh "
                                      "subprocess; peak = VmHWM after resetting it post-import",
                          "base_requests": args.base_requests,
                          "base_mb": round(base.stat().st_size / 1e6, 1),
                          "command": "python3 benchmarks/ingest_speed.py"
                          + (f" --size-mb {args.size_mb:g}" if args.size_mb != 1000 else "")},
               "rows": rows, "growth": growth}
        write_json(args.out, doc)
        print(f"wrote {args.out}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
