"""Out-of-sample validation against measured client-side runs (inference-perf folders).

For every fold, the model is fitted without the held-out data, then the held-out
experiment is simulated with posterior draws, replaying its recorded arrivals and token
counts, and compared with what was measured, per load stage:

- ``holdout="experiment"``: each experiment is predicted from a fit on all the other runs
  (its configuration is still seen through the model's other workloads); one compiled
  model serves every fold (held-out rows get likelihood weight 0), and the held-out run's
  effect is drawn afresh (a new run);
- ``holdout="model"``: each model is predicted from a fit on the other models' runs only,
  so its coefficients come through the hierarchy (population-level draws).

Metrics: E2E mean, TTFT mean, per-token ITL mean ((mean E2E - mean TTFT) / (mean output
tokens - 1); never inference-perf's per-chunk ITL) and E2E p90. A stage is *overloaded*
when its median TTFT exceeds QUEUEING_TTFT_RATIO median per-token decode times, or the
experiment had client errors; overloaded stages are reported apart from the summary.

The point prediction scored is the predictive **median** over posterior draws of each
stage metric (`POINT_PREDICTION`): near capacity a few draws saturate and blow up the mean
(their queue keeps growing), the median stays with the bulk of the draws. The error of the
predictive mean is kept beside it (``abs_pct_error_of_mean_*``), with each stage's share of
saturating draws (``saturated_share``, `bayesblis.simulate.results.stage_lag_growth`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from bayesblis.client_windows import QUEUEING_TTFT_RATIO
from bayesblis.constants import CI_PROB
from bayesblis.model.data import ModelData
from bayesblis.model.store import Posterior

METRICS = {"e2e_mean_s": "e2e_mean_s", "ttft_mean_s": "ttft_mean_s", "itl_mean_s": "itl_mean_s",
           "e2e_p90_s": "e2e_p90_s", "ttft_p90_s": "ttft_p90_s"}
"""Measured column (io.inference_perf.stage_measurements) -> simulated RESULT.json metric."""

POINT_PREDICTION = "median"
"""The interval-object field scored as the point prediction (errors, discrepancy)."""


@dataclass
class Fold:
    name: str
    held_out_sources: list
    unseen_model: str | None = None


def load_runs(dirs, hardware: str):
    """Ingest inference-perf folders; return (Dataset, ModelData over every run)."""
    from bayesblis.design import build_model_data
    from bayesblis.io.dataset import ingest

    dataset = ingest([str(d) for d in dirs])
    data = build_model_data(dataset, hardware=hardware)
    return dataset, data


def overloaded_stages(measured: pd.DataFrame, has_errors: bool) -> np.ndarray:
    """Boolean per stage row: queueing (see module docstring) or client errors."""
    per_token = measured["itl_mean_s"].to_numpy(float)
    ttft = measured["ttft_p50_s"].to_numpy(float) if "ttft_p50_s" in measured else \
        measured["ttft_mean_s"].to_numpy(float)
    return (ttft > QUEUEING_TTFT_RATIO * per_token) | has_errors


def predict_experiment(source, posterior, *, hardware, n_draws, seed, allow_unseen,
                       max_duration_s=None, keep_draws=False):
    """Simulate one held-out experiment (replay) with posterior draws: RESULT.json dict."""
    from bayesblis.coefficients import deployment_draws
    from bayesblis.simulate.results import Draws, run_scenario
    from bayesblis.simulate.scenario import Scenario

    scenario = Scenario.from_inference_perf(source.meta["path"],
                                            hardware, replay=True, seed=seed)
    deployment = scenario.deployment()
    cd = deployment_draws(posterior, deployment, n_draws=n_draws, allow_unseen=allow_unseen,
                          seed=seed, new_run=True)
    result = run_scenario(scenario, Draws.from_coefficient_draws(cd, "posterior"), seed=seed,
                          max_duration_s=max_duration_s, deployment=deployment,
                          keep_draws=keep_draws)
    result["unseen_levels"] = cd.unseen_levels
    result["seen_config"] = bool(cd.seen_config)
    result["fitted_load"] = cd.fitted_load
    return result


def compare(source, result, *, fold: str, holdout: str, discrepancy: dict | None = None,
            seed: int = 0) -> list[dict]:
    """One record per stage: measured vs predicted (median, mean, interval), errors of the
    median (scored) and of the mean, coverage, and the share of saturating draws.

    With `discrepancy` ({metric: {"sd": ..., "scale": ...}}, see bayesblis.discrepancy) and
    per-draw results, the interval is the posterior draws widened by the simulator
    discrepancy (a configuration the fit never saw: their spread scaled,
    `Discrepancy.for_configuration`); the model's own interval and its coverage are kept as
    ``model_pred_*`` and ``model_covered_*``."""
    from bayesblis.discrepancy import (Discrepancy, in_flight, load_excess, pass_probability,
                                       widened_interval)
    from bayesblis.io.inference_perf import correct_output_counts

    measured = source.tables["stage_measurements"].reset_index(drop=True)
    corrected = correct_output_counts(source.tables["requests"])
    has_errors = bool(source.tables["requests"]["has_error"].any())
    overloaded = overloaded_stages(measured, has_errors)
    seen_config = bool(result.get("seen_config", True))
    rule = Discrepancy.from_entries(discrepancy or {}).for_configuration(
        seen_config, result.get("unseen_levels"), result.get("fitted_load"))
    records = []
    for i, row in measured.iterrows():
        stage_pred = result["stages"][i] if i < len(result["stages"]) else None
        rec = {"experiment": source.name, "fold": fold, "holdout": holdout, "stage": int(row["stage"]),
               "rate_rps": float(row["rate_rps"]), "overloaded": bool(overloaded[i]),
               "saturated_share": stage_pred.get("saturated_share") if stage_pred else None,
               "unseen_levels": result.get("unseen_levels", {}), "seen_config": seen_config}
        stage_load = in_flight(float(row["rate_rps"]),
                               (stage_pred or {}).get("e2e_mean_s", {}).get("median"))
        rec["load_in_flight"] = stage_load
        rec["load_excess"] = load_excess(stage_load, rule.fitted_load)
        itl_scale = _itl_count_scale(corrected, int(row["stage"]))
        for measured_col, metric in METRICS.items():
            value = float(row[measured_col])
            pred = stage_pred[metric] if stage_pred else None
            if pred is not None and metric == "itl_mean_s":
                pred = {k: (v * itl_scale if k in ("mean", "median", "lo", "hi") else v)
                        for k, v in pred.items()}
            rec[f"measured_{metric}"] = value
            if pred is None or not np.isfinite(value):
                continue
            lo, hi = pred["lo"], pred["hi"]
            if "per_draw_stages" in result:
                draws = np.asarray(result["per_draw_stages"][i][metric], float)
                draws = draws[np.isfinite(draws)] * (itl_scale if metric == "itl_mean_s" else 1.0)
                sd, scale = rule.widening(metric, stage_load)
                # PIT: the predictive probability of a value below the measured one (a plan's
                # P(pass) at threshold = measured); uniform over stages when calibrated
                rec[f"pit_{metric}"] = float(np.mean(pass_probability(draws, value, sd,
                                                                      scale=scale)))
                if discrepancy:
                    rec[f"model_pred_{metric}_lo"], rec[f"model_pred_{metric}_hi"] = lo, hi
                    rec[f"model_covered_{metric}"] = bool(lo <= value <= hi)
                    rec[f"model_pit_{metric}"] = float(np.mean(pass_probability(draws, value, 0.0)))
                    lo, hi = widened_interval(draws, sd, CI_PROB, seed=seed + i, scale=scale)
            point = pred[POINT_PREDICTION]
            rec[f"pred_{metric}"] = point
            rec[f"pred_{metric}_mean"] = pred["mean"]
            rec[f"pred_{metric}_lo"] = lo
            rec[f"pred_{metric}_hi"] = hi
            rec[f"abs_pct_error_{metric}"] = abs(point - value) / value * 100
            rec[f"abs_pct_error_of_mean_{metric}"] = abs(pred["mean"] - value) / value * 100
            rec[f"covered_{metric}"] = bool(lo <= value <= hi)
        records.append(rec)
    return records


def _itl_count_scale(corrected: pd.DataFrame, stage: int) -> float:
    """(mean simulated output - 1) / (mean recorded output - 1) of a stage's valid requests.

    The simulator replays corrected output counts; the measured ITL divides by the
    recorded ones. Scaling the simulated per-token ITL by this ratio applies the
    measurement's own definition to the prediction (exact per draw: same workload)."""
    rows = corrected[(corrected["stage"] == stage) & ~corrected["has_error"]]
    if rows.empty:
        return 1.0
    return float((rows["output_tokens"].mean() - 1) / (rows["output_tokens_recorded"].mean() - 1))


def summarize(records: list[dict], holdout: str, ci_prob: float = CI_PROB) -> dict:
    """Medians over normal-load stages of the errors of the predictive median (and of the
    predictive mean), coverage, and the overloaded ones apart."""
    table = pd.DataFrame(records)
    normal = table[~table["overloaded"]]
    shares = pd.to_numeric(normal.get("saturated_share", pd.Series(dtype=float)), errors="coerce")
    summary = {"holdout": holdout, "ci_prob": ci_prob, "point_prediction": POINT_PREDICTION,
               "n_normal_stages": int(len(normal)),
               "n_overloaded_stages": int(table["overloaded"].sum()),
               "n_normal_stages_with_saturated_draws": int((shares > 0).sum())}
    for metric in METRICS.values():
        short = metric.replace("_s", "")
        col = f"abs_pct_error_{metric}"
        if col in normal:
            summary[f"median_abs_pct_error_{short}"] = float(normal[col].median())
            summary[f"mean_abs_pct_error_{short}"] = float(normal[col].mean())
            summary[f"median_abs_pct_error_of_mean_{short}"] = float(
                normal[f"abs_pct_error_of_mean_{metric}"].median())
        over = table[table["overloaded"]]
        if col in over and len(over):
            summary[f"overloaded_median_abs_pct_error_{short}"] = float(over[col].median())
    covered = [c for c in normal.columns if c.startswith("covered_")]
    if covered:
        summary["coverage_90"] = _share_covered(normal[covered])
        summary["coverage_by_metric"] = {c[len("covered_"):]: float(normal[c].mean()) for c in covered}
        summary["interval_width_pct_by_metric"] = {
            m: float(((normal[f"pred_{m}_hi"] - normal[f"pred_{m}_lo"]) / normal[f"pred_{m}"]).median()
                     * 100) for m in (c[len("covered_"):] for c in covered)}
    model_only = [c for c in normal.columns if c.startswith("model_covered_")]
    if model_only:
        summary["coverage_90_posterior_only"] = _share_covered(normal[model_only])
    for key, prefix in (("calibration", "pit_"), ("calibration_posterior_only", "model_pit_")):
        cols = [c for c in normal.columns if c.startswith(prefix)]
        if cols:
            summary[key] = pit_calibration(normal[cols].to_numpy(dtype=float).ravel())
    return summary


CALIBRATION_LEVELS = (0.5, 0.8, 0.9)


def pit_calibration(pit) -> dict:
    """{"central_50": share, ...}: the share of measured values inside the predictive's central
    p interval (abs(PIT - 0.5) <= p / 2) at each level of `CALIBRATION_LEVELS`; calibrated
    predictions give about p at every level, and a plan's stated SLO probabilities hold."""
    u = np.asarray(pit, float)
    u = u[np.isfinite(u)]
    return {f"central_{int(p * 100)}": (float(np.mean(np.abs(u - 0.5) <= p / 2)) if len(u) else None)
            for p in CALIBRATION_LEVELS} | {"n": int(len(u))}


def _share_covered(flags: pd.DataFrame) -> float | None:
    """Share of True among the non-missing coverage flags of a table."""
    values = flags.to_numpy(dtype=float).ravel()
    values = values[~np.isnan(values)]
    return float(values.mean()) if len(values) else None


def discrepancy_entries(records: list[dict]) -> dict:
    """{metric: {"sd", ..., and "scale", "n_stages_never_fitted" where records of
    configurations never fitted allow, "extrapolation_slope", "n_stages_extrapolated" where
    stages beyond their fitted load do}}: `discrepancy_sd`, `spread_scale` and
    `extrapolation_slope` of `records`."""
    from bayesblis.discrepancy import discrepancy_sd, extrapolation_slope, spread_scale

    out = discrepancy_sd(records, METRICS.values())
    for metric, entry in spread_scale(records, METRICS.values()).items():
        out[metric].update(scale=entry["scale"], n_stages_never_fitted=entry["n_stages"])
    for metric, entry in extrapolation_slope(records, METRICS.values()).items():
        out[metric].update(extrapolation_slope=entry["slope"],
                           n_stages_extrapolated=entry["n_stages"])
    return out


def cross_fold_discrepancy(predictions: list[dict]) -> dict:
    """{fold: {metric: {"sd", ...}}}: each fold's simulator discrepancy, calibrated on the
    other folds' out-of-sample errors (bayesblis.discrepancy; `discrepancy_entries`).

    `predictions`: one entry per held-out source, {"fold", "records"} (its `compare`
    records, posterior-only intervals). A fold's own held-out runs never set its
    discrepancy; the other folds' fits did see them (a cross-validation residual, as in CV+
    conformal intervals), so the held-out run reaches its own interval only through how it
    moved the other fits' errors."""
    out = {}
    for fold in dict.fromkeys(p["fold"] for p in predictions):
        others = [r for p in predictions if p["fold"] != fold for r in p["records"]]
        out[fold] = discrepancy_entries(others)
    return out


def pooled_discrepancy(predictions: list[dict], holdout: str) -> dict:
    """The simulator discrepancy of a new prediction, calibrated on every held-out stage of
    every fold (each fold's errors are out of sample for its fit): what `simulate` and
    `plan --discrepancy REPORT.json` widen by (bayesblis.discrepancy.load_discrepancy)."""
    records = [r for p in predictions for r in p["records"]]
    return {"holdout": holdout, "ci_prob": CI_PROB, "point_prediction": POINT_PREDICTION,
            "n_runs": len({r["experiment"] for r in records}),
            "metrics": discrepancy_entries(records)}


DEFAULT_DRAWS = {"experiment": 30, "model": 150}
"""Posterior draws simulated per held-out experiment. The scored median of n draws has a
Monte Carlo error of about 1.25 sd / sqrt(n) (sd: the predictive log spread). Held out by
experiment the spread is ~0.02, so 30 draws leave ~0.4%; held out by model it is ~0.2, so
30 draws left ~4.5%, as large as the errors scored (model version 4, docs/accuracy.md), and
150 leave ~2%."""

PROFILE_ROWS_PER_CONFIG = 12
"""Operator-profile rows kept per profiled configuration (spread over log2 of the size):
as in benchmarks/profiles_logo.py, enough to pin a GPU's achieved FLOP/s, bandwidth and
link speed without outnumbering the traced windows."""


def run_validation(dirs, *, holdout="experiment", hardware="H100", n_draws=None, fit_draws=300,
                   fit_tune=300, chains=2, seed=1, max_obs_per_run=400, echo=print,
                   method="nuts", max_duration_s=None, max_treedepth=10, target_accept=0.95,
                   discrepancy: bool = True, profiles=None,
                   profile_rows_per_config: int = PROFILE_ROWS_PER_CONFIG) -> dict:
    """Fit, predict and compare every fold; return the REPORT document.

    `n_draws`: posterior draws simulated per held-out experiment (None: DEFAULT_DRAWS).
    `profiles`: an operator-profiles folder whose `hardware` rows (linear layers) join every
    fold's training data (`with_profiles`); they are never held out.

    `discrepancy`: widen each held-out prediction by the simulator discrepancy calibrated on
    the other folds' held-out errors (`cross_fold_discrepancy`); the posterior-only
    intervals and their coverage are reported too."""
    from bayesblis.model.hierarchy import LatencyModel

    n_draws = n_draws or DEFAULT_DRAWS.get(holdout, 30)
    dataset, data = load_runs(dirs, hardware)
    data = _thin_per_run(data, max_obs_per_run, seed)
    profile_info = None
    if profiles is not None:
        data, profile_info = with_profiles(data, profiles, hardware, profile_rows_per_config, seed)
        echo(f"operator profiles: {profile_info['rows']} rows over {profile_info['configs']} "
             f"configurations of {profile_info['hardware']} join every fold's fit")
    sources = {s.name: s for s in dataset.sources}
    records, folds_info = [], []
    sampler = {"draws": fit_draws, "tune": fit_tune, "chains": chains, "seed": seed,
               "max_treedepth": max_treedepth, "target_accept": target_accept}

    predictions = []  # {"fold", "source", "result", "records"} per held-out source

    def predict(view, held_sources, fold, allow_unseen, info):
        for source in held_sources:
            result = predict_experiment(source, view, hardware=hardware, n_draws=n_draws,
                                        seed=seed, allow_unseen=allow_unseen,
                                        max_duration_s=max_duration_s, keep_draws=True)
            posterior_only = compare(source, result, fold=fold, holdout=holdout)
            predictions.append({"fold": fold, "source": source, "result": result,
                                "records": posterior_only})
            echo(_format_records(posterior_only)
                 + ("\n    (posterior-only intervals: the final table widens them by the "
                    "simulator discrepancy)" if discrepancy else ""))
        folds_info.append({**info, "fold": fold})

    if holdout == "experiment":
        model = LatencyModel(sampler_config=sampler)
        model.build_model(data, weighted=True)
        fit_on_all = None  # runs without windows share the fit on all runs
        for name, source in sources.items():
            weight = (model.data.obs["run"].astype(str) != name).to_numpy(float)
            echo(f"[{len(folds_info) + 1}/{len(sources)}] fit without {name} "
                 f"({int(weight.sum())} windows) ...")
            if weight.all() and fit_on_all is not None:
                view, info = fit_on_all
            else:
                model.refit_weighted(weight, method=method)
                view = Posterior.of_fit(model)
                # the windows it fitted (its fitted loads), not the held-out run's
                view.data = ModelData(model.data.configs, model.data.obs[weight > 0])
                info = _fold_info(name, model, model.fit_info["diagnostics"])
                if weight.all():
                    fit_on_all = view, info
            predict(view, [source], name, False, info)
    elif holdout == "model":
        models = heldout_models(data.configs)
        for i, held in enumerate(models):
            keep_cfg = data.configs[data.configs["model"] != held]
            train = ModelData(keep_cfg, data.obs[data.obs["config"].isin(keep_cfg["config"])])
            echo(f"[{i + 1}/{len(models)}] fit without model {held} ({len(train.obs)} windows) ...")
            model = LatencyModel(sampler_config=sampler)
            model.build_model(train)
            model.fit(method=method, progressbar=False)
            held_sources = [s for s in sources.values() if source_model(s, hardware) == held]
            predict(Posterior.of_fit(model), held_sources, held, True,
                    _fold_info(held, model, model.fit_info["diagnostics"]))
    else:
        raise ValueError(f"holdout must be 'experiment' or 'model', not {holdout!r}")
    calibrated = cross_fold_discrepancy(predictions) if discrepancy else {}
    pooled = pooled_discrepancy(predictions, holdout)
    for p in predictions:  # widened intervals, or the posterior-only records as they are
        records += (compare(p["source"], p["result"], fold=p["fold"], holdout=holdout,
                            discrepancy=calibrated[p["fold"]], seed=seed)
                    if discrepancy else p["records"])
    for info in folds_info:
        info["discrepancy"] = calibrated.get(info["fold"])
    return {"holdout": holdout, "hardware": hardware, "n_draws": n_draws, "sampler": sampler,
            "max_obs_per_run": max_obs_per_run, "discrepancy": discrepancy,
            "operator_profiles": profile_info,
            "point_prediction": POINT_PREDICTION, "simulator_discrepancy": pooled,
            "records": records, "folds": folds_info, "summary": summarize(records, holdout)}


def with_profiles(data: ModelData, folder, hardware: str, per_config: int, seed: int):
    """`data` plus the operator-profile rows of `hardware` in `folder` (linear layers;
    all-reduces only with `operator_evidence.WITH_TRACES_ALL_REDUCE`; thinned by
    `spread_subsample`), and a
    summary {"folder", "hardware", "configs", "rows"}. An error if the folder has none."""
    from bayesblis.catalog.gpus import load_gpu
    from bayesblis.errors import InputError
    from bayesblis.io.operator_profiles import read_operator_profiles
    from bayesblis.operator_evidence import (WITH_TRACES_ALL_REDUCE, combine, profile_observations,
                                             spread_subsample)

    gpu = load_gpu(hardware).name
    cfg, obs = profile_observations(read_operator_profiles(folder), gpus=[gpu],
                                    all_reduce=WITH_TRACES_ALL_REDUCE)
    if not len(obs):
        raise InputError(folder, f"no operator profile of {gpu}", field="gpu",
                         expected=f"compute/ or network/ profiles measured on {gpu}")
    obs = spread_subsample(obs, per_config, seed=seed)
    info = {"folder": str(folder), "hardware": gpu, "configs": int(obs["config"].nunique()),
            "rows": int(len(obs)), "rows_per_config": per_config}
    return combine(data, cfg, obs), info


def heldout_models(configs: pd.DataFrame) -> list[str]:
    """The models a leave-one-model-out validation holds out in turn: every traced model
    (operator-profile configurations are evidence, never held out)."""
    from bayesblis.operator_evidence import MODEL_PREFIX

    return sorted(str(m) for m in configs["model"].unique() if not str(m).startswith(MODEL_PREFIX))


def source_model(source, hardware: str) -> str:
    """The catalog model name of a source (from its deployment: a source may have no
    observation rows)."""
    from bayesblis.design import deployment_for_source
    from bayesblis.model.data import config_row

    return str(config_row(deployment_for_source(source, hardware))["model"])


def _thin_per_run(data: ModelData, max_obs_per_run: int | None, seed: int) -> ModelData:
    if not max_obs_per_run:
        return data
    # shuffle, then the first rows of each (run, kind): keeps every column (a groupby-apply
    # drops the grouping columns in pandas 3, and every row became kind 'window', exact)
    obs = data.obs.sample(frac=1.0, random_state=seed)
    obs = obs.groupby(["run", "kind"], sort=False).head(max_obs_per_run // 2)
    return ModelData(data.configs, obs.reset_index(drop=True))


def _fold_info(name, model, diag) -> dict:
    return {"fold": name, "fit_wall_s": model.fit_info["wall_s"],
            "diagnostics_passed": diag.get("passed"), "r_hat_max": diag.get("r_hat_max"),
            "ess_bulk_min": diag.get("ess_bulk_min"), "divergences": diag.get("divergences")}


def _format_records(records) -> str:
    """Per stage: measured vs predictive median [interval] (error), predictive mean (error),
    and the share of draws that saturate the stage."""
    lines = []
    for r in records:
        share = r.get("saturated_share")
        parts = [f"  {r['experiment'][16:]:<34} stage {r['stage']} ({r['rate_rps']:g} rps)"
                 + (" OVERLOADED" if r["overloaded"] else "")
                 + ("" if share is None else f", {share:.0%} of draws saturate")]
        for metric in METRICS.values():
            if f"pred_{metric}" not in r:
                continue
            parts.append(f"{metric[:-2]}: {r[f'measured_{metric}'] * 1e3:.1f} ms vs median "
                         f"{r[f'pred_{metric}'] * 1e3:.1f} [{r[f'pred_{metric}_lo'] * 1e3:.1f}, "
                         f"{r[f'pred_{metric}_hi'] * 1e3:.1f}] ({r[f'abs_pct_error_{metric}']:.1f}%"
                         + ("" if r[f"covered_{metric}"] else ", not covered") + "), mean "
                         f"{r[f'pred_{metric}_mean'] * 1e3:.1f} "
                         f"({r[f'abs_pct_error_of_mean_{metric}']:.1f}%)")
        lines.append("\n    ".join(parts))
    return "\n".join(lines)


def format_table(report: dict) -> str:
    """The full per-experiment, per-stage table plus the summary."""
    s = report["summary"]
    lines = [f"measured vs predictive median over posterior draws [{int(s['ci_prob'] * 100)}% "
             "interval] (|error| of the median, the scored point prediction), then the "
             "predictive mean (its |error|)",
             _format_records(report["records"]), "",
             f"summary ({report['holdout']} holdout, {s['n_normal_stages']} normal-load stages, "
             f"{s['n_overloaded_stages']} overloaded apart; point prediction: predictive "
             f"median; {s.get('n_normal_stages_with_saturated_draws', 0)} normal-load stages "
             "with saturating draws):"]
    for metric in METRICS.values():
        short = metric.replace("_s", "")
        if f"median_abs_pct_error_{short}" in s:
            lines.append(f"  median |error| {short:<10} {s[f'median_abs_pct_error_{short}']:6.1f}%"
                         f"   (mean over stages {s[f'mean_abs_pct_error_{short}']:.1f}%;"
                         f" of the predictive mean: median "
                         f"{s[f'median_abs_pct_error_of_mean_{short}']:.1f}%)"
                         + (f"   overloaded median {s[f'overloaded_median_abs_pct_error_{short}']:.1f}%"
                            if f"overloaded_median_abs_pct_error_{short}" in s else ""))
    if s.get("coverage_90") is not None:
        lines.append(f"  {int(s['ci_prob'] * 100)}% interval coverage {s['coverage_90'] * 100:.0f}% "
                     + ", ".join(f"{k} {v * 100:.0f}%" for k, v in s["coverage_by_metric"].items()))
    if s.get("interval_width_pct_by_metric"):
        lines.append("  median interval width (hi - lo) / median: " + ", ".join(
            f"{k} {v:.0f}%" for k, v in s["interval_width_pct_by_metric"].items()))
    if s.get("coverage_90_posterior_only") is not None:
        lines.append(f"  (posterior-only intervals, without the simulator discrepancy: "
                     f"{s['coverage_90_posterior_only'] * 100:.0f}%)")
    if s.get("calibration"):
        def levels(c):
            return " / ".join("n/a" if c.get(f"central_{int(p * 100)}") is None
                              else f"{c[f'central_{int(p * 100)}'] * 100:.0f}%" for p in CALIBRATION_LEVELS)
        names = " / ".join(f"{int(p * 100)}%" for p in CALIBRATION_LEVELS)
        lines.append(f"  predictive calibration (PIT): the central {names} intervals hold "
                     f"{levels(s['calibration'])} of the measured values"
                     + (f" (posterior-only: {levels(s['calibration_posterior_only'])})"
                        if s.get("calibration_posterior_only") else ""))
    return "\n".join(lines)


def expand_dirs(dirs) -> list[Path]:
    """Experiment folders: each given folder, or its children when it holds experiments."""
    from bayesblis.io.inference_perf import is_inference_perf_folder

    out = []
    for d in map(Path, dirs):
        if is_inference_perf_folder(d):
            out.append(d)
        else:
            out += sorted(c for c in d.iterdir() if c.is_dir() and is_inference_perf_folder(c))
    return out
