"""The check on configurations never traced: measured runs predicted from their load profile.

A run is a folder with the server settings (`exp-config.yaml`), the inference-perf load
(`profile.yaml`) and measured stage aggregates: `measured.json` (the layout of
`h100-new-models`: milliseconds per stage) or an inference-perf run's `requests.json`
(aggregated per stage as `validate` does). Every run is predicted the way a capacity
planner would: the workload generated from its profile (`Scenario.from_inference_perf`,
never the recorded requests), coefficients from the posterior (through the hierarchy for
a configuration the fit never saw), intervals widened by the simulator discrepancy.

Scored per stage and metric: signed and absolute error of the predictive median (the
point prediction), the predictive mean's error beside it, whether the 90% interval holds
the measured value and the interval's width; summarised per model and overall
(`data_specs/external-check.md`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bayesblis.constants import CI_PROB
from bayesblis.errors import InputError

METRICS = ("e2e_mean_s", "ttft_mean_s", "itl_mean_s", "e2e_p90_s", "ttft_p90_s")
"""Stage metrics scored (RESULT.json names; measured.json gives them in ms)."""

HARDWARE_NAMES = {"H100": "H100-SXM", "A100": "A100-80GB", "L40S": "L40S", "H200": "H200"}
"""measured.json `hardware` -> GPU catalog name."""


@dataclass
class ExternalRun:
    """One measured run: its folder, scenario settings and measured stage metrics (s)."""

    name: str
    folder: Path
    model: str
    hardware: str | None
    measured: list[dict]
    reference: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.model.split("/")[-1]


def is_run_folder(folder) -> bool:
    folder = Path(folder)
    return (folder / "exp-config.yaml").is_file() and (folder / "profile.yaml").is_file()


def expand_runs(dirs) -> list[Path]:
    """Run folders: each given folder, or its sub-folders that are runs."""
    out = []
    for d in map(Path, dirs):
        found = [d] if is_run_folder(d) else sorted(c for c in d.iterdir() if is_run_folder(c))
        if not found:
            raise InputError(d, "no run folder here", expected="folders with exp-config.yaml "
                             "and profile.yaml (and measured.json or requests.json)")
        out += found
    return out


def read_run(folder, hardware: str | None = None) -> ExternalRun:
    """An external run folder (measured.json or requests.json beside exp-config/profile);
    measured.json's `hardware` names the GPU, else `hardware` (a catalog or short name)."""
    from bayesblis.io.mapping_file import read_mapping
    from bayesblis.io.text import load_json_checked

    folder = Path(folder)
    cfg = folder / "exp-config.yaml"
    if not cfg.is_file() or not (folder / "profile.yaml").is_file():
        raise InputError(folder, "exp-config.yaml or profile.yaml missing",
                         expected="a run folder: exp-config.yaml, profile.yaml and measured.json "
                                  "or requests.json")
    model = str(read_mapping(cfg, expected="exp-config keys").get("model") or "")
    measured_path = folder / "measured.json"
    if measured_path.is_file():
        doc = load_json_checked(measured_path, expected="measured stage aggregates (ms)")
        stages = _measured_stages(doc, measured_path)
        hw = doc.get("hardware") or hardware
        ref = doc.get("blis_trained_physics_in_sample") or {}
        reference = {f"{k[:-3]}_s": v / 1e3 for k, v in ref.items() if k.endswith("_ms")}
        return ExternalRun(folder.name, folder, model, HARDWARE_NAMES.get(hw, hw), stages,
                           {"blis_trained_physics_in_sample": reference} if reference else {})
    if (folder / "requests.json").is_file():
        from bayesblis.io.inference_perf import read_inference_perf, stage_measurements

        table = stage_measurements(read_inference_perf(folder))
        stages = [{"stage": int(r["stage"]), **{m: float(r[m]) for m in METRICS}}
                  for _, r in table.iterrows()]
        return ExternalRun(folder.name, folder, model, HARDWARE_NAMES.get(hardware, hardware), stages)
    raise InputError(folder, "no measured.json or requests.json",
                     expected="measured stage aggregates of the run")


def _measured_stages(doc, path) -> list[dict]:
    """`measured.stage_N` blocks (ms) -> [{stage, metric_s...}] sorted by stage."""
    blocks = (doc.get("measured") if isinstance(doc, dict) else None) or {}
    stages = []
    for key, block in blocks.items():
        if not key.startswith("stage_"):
            continue
        try:
            index = int(key.split("_", 1)[1])
            row = {"stage": index}
            for metric in METRICS:
                value = block[metric[:-2] + "_ms"]
                if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                    raise ValueError(metric)
                row[metric] = float(value) / 1e3
        except (KeyError, ValueError, TypeError):
            raise InputError(path, "stage block lacks a positive latency", record=key,
                             field=f"measured.{key}",
                             expected=f"{', '.join(m[:-2] + '_ms' for m in METRICS)}") from None
        stages.append(row)
    if not stages:
        raise InputError(path, "no stage blocks", field="measured",
                         expected="measured.stage_0, stage_1, ... with latencies in ms")
    return sorted(stages, key=lambda r: r["stage"])


def predict_run(run: ExternalRun, posterior, *, n_draws: int = 40, seed: int = 0,
                discrepancy=None, model_configs=None, allow_unseen: bool = True) -> dict:
    """RESULT.json of the run simulated from its profile with posterior draws."""
    from bayesblis.coefficients import posterior_draws
    from bayesblis.simulate.results import Draws, run_scenario

    scenario, deployment = run_scenario_of(run, model_configs, seed=seed)
    cd = posterior_draws(posterior, deployment, n_draws, allow_unseen=allow_unseen, seed=seed)
    rule = (discrepancy.for_configuration(cd.seen_config, cd.unseen_levels, cd.fitted_load)
            if discrepancy is not None else None)
    result = run_scenario(scenario, Draws.from_coefficient_draws(cd, f"posterior {posterior}"),
                          seed=seed, deployment=deployment, discrepancy=rule)
    result["seen_config"] = bool(cd.seen_config)
    result["unseen_levels"] = cd.unseen_levels
    return result


def run_scenario_of(run: ExternalRun, model_configs=None, *, seed: int = 0):
    """(Scenario, Deployment) the run's folder describes, its model resolved through
    `model_configs` (`resolve_model_config`); a BayesBlisError says why it cannot be built."""
    from bayesblis.simulate.scenario import Scenario

    scenario = Scenario.from_inference_perf(run.folder, run.hardware, seed=seed)
    config = resolve_model_config(scenario.model, model_configs)
    if config is not None:
        scenario.model = str(config)
    return scenario, scenario.deployment()


def resolve_model_config(model: str, folders) -> Path | None:
    """None when the model catalog knows `model` (an HF id), else its config.json in one of
    `folders` (sub-folders named like the id's last part, case-insensitive)."""
    from bayesblis.catalog.models import load_model
    from bayesblis.errors import BayesBlisError

    try:
        load_model(model)
        return None
    except BayesBlisError:
        pass
    for folder in folders or ():
        want = model.split("/")[-1].lower()
        for cand in sorted(Path(folder).iterdir()):
            if cand.name.lower() == want and (cand / "config.json").is_file():
                return cand / "config.json"
    return None


def score(run: ExternalRun, result: dict) -> list[dict]:
    """One record per stage: measured, predicted median/mean/interval and their errors."""
    records = []
    for row in run.measured:
        s = row["stage"]
        pred = result["stages"][s] if s < len(result["stages"]) else None
        rec = {"run": run.name, "model": run.label, "stage": s,
               "rate_rps": pred.get("rate_rps") if pred else None,
               "saturated_share": pred.get("saturated_share") if pred else None,
               "seen_config": result.get("seen_config")}
        workload_row = (result.get("workload") or [None] * (s + 1))[s]
        miscounted = _itl_miscounted(row, workload_row)
        if miscounted:
            rec["measured_itl_client_s"] = row["itl_mean_s"]
            rec["itl_from_e2e"] = miscounted + "; scored as (E2E - TTFT) / (generated - 1)"
        for metric in METRICS:
            value = (itl_from_e2e(row, workload_row) if metric == "itl_mean_s" and miscounted
                     else row[metric])
            rec[f"measured_{metric}"] = value
            p = pred.get(metric) if pred else None
            if not p or p.get("median") is None or not math.isfinite(value):
                continue
            median, mean = float(p["median"]), float(p["mean"])
            lo, hi = float(p["lo"]), float(p["hi"])
            rec.update({f"pred_{metric}": median, f"pred_{metric}_mean": mean,
                        f"pred_{metric}_lo": lo, f"pred_{metric}_hi": hi,
                        f"signed_pct_error_{metric}": (median - value) / value * 100,
                        f"abs_pct_error_{metric}": abs(median - value) / value * 100,
                        f"signed_pct_error_of_mean_{metric}": (mean - value) / value * 100,
                        f"covered_{metric}": bool(lo <= value <= hi),
                        f"width_pct_{metric}": (hi - lo) / median * 100 if median else None})
        records.append(rec)
    return records


MIN_OUTPUT_COUNT_RATIO = 0.95
"""A measured per-token ITL whose implied output count ((E2E - TTFT) / ITL + 1) is below
this share of the tokens the server generates is a per-recorded-token figure over
miscounted outputs (Llama-2-7B runs record too few tokens for a share of requests,
`io.inference_perf.correct_output_counts`): such a stage's ITL is scored from its E2E and
TTFT instead (`itl_from_e2e`)."""


def itl_from_e2e(row: dict, workload_row: dict) -> float:
    """The stage's per-token ITL over the tokens the server generates: (mean E2E - mean
    TTFT) / (mean output tokens - 1), the simulator's own definition of ITL."""
    generated = workload_row["output_tokens"]["mean"]
    return (row["e2e_mean_s"] - row["ttft_mean_s"]) / (generated - 1)


def _itl_miscounted(row: dict, workload_row: dict | None) -> str | None:
    """Why the stage's measured ITL is not comparable as recorded, or None."""
    if not workload_row or not workload_row.get("output_tokens"):
        return None
    generated = workload_row["output_tokens"]["mean"]
    implied = (row["e2e_mean_s"] - row["ttft_mean_s"]) / row["itl_mean_s"] + 1
    if implied < MIN_OUTPUT_COUNT_RATIO * generated:
        return (f"the measured ITL implies {implied:.0f} output tokens per request, the server "
                f"generates {generated:.0f} (ignore_eos): counted over miscounted outputs")
    return None


def summary_block(rows: list[dict]) -> dict:
    """Per metric over `rows` (scored stage records): median abs(error) and signed error of
    the median, of the mean, coverage and median width; ``n_stages``."""
    out = {"n_stages": len(rows)}
    for m in METRICS:
        def col(k):
            return [r[k] for r in rows if r.get(k) is not None]
        abs_err, covered = col(f"abs_pct_error_{m}"), col(f"covered_{m}")
        if not abs_err:
            continue
        out[m] = {"median_abs_pct_error": float(np.median(abs_err)),
                  "median_signed_pct_error": float(np.median(col(f"signed_pct_error_{m}"))),
                  "median_signed_pct_error_of_mean":
                      float(np.median(col(f"signed_pct_error_of_mean_{m}"))),
                  "coverage": float(np.mean(covered)),
                  "median_width_pct": float(np.median(col(f"width_pct_{m}")))}
    return out


def summarize(records: list[dict]) -> dict:
    """`summary_block` over all stages and per model."""
    models = sorted({r["model"] for r in records})
    return {"overall": summary_block(records),
            "by_model": {m: summary_block([r for r in records if r["model"] == m]) for m in models}}


def run_check(dirs, posterior, *, hardware: str | None = None, n_draws: int = 40, seed: int = 0,
              discrepancy=None, model_configs=None, echo=None) -> dict:
    """Predict and score every run folder: the report (`data_specs/external-check.md`)."""
    from bayesblis import __version__

    records, runs, references = [], [], {}
    for d in dirs:
        run = read_run(d, hardware)
        result = predict_run(run, posterior, n_draws=n_draws, seed=seed,
                             discrepancy=discrepancy, model_configs=model_configs)
        recs = score(run, result)
        records.extend(recs)
        references[run.name] = run.reference
        runs.append({"run": run.name, "model": run.model, "hardware": run.hardware,
                     "seen_config": result["seen_config"],
                     "unseen_levels": result["unseen_levels"],
                     "workload": result.get("workload"),
                     "caveats": result["metadata"].get("caveats", []),
                     "wall_s": result["metadata"]["wall_s"]})
        if echo is not None:
            e2e = ", ".join(f"{r.get('signed_pct_error_e2e_mean_s', float('nan')):+.1f}%"
                            for r in recs)
            echo(f"{run.name}: E2E mean error by stage {e2e}")
    return {"report": "external_check", "package_version": __version__,
            "posterior": str(posterior), "draws": int(n_draws), "seed": int(seed),
            "ci_prob": CI_PROB, "point_prediction": "median",
            "discrepancy": discrepancy.to_dict() if discrepancy is not None else None,
            "runs": runs, "records": records, "summary": summarize(records),
            "reference": _reference_errors(records, references)}


def _reference_errors(records, references) -> dict:
    """Another model's whole-run predictions (e.g. BLIS trained-physics, in sample) scored
    against the run's measured stage means weighted by stage requests, where given."""
    out = {}
    for run, ref in references.items():
        for name, values in ref.items():
            rows = [r for r in records if r["run"] == run]
            weights = np.array([r["rate_rps"] or 0 for r in rows], float)
            if not rows or weights.sum() <= 0:
                continue
            for metric, value in values.items():
                measured = [r.get(f"measured_{metric}") for r in rows]
                if None in measured:
                    continue
                whole = float(np.average(measured, weights=weights))
                out.setdefault(name, {}).setdefault(metric, {})[run] = (value - whole) / whole * 100
    return out


def format_table(report: dict) -> str:
    """Per-stage errors and the summary as text."""
    lines = [f"{'run':48s} {'st':>2s} " + " ".join(f"{m[:-2]:>16s}" for m in METRICS)]
    for r in report["records"]:
        cells = []
        for m in METRICS:
            e = r.get(f"signed_pct_error_{m}")
            cells.append(f"{e:+7.1f}% {'in ' if r.get(f'covered_{m}') else 'out'}    "
                         if e is not None else f"{'-':>16s}")
        lines.append(f"{r['run'][:48]:48s} {r['stage']:2d} " + " ".join(f"{c:>16s}" for c in cells))
    lines.append("")
    lines.append(f"{'':28s} " + " ".join(f"{m[:-2]:>16s}" for m in METRICS))
    rows = [("all", report["summary"]["overall"]), *report["summary"]["by_model"].items()]
    for name, block in rows:
        cells = [(f"{block[m]['median_abs_pct_error']:.1f}% ({block[m]['median_signed_pct_error']:+.1f}) "
                  f"{block[m]['coverage']:.0%}") if m in block else "-" for m in METRICS]
        lines.append(f"{name[:28]:28s} " + " ".join(f"{c:>16s}" for c in cells))
    lines.append("cells: median |error| of the predictive median (median signed error), 90% coverage")
    return "\n".join(lines)


def write_report(path, report: dict) -> None:
    from bayesblis import atomic

    atomic.write_text(path, json.dumps(report, indent=1, default=_jsonable))


def _jsonable(v):
    if isinstance(v, (np.floating, np.integer)):
        return v.item()
    if isinstance(v, np.bool_):
        return bool(v)
    raise TypeError(f"not JSON serialisable: {type(v)}")
