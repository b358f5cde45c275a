"""Load response on a synthetic fleet: a run's latency at each of its rates, simulated with
posterior draws and with the true coefficients (issue #19).

The check a recovery test and `benchmarks/long_prompt_fleet.py` make: does the fitted model
track how inter-token latency (and TTFT, E2E) rise with the arrival rate, when long prompts'
prefill chunks share ever more steps with decodes? Three figures per stage: *measured*, from
the run's own OTEL journey traces (what an engineer would see: they include the fleet's
outlier steps, 0.5% of steps stretched 3-10x, about +3% on the mean step); the *true*
coefficients replayed on the run's scenario (same arrivals and token counts, several noise
draws, their median; no outlier steps); and the posterior's predictive median and 90%
interval on the same scenario.
"""

from __future__ import annotations

import numpy as np

CURVE_METRICS = ("itl_mean_s", "ttft_mean_s", "e2e_mean_s")


def fit_fleet(fleet, *, draws: int, seed: int, max_obs_per_config: int = 400):
    """Ingest a fleet's training runs and fit them as the demo does (NUTS on JAX, the demo's
    observation kinds): (fitted LatencyModel, ModelData)."""
    import warnings

    from bayesblis.design import build_model_data
    from bayesblis.io.dataset import ingest
    from bayesblis.model.hierarchy import LatencyModel
    from bayesblis.reconstruct import FIT_KINDS

    dataset = ingest([fleet.root / "runs"])
    md = build_model_data(dataset, kinds=list(FIT_KINDS), max_obs_per_config=max_obs_per_config,
                          seed=seed)
    model = LatencyModel(sampler_config={"draws": draws, "tune": draws, "chains": 2,
                                         "seed": seed + 1, "nuts_backend": "jax"})
    model.build_model(md)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(method="nuts", progressbar=False)
    return model, md


def measured_stages(requests, stage_of_rank) -> list[dict]:
    """Per stage, the CURVE_METRICS of a journey-traced run's request table (`io.otel`:
    arrived, first token, departed; finished requests only), with `stage_of_rank[i]` the
    stage of the i-th arrival (the scenario's workload: the trace keeps the arrival order).
    ITL as the simulator reports it: (mean E2E - mean TTFT) / (mean output tokens - 1)."""
    req = requests.sort_values("arrived_s").reset_index(drop=True)
    if len(req) != len(stage_of_rank):
        raise ValueError(f"the trace has {len(req)} requests, the scenario {len(stage_of_rank)}")
    ttft = (req["first_token_s"] - req["arrived_s"]).to_numpy(float)
    e2e = (req["departed_s"] - req["arrived_s"]).to_numpy(float)
    n_out = req["output_tokens"].to_numpy(float)
    out = []
    for s in range(int(np.max(stage_of_rank)) + 1):
        sel = (np.asarray(stage_of_rank) == s) & np.isfinite(ttft) & np.isfinite(e2e)
        t, e, n = ttft[sel].mean(), e2e[sel].mean(), n_out[sel].mean()
        out.append({"ttft_mean_s": float(t), "e2e_mean_s": float(e),
                    "itl_mean_s": float((e - t) / (n - 1))})
    return out


def stage_curve(fleet, run_name: str, posterior, *, n_draws: int = 40, n_true: int = 8,
                seed: int = 0, duration_s: float | None = None) -> dict:
    """Per stage of run `run_name` of `fleet` (a `synth.Fleet`): rate, measured metric (the
    run's traces), true metric (median of `n_true` noise draws of the truth), predictive
    median and 90% interval from `n_draws` posterior draws, and the posterior's saturated
    share; plus each metric's rise from the first to the last stage, measured, true and
    predicted. The run's configuration may be unseen (its coefficients then come from the
    hierarchy, as `bayesblis coefficients` gives them)."""
    from pathlib import Path

    from bayesblis.coefficients import deployment_draws
    from bayesblis.io.dataset import ingest_one
    from bayesblis.simulate.results import Draws, run_scenario

    dep = fleet.run_spec(run_name).deployment()
    scenario = fleet.scenario(run_name, duration_s=duration_s)
    cd = deployment_draws(posterior, dep, n_draws=n_draws, seed=seed)
    pred = run_scenario(scenario, Draws.from_coefficient_draws(cd, source="posterior"),
                        seed=seed, deployment=dep)
    true = run_scenario(scenario, fleet.true_draws(cd.config, n_true), seed=seed + 7,
                        deployment=dep)
    path = Path(fleet.configs.loc[fleet.configs["name"] == run_name, "path"].iloc[0])
    requests = ingest_one("otel_run", path).tables["requests"]
    measured = measured_stages(requests, scenario.build_workload().stage)
    stages = []
    for sp, st, sm in zip(pred["stages"], true["stages"], measured):
        row = {"rate_rps": st["rate_rps"], "saturated_share": sp["saturated_share"]}
        for m in CURVE_METRICS:
            row.update({f"{m}_measured": sm[m], f"{m}_true": st[m]["median"], f"{m}_pred": sp[m]["median"],
                        f"{m}_lo": sp[m]["lo"], f"{m}_hi": sp[m]["hi"]})
        stages.append(row)
    return {"run": run_name, "config": cd.config, "seen": bool(cd.seen_config),
            "stages": stages, "rise": {m: rise(stages, m) for m in CURVE_METRICS}}


def rise(stages: list[dict], metric: str) -> dict:
    """Relative change of `metric` from the first to the last stage: measured, true, predicted."""
    first, last = stages[0], stages[-1]
    return {side: last[f"{metric}_{side}"] / first[f"{metric}_{side}"] - 1
            for side in ("measured", "true", "pred")}


def curve_errors(curves: list[dict], metric: str = "itl_mean_s", against: str = "measured") -> dict:
    """Across `stage_curve` results, scored against the `against` figure (measured or
    true): median absolute relative error of the predictive median per stage, share of
    stages inside the 90% interval, and the median rise, measured, true and predicted."""
    errs, inside = [], []
    for c in curves:
        for s in c["stages"]:
            ref = s[f"{metric}_{against}"]
            errs.append(abs(s[f"{metric}_pred"] / ref - 1))
            inside.append(s[f"{metric}_lo"] <= ref <= s[f"{metric}_hi"])
    return {"against": against, "median_abs_error": float(np.median(errs)),
            "coverage": float(np.mean(inside)), "n_stages": len(errs),
            **{f"median_rise_{side}": float(np.median([c["rise"][metric][side] for c in curves]))
               for side in ("measured", "true", "pred")}}


def format_curves(curves: list[dict], metric: str = "itl_mean_s") -> str:
    """A table (ms): run, rate, measured, true, predicted [90%], per stage; the rise per run."""
    head = f"{'run':<44}{'rate':>7}{'measured':>10}{'true':>10}{'predicted [90%]':>28}"
    lines = [head, "-" * len(head)]
    for c in curves:
        label = c["run"][:34] + ("" if c["seen"] else " (held out)")
        for i, s in enumerate(c["stages"]):
            m, t, p, lo, hi = (s[f"{metric}_{k}"] * 1e3 for k in ("measured", "true", "pred", "lo", "hi"))
            lines.append(f"{label if i == 0 else '':<44}{s['rate_rps']:>7.2f}{m:>10.2f}{t:>10.2f}"
                         f"{p:>10.2f} [{lo:.2f}, {hi:.2f}]")
        r = c["rise"][metric]
        lines.append(f"{'':<44}{'rise':>7}{r['measured']:>+10.1%}{r['true']:>+10.1%}{r['pred']:>+10.1%}")
    return "\n".join(lines)
