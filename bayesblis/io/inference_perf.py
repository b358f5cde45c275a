"""Reader for inference-perf experiment folders (measured client-side runs).

A folder holds `exp-config.yaml`, `profile.yaml` (one-line JSON), `requests.json`,
`ground_truth.json` and `stage_N_lifecycle_metrics.json` / `summary_lifecycle_metrics.json`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bayesblis.errors import EmptyInputError, InputError
from bayesblis.io.text import (load_json_checked, parse_json_text, parse_yaml_text, read_text_checked,
                               type_name)
from bayesblis.io.vllm_settings import VllmSettings

REQUIRED_FILES = ("exp-config.yaml", "profile.yaml", "requests.json", "ground_truth.json")
REQUEST_COLUMNS = ["request_index", "arrival_s", "prompt_tokens", "output_tokens",
                   "prefix_group", "has_error", "e2e_s", "ttft_s", "stage"]
STAGE_COLUMNS = ["stage", "rate_rps", "duration_s", "start_s", "end_s"]


@dataclass
class Experiment:
    """One inference-perf run: settings, load stages and per-request ground truth."""

    name: str
    folder: Path
    settings: VllmSettings
    profile: dict
    stages: pd.DataFrame
    requests: pd.DataFrame
    lifecycle: dict = field(default_factory=dict)
    model_name: str | None = None
    kv_blocks_total_gpu: int | None = None
    block_size: int | None = None
    meta: dict = field(default_factory=dict)


def is_inference_perf_folder(path) -> bool:
    path = Path(path)
    return path.is_dir() and all((path / f).is_file() for f in ("requests.json", "profile.yaml"))


def _load_json(path: Path, expected: str):
    return load_json_checked(path, expected=expected)


def read_profile(path) -> dict:
    """Parse `profile.yaml` (YAML, usually one line of JSON)."""
    path = Path(path)
    expected = "an inference-perf profile (YAML or one line of JSON)"
    text = read_text_checked(path, expected=expected)
    try:
        data = parse_yaml_text(text, path, expected=expected)
    except InputError:
        data = parse_json_text(text, path, expected=expected)
    if not isinstance(data, dict):
        raise InputError(path, f"not a mapping but {type_name(data)}", expected=expected)
    return data


def ignore_eos_tokens(profile: dict) -> int | None:
    """Output tokens every request of a profile makes the server generate: the shared-prefix
    data's `output_len` (its `max_tokens`) when the server block sets `ignore_eos`, else
    None (a request may stop early)."""
    server = profile.get("server") if isinstance(profile.get("server"), dict) else {}
    data = profile.get("data") if isinstance(profile.get("data"), dict) else {}
    shared = data.get("shared_prefix") if isinstance(data.get("shared_prefix"), dict) else {}
    out = shared.get("output_len")
    if server.get("ignore_eos") is True and isinstance(out, int) and not isinstance(out, bool) \
            and out >= 1:
        return out
    return None


def _stages_from_profile(profile: dict, path: Path) -> pd.DataFrame:
    load = profile.get("load") or {}
    if not isinstance(load, dict):
        raise InputError(path, f"not a mapping but {type_name(load)}", field="load",
                         expected="a mapping with 'stages'")
    stages = load.get("stages")
    if not stages or not isinstance(stages, list):
        raise InputError(path, "no load stages" if not stages else f"{type_name(stages)}, not a list",
                         field="load.stages", expected="a list of {rate, duration}")
    rows, start = [], 0.0
    for i, st in enumerate(stages):
        try:
            rate, dur = float(st["rate"]), float(st["duration"])
        except (KeyError, TypeError, ValueError):
            raise InputError(path, f"stage {i} lacks rate/duration", record=f"stage {i}",
                             field="load.stages", expected="numbers 'rate' and 'duration'") from None
        if not (0 < rate < math.inf and 0 < dur < math.inf):
            raise InputError(path, f"invalid rate/duration {rate}/{dur}", record=f"stage {i}",
                             field="load.stages", expected="finite positive numbers")
        rows.append((i, rate, dur, start, start + dur))
        start += dur
    return pd.DataFrame(rows, columns=STAGE_COLUMNS)


def read_inference_perf(folder) -> Experiment:
    """Read one experiment folder into an `Experiment` (never modifies the folder)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(folder, "not a folder", expected="an inference-perf experiment folder")
    for name in REQUIRED_FILES:
        if not (folder / name).is_file():
            raise InputError(folder / name, "file missing",
                             expected=f"an inference-perf folder with {', '.join(REQUIRED_FILES)}")
    profile = read_profile(folder / "profile.yaml")
    stages = _stages_from_profile(profile, folder / "profile.yaml")

    req_path, gt_path = folder / "requests.json", folder / "ground_truth.json"
    meta = _load_json(req_path, "an object with a 'requests' array")
    if not isinstance(meta, dict) or "requests" not in meta:
        raise InputError(req_path, "no 'requests' list", field="requests",
                         expected="an object with a 'requests' array")
    raw = meta["requests"]
    if not isinstance(raw, list):
        raise InputError(req_path, f"{type_name(raw)}, not a list", field="requests",
                         expected="a list of per-request objects")
    if not raw:
        raise EmptyInputError(req_path, "no requests", field="requests")
    req = _checked_records(raw, req_path, REQUEST_FIELDS, "requests")
    gt = _load_json(gt_path, "a list of per-request records")
    if not isinstance(gt, list):
        raise InputError(gt_path, f"{type_name(gt)}, not a list", expected="a list of per-request records")
    if len(gt) != len(raw):
        raise InputError(gt_path, f"{len(gt)} records but {req_path.name} has {len(raw)} requests",
                         field="index", expected=f"the same request count in {req_path} and {gt_path}")
    truth = _checked_records(gt, gt_path, TRUTH_FIELDS, "")
    if req["index"].duplicated().any():
        dup = int(req.loc[req["index"].duplicated(), "index"].iloc[0])
        raise InputError(req_path, "duplicate request index", record=f"index {dup}", field="index")
    merged = req.merge(truth[["index", "has_error", "e2e_s", "ttft_s"]].rename(
        columns={"has_error": "gt_has_error"}), on="index", how="left", indicator=True)
    missing = merged["_merge"] != "both"
    if missing.any():
        idx = int(merged.loc[missing, "index"].iloc[0])
        raise InputError(gt_path, f"no ground truth for request index {idx} of {req_path.name}",
                         record=f"index {idx}", field="index",
                         expected=f"every index of {req_path} in {gt_path}")
    has_error = merged["has_error"].astype(bool) | merged["gt_has_error"].astype(bool)
    e2e = merged["e2e_s"].astype(float)
    ttft = merged["ttft_s"].astype(float)
    ok = ~has_error
    bad_time = ok & ((~np.isfinite(e2e)) | (~np.isfinite(ttft)) | (ttft < 0) | (e2e < ttft))
    if bad_time.any():
        idx = int(merged.loc[bad_time, "index"].iloc[0])
        raise InputError(gt_path, f"invalid timings e2e_s={e2e[bad_time].iloc[0]} "
                         f"ttft_s={ttft[bad_time].iloc[0]}", record=f"index {idx}", field="e2e_s/ttft_s",
                         expected="finite 0 <= ttft_s <= e2e_s for a request without error")
    arrival_s = merged["arrival_time_us"].astype(float) / 1e6
    stage = np.searchsorted(stages["end_s"].to_numpy(), arrival_s.to_numpy(), side="right")
    stage = np.minimum(stage, len(stages) - 1)
    requests = pd.DataFrame({
        "request_index": merged["index"].astype("int64"),
        "arrival_s": arrival_s,
        "prompt_tokens": merged["input_tokens"].astype("int64"),
        "output_tokens": merged["output_tokens"].astype("int64"),
        "prefix_group": merged["prefix_group"],
        "has_error": has_error,
        "e2e_s": e2e.where(ok, np.nan),
        "ttft_s": ttft.where(ok, np.nan),
        "stage": stage.astype("int64"),
        "max_tokens": float(ignore_eos_tokens(profile) or np.nan),
    }).sort_values("request_index", ignore_index=True)

    lifecycle = {}
    for p in sorted(folder.glob("*_lifecycle_metrics.json")):
        m = re.fullmatch(r"stage_(\d+)_lifecycle_metrics\.json", p.name)
        key = int(m.group(1)) if m else p.name.removesuffix("_lifecycle_metrics.json")
        lifecycle[key] = _load_json(p, "inference-perf lifecycle metrics (JSON)")

    cfg = meta.get("config") or {}
    if not isinstance(cfg, dict):
        raise InputError(req_path, f"{type_name(cfg)}, not a mapping", field="config",
                         expected="a mapping of vLLM settings")
    overrides = {k: cfg[k] for k in ("block_size", "kv_blocks_total_gpu") if cfg.get(k)}
    try:
        VllmSettings(**overrides)
    except InputError as exc:
        raise exc.at(req_path, field_prefix="config.") from None
    settings = VllmSettings.from_exp_config(folder / "exp-config.yaml", **overrides)
    server = profile.get("server") if isinstance(profile.get("server"), dict) else {}
    model_name = settings.model or meta.get("model_id") or server.get("model_name")
    return Experiment(
        name=folder.name, folder=folder, settings=settings, profile=profile, stages=stages,
        requests=requests, lifecycle=lifecycle, model_name=model_name,
        kv_blocks_total_gpu=cfg.get("kv_blocks_total_gpu"), block_size=cfg.get("block_size"),
        meta={k: v for k, v in meta.items() if k != "requests"},
    )


# field -> (kind, required, default); kinds: "count" (integer >= 0), "time_us" (finite
# number >= 0), "seconds" (a number or null; 0 <= ttft_s <= e2e_s checked for requests
# without error), "bool", "str"
REQUEST_FIELDS = {"index": ("count", True, None), "arrival_time_us": ("time_us", True, None),
                  "input_tokens": ("count", True, None), "output_tokens": ("count", True, None),
                  "prefix_group": ("str", False, ""), "has_error": ("bool", False, False)}
TRUTH_FIELDS = {"index": ("count", True, None), "has_error": ("bool", False, False),
                "e2e_s": ("seconds", False, math.nan), "ttft_s": ("seconds", False, math.nan)}
_EXPECTED = {"count": "an integer >= 0", "time_us": "a finite number of µs >= 0",
             "seconds": "a number of seconds (or null for an error row)",
             "bool": "true or false", "str": "a string"}


def _checked_value(value, kind):
    """`value` converted for `kind`, or None if it has the wrong type or range."""
    if kind == "str":
        return "" if value is None else value if isinstance(value, str) else None
    if kind == "bool":
        return value if isinstance(value, bool) else None
    if kind == "seconds" and value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if kind == "seconds":
        return float(value)  # range checked later, for requests without error only
    if not (0 <= value < math.inf):
        return None
    if kind == "count":
        return int(value) if float(value).is_integer() else None
    return value


def _checked_records(records: list, path: Path, fields: dict, list_name: str) -> pd.DataFrame:
    """A table of `records` (dicts) with each field of `fields` type- and range-checked;
    the first bad value raises InputError naming the record (index) and field."""
    columns = {name: [] for name in fields}
    prefix = f"{list_name}[]." if list_name else ""
    for i, rec in enumerate(records):
        where = f"{list_name}[{i}]"
        if not isinstance(rec, dict):
            raise InputError(path, f"{type_name(rec)}, not an object", record=where,
                             field=list_name or None, expected="one object per request")
        index = rec.get("index")
        if isinstance(index, int) and not isinstance(index, bool):
            where = f"index {index}"
        for name, (kind, required, default) in fields.items():
            if name not in rec:
                if required:
                    raise InputError(path, "field missing", record=where, field=prefix + name,
                                     expected=_EXPECTED[kind])
                columns[name].append(default)
                continue
            value = _checked_value(rec[name], kind)
            if value is None:
                raise InputError(path, f"invalid value {rec[name]!r}", record=where, field=prefix + name,
                                 expected=_EXPECTED[kind])
            columns[name].append(value)
    return pd.DataFrame(columns)


def stage_measurements(experiment: Experiment) -> pd.DataFrame:
    """Per-stage latency summary from the per-request ground truth of non-error requests.

    Columns: stage, rate_rps, n_requests, n_ok, e2e_mean_s, ttft_mean_s, e2e_p90_s,
    ttft_p90_s, output_tokens_mean, itl_mean_s. `itl_mean_s` is the per-token decode
    time (mean E2E − mean TTFT) / (mean output tokens − 1), the quantity simulator
    comparisons use. inference-perf's own `inter_token_latency` in the lifecycle files is
    per streamed chunk (~2 chunks per token), so it is about half of this.
    """
    req = experiment.requests
    rows = []
    for st in experiment.stages.itertuples():
        sub = req[req["stage"] == st.stage]
        ok = sub[~sub["has_error"]]
        n_ok = len(ok)
        e2e_mean = float(ok["e2e_s"].mean()) if n_ok else math.nan
        ttft_mean = float(ok["ttft_s"].mean()) if n_ok else math.nan
        out_mean = float(ok["output_tokens"].mean()) if n_ok else math.nan
        itl = (e2e_mean - ttft_mean) / (out_mean - 1) if n_ok and out_mean > 1 else math.nan
        rows.append({
            "stage": int(st.stage), "rate_rps": float(st.rate_rps), "n_requests": len(sub),
            "n_ok": n_ok, "e2e_mean_s": e2e_mean, "ttft_mean_s": ttft_mean,
            "e2e_p90_s": float(ok["e2e_s"].quantile(0.9)) if n_ok else math.nan,
            "ttft_p90_s": float(ok["ttft_s"].quantile(0.9)) if n_ok else math.nan,
            "output_tokens_mean": out_mean, "itl_mean_s": itl,
        })
    return pd.DataFrame(rows)


SUSPECT_PER_TOKEN_RATIO = 1.5
"""A request whose decode time per recorded output token exceeds this many times its
stage's median is miscounted (see `correct_output_counts`). On the shared H100 runs no
CodeLlama-34B request (all record their full length) comes near it; at 3.0 (the first
rule) the Llama-2-7B runs kept 5-10% of their requests at counts 1.5-3x too small, which
made their replays 4-8% too short even for a fit that had seen them."""


def stage_of(requests: pd.DataFrame) -> pd.Series:
    """Each request's load stage (0 for a table without stages)."""
    return requests["stage"] if "stage" in requests else pd.Series(0, index=requests.index)


def correct_output_counts(requests: pd.DataFrame) -> pd.DataFrame:
    """Requests with physically consistent output counts, for replay and fitting.

    Some published runs record far fewer output tokens for a share of requests (e.g.
    2,336 of 9,000 in Llama-2-7B codegen, median ~50 tokens) than their decode time implies:
    their E2E equals that of full-length requests (ignore_eos), so the server generated
    the full length and the client miscounted. Where the profile sets `ignore_eos` (column
    `max_tokens`, `ignore_eos_tokens`), every request without error generated exactly
    `max_tokens` tokens and that count replaces the recorded one (the client's count is a
    re-tokenization of the text: +1 to +2 on requests it counts right, up to 1.5x short on
    the Llama-2-7B runs' miscounted ones). Elsewhere, where the decode time per recorded
    token exceeds SUSPECT_PER_TOKEN_RATIO x the stage median, the count implied by the
    decode time at the stage's median per-token time replaces it. Adds
    `output_tokens_recorded` and `output_count_suspect` (the count is such an estimate;
    never with `ignore_eos`, where it is known); the input is not modified.
    """
    out = requests.copy()
    out["output_tokens_recorded"] = out["output_tokens"]
    ok = out["e2e_s"].notna() & out["ttft_s"].notna() & ~out.get("has_error", False)
    if "max_tokens" in out and out["max_tokens"].notna().all():
        out["output_count_suspect"] = False
        out.loc[ok, "output_tokens"] = out["max_tokens"].astype(out["output_tokens"].dtype)[ok]
        return out
    decode_s = (out["e2e_s"] - out["ttft_s"]).where(ok)
    per_token = decode_s / (out["output_tokens"] - 1).clip(lower=1)
    stage = stage_of(out)
    median = per_token.groupby(stage).transform("median")
    suspect = ok & (per_token > SUSPECT_PER_TOKEN_RATIO * median)
    implied = (decode_s / median).round() + 1
    out["output_count_suspect"] = suspect
    out.loc[suspect, "output_tokens"] = implied[suspect].astype(out["output_tokens"].dtype)
    return out
