"""Run a scenario for posterior draws and summarise latency metrics (RESULT.json).

See data_specs/simulation-result.md for the file layout. Every metric is computed per
draw (one engine run per draw), then summarised over draws as
{"mean", "median", "lo", "hi", "ci_prob"} with an equal-tailed interval. Per stage, the
share of draws that *saturate* it (`stage_lag_growth` > `SATURATION_LAG_GROWTH`): near
capacity a few saturating draws blow up the mean, so the median is the point prediction
to read and the saturated share says how likely the cliff is.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from bayesblis import __version__
from bayesblis.constants import CI_PROB
from bayesblis.discrepancy import in_flight, load_excess, metric_widening, widened_interval
from bayesblis.features.alpha import ALPHA_FEATURES
from bayesblis.simulate.engine import (DROP_REASONS, STATUS_OK, EngineRun, deployment_constants,
                                       run_engine)
from bayesblis.simulate.workload import workload_summary

METRICS = ("ttft_mean_s", "ttft_p90_s", "ttft_p99_s", "itl_mean_s", "tpot_mean_s",
           "e2e_mean_s", "e2e_p90_s", "e2e_p99_s", "throughput_tokens_per_s")
RESULT_VERSION = "1"

SATURATION_LAG_GROWTH = 0.05
"""A draw saturates a stage when its completion lag grows faster than this many seconds
per second over the stage's second half (`stage_lag_growth`): the server completes
requests about 5% slower than they arrive, and the queue keeps growing."""
SATURATION_DEFINITION = (
    "a draw saturates a stage when the lag of the k-th completion behind the k-th arrival "
    "grows by more than 0.05 s per s over the stage's second half: (mean lag of the arrivals "
    "in its last quarter - mean lag in its second quarter) / (half the stage duration) > 0.05")


@dataclass
class Draws:
    """Coefficient draws the simulator needs: beta [D, K] (BETA_FEATURES order), alpha
    [D, 4] in µs (ALPHA_FEATURES order), noise_sigma [D], noise_nu [D]."""

    beta: np.ndarray
    alpha: np.ndarray
    noise_sigma: np.ndarray
    noise_nu: np.ndarray
    source: str = "fixed"
    unseen_gpu: str | None = None  # the GPU of posterior draws whose hardware the fit never saw

    def __post_init__(self):
        self.beta = np.atleast_2d(np.asarray(self.beta, float))
        self.alpha = np.atleast_2d(np.asarray(self.alpha, float))
        d = self.beta.shape[0]
        self.noise_sigma = np.broadcast_to(np.asarray(self.noise_sigma, float), (d,)).copy()
        self.noise_nu = np.broadcast_to(np.asarray(self.noise_nu, float), (d,)).copy()
        if self.alpha.shape != (d, len(ALPHA_FEATURES)):
            raise ValueError(f"alpha must be [{d}, {len(ALPHA_FEATURES)}], got {self.alpha.shape}")

    @property
    def n_draws(self) -> int:
        return self.beta.shape[0]

    @classmethod
    def from_coefficient_draws(cls, cd, source: str) -> "Draws":
        gpu = cd.unseen_levels.get("hardware")
        return cls(cd.beta, cd.alpha, cd.noise_sigma, cd.noise_nu, source,
                   None if gpu is None else str(gpu))


def summarize(values, ci_prob: float = CI_PROB, discrepancy_sd: float = 0.0,
              seed: int = 0, spread_scale: float = 1.0) -> dict:
    """Mean, median and equal-tailed interval of per-draw values (NaNs ignored).

    With `discrepancy_sd` > 0 or `spread_scale` != 1 the interval is a prediction interval:
    the draws' spread scaled and widened by the simulator discrepancy
    (`bayesblis.discrepancy.widened_interval`); the posterior-only one is kept as
    ``posterior_lo`` / ``posterior_hi``. Mean and median stay the draws'."""
    v = np.asarray(values, float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return {"mean": None, "median": None, "lo": None, "hi": None, "ci_prob": float(ci_prob)}
    lo, hi = np.quantile(v, [(1 - ci_prob) / 2, (1 + ci_prob) / 2])
    out = {"mean": float(v.mean()), "median": float(np.median(v)), "lo": float(lo),
           "hi": float(hi), "ci_prob": float(ci_prob)}
    if discrepancy_sd > 0 or spread_scale != 1.0:
        out["posterior_lo"], out["posterior_hi"] = out["lo"], out["hi"]
        out["lo"], out["hi"] = widened_interval(v, discrepancy_sd, ci_prob, seed=seed,
                                                scale=spread_scale)
    return out


def summarize_metric(values, metric: str, discrepancy=None, ci_prob: float = CI_PROB,
                     seed: int = 0, stage_load: float | None = None) -> dict:
    """`summarize` with the widening `discrepancy` (a `bayesblis.discrepancy.Discrepancy`
    or None) gives `metric` at `stage_load` requests in flight."""
    sd, scale = metric_widening(discrepancy, metric, stage_load)
    return summarize(values, ci_prob, sd, seed, scale)


def predicted_load(rate_rps, e2e_draws) -> float | None:
    """Requests in flight at `rate_rps` with the draws' median mean E2E (Little's law)."""
    e2e = np.asarray(e2e_draws, float)
    e2e = e2e[np.isfinite(e2e)]
    return in_flight(rate_rps, float(np.median(e2e))) if e2e.size else None


def stage_lag_growth(arrival_s, finish_s, start_s: float, end_s: float) -> float:
    """How fast a run falls behind the arrivals of the stage [start_s, end_s), in seconds
    of lag per second; NaN when the stage's second or last quarter has no arrival.

    `arrival_s`, `finish_s`: every completed request of the run (all stages; client
    arrival and finish). The k-th completion comes ``lag_k = finish_(k) - arrival_(k)``
    after the k-th arrival (both sorted: the horizontal distance between the cumulative
    arrival and completion curves, whatever the service order). The growth is (mean lag_k
    of the arrivals in the stage's last quarter - mean in its second quarter) / (half the
    stage duration): about 0 while the server keeps up (the lag is then about the typical
    E2E), ``lambda / mu - 1`` when it completes mu < lambda requests per second. The first
    quarter is skipped: the lag settles there after the previous stage. Judged on stages
    much longer than a typical E2E (the noise grows with E2E / stage duration).
    """
    arrival = np.sort(np.asarray(arrival_s, float))
    finish = np.sort(np.asarray(finish_s, float))
    quarter_s = (end_s - start_s) / 4
    second = (arrival >= start_s + quarter_s) & (arrival < start_s + 2 * quarter_s)
    last = (arrival >= start_s + 3 * quarter_s) & (arrival < end_s)
    if quarter_s <= 0 or not second.any() or not last.any():
        return float("nan")
    lag_s = finish - arrival
    return float((lag_s[last].mean() - lag_s[second].mean()) / (2 * quarter_s))


def saturated(lag_growth) -> np.ndarray:
    """1.0 where a lag growth exceeds SATURATION_LAG_GROWTH, 0.0 below, NaN if unknown."""
    g = np.asarray(lag_growth, float)
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(g), (g > SATURATION_LAG_GROWTH).astype(float), np.nan)


def saturated_share(flags) -> float | None:
    """Share of draws that saturate among those judged (`saturated` flags); None if none."""
    f = np.asarray(flags, float)
    f = f[np.isfinite(f)]
    return float(f.mean()) if f.size else None


def _lag_growths(run: EngineRun, w) -> list[float]:
    """`stage_lag_growth` of every stage of workload `w` in one run."""
    ok = (run.status == STATUS_OK) & np.isfinite(run.e2e_s)
    arrival_s = w.arrival_s[ok]
    finish_s = arrival_s + run.e2e_s[ok]
    return [stage_lag_growth(arrival_s, finish_s, a, b) for a, b in w.stage_bounds_s]


def request_metrics(run: EngineRun, output_tokens, arrival_s, mask) -> dict:
    """The METRICS of the requests selected by `mask` (ok, not has_error) in one run."""
    sel = mask & (run.status == STATUS_OK) & np.isfinite(run.e2e_s)
    out = {m: np.nan for m in METRICS}
    if not sel.any():
        return out
    e2e, ttft = run.e2e_s[sel], run.ttft_s[sel]
    n_out = output_tokens[sel].astype(float)
    out["ttft_mean_s"] = float(ttft.mean())
    out["ttft_p90_s"], out["ttft_p99_s"] = (float(x) for x in np.quantile(ttft, [0.9, 0.99]))
    out["e2e_mean_s"] = float(e2e.mean())
    out["e2e_p90_s"], out["e2e_p99_s"] = (float(x) for x in np.quantile(e2e, [0.9, 0.99]))
    if n_out.mean() > 1:
        out["itl_mean_s"] = float((e2e.mean() - ttft.mean()) / (n_out.mean() - 1))
    multi = n_out > 1
    if multi.any():
        out["tpot_mean_s"] = float(np.mean((e2e[multi] - ttft[multi]) / (n_out[multi] - 1)))
    span = float(np.max(arrival_s[sel] + e2e) - np.min(arrival_s[sel]))
    if span > 0:
        out["throughput_tokens_per_s"] = float(n_out.sum() / span)
    return out


TTFT_PARTS = ("api_s", "queue_s", "prefill_s", "return_s")
"""The parts of a time to first token, in order (`ttft_parts`)."""


def ttft_parts(arrival_s, queued_s, scheduled_s, first_token_s, ttft_s) -> dict:
    """Per-request TTFT split into its parts (seconds, arrays): ``api_s`` arrival -> queued
    (API server, tokenization), ``queue_s`` queued -> first scheduled, ``prefill_s`` first
    scheduled -> first token (the prefill chunk steps and the first sampled token),
    ``return_s`` the rest of the client-visible TTFT (streaming the token back: in the
    simulator alpha_frontend x the requests decoding then; 0 on a journey trace, whose
    first-token event is the engine's). They add up
    to ``ttft_s``. Works for an `EngineRun` (times from the workload start) and for the
    request table of a journey-traced run (`io.otel`) alike."""
    arrival, queued, scheduled, first, ttft = (np.asarray(x, float) for x in
                                               (arrival_s, queued_s, scheduled_s,
                                                first_token_s, ttft_s))
    return {"api_s": queued - arrival, "queue_s": scheduled - queued,
            "prefill_s": first - scheduled, "return_s": ttft - (first - arrival)}


def _draw_records(w, cfg, constants, draws: Draws, draw_seeds, first: int = 0,
                  n_workers: int | None = None, progress=None) -> list[dict]:
    """One record per draw (in draw order): METRICS of all requests and of each stage,
    each stage's lag growth (`stage_lag_growth`), preemptions, dropped requests, steps,
    busy fraction, and for global draw 0 the drop reasons. `draw_seeds[d]` seeds draw `d`
    of `draws`; `first` is the global index of draws[0] (draws may be a chunk of a larger
    set)."""
    valid = ~w.has_error
    stage_masks = [valid & (w.stage == s) for s in range(w.n_stages)]

    def one(d):
        return run_engine(w, cfg, constants, draws.beta[d], draws.alpha[d],
                          noise_sigma=float(draws.noise_sigma[d]),
                          noise_nu=float(draws.noise_nu[d]), seed=int(draw_seeds[d]))

    workers = max(1, min(int(n_workers or os.cpu_count() or 1), draws.n_draws))
    if workers > 1:
        pool = ThreadPoolExecutor(workers)  # the kernel releases the GIL
        runs = pool.map(one, range(draws.n_draws))
    else:
        pool = None
        runs = (one(d) for d in range(draws.n_draws))
    records = []
    try:
        for d, run in enumerate(runs):
            rec = {"summary": request_metrics(run, w.output_tokens, w.arrival_s, valid),
                   "stages": [request_metrics(run, w.output_tokens, w.arrival_s, m)
                              for m in stage_masks],
                   "lag_growth": _lag_growths(run, w),
                   "cache_hit": [_cache_hit_share(run, w, m) for m in stage_masks],
                   "cache_hit_all": _cache_hit_share(run, w, valid),
                   "preempt": int(run.num_preemptions.sum()),
                   "dropped": int((run.status != STATUS_OK).sum()),
                   "steps": run.n_steps,
                   "busy": run.busy_s / run.end_s if run.end_s > 0 else 0.0}
            if first + d == 0:
                rec["reasons"] = {DROP_REASONS[int(code)]: int(np.sum(run.drop_reason == code))
                                  for code in np.unique(run.drop_reason[run.status != STATUS_OK])}
            records.append(rec)
            if progress is not None:
                progress(first + d)
    finally:
        if pool is not None:
            pool.shutdown()
    return records


def _cache_hit_share(run, w, mask) -> float | None:
    """Share of the prompt tokens of `mask`'s completed requests the simulated prefix cache
    served (evictions included); None without such a request."""
    done = mask & (run.status == STATUS_OK)
    total = float(w.prompt_tokens[done].sum())
    return float(run.cached_prefix_tokens[done].sum()) / total if total > 0 else None


def _hit_summary(shares, ci_prob: float) -> dict | None:
    """`summarize` of per-draw cache hit shares (None where a draw completed nothing)."""
    shares = [v for v in shares if v is not None]
    return summarize(shares, ci_prob) if shares else None


def _draw_chunk(task: dict) -> list[dict]:
    """`_draw_records` of one chunk of draws (a picklable task for `map_tasks`)."""
    return _draw_records(task["workload"], task["config"], task["constants"], task["draws"],
                         task["seeds"], task["first"], n_workers=task["n_workers"])


def run_scenario(scenario, draws: Draws, *, seed: int = 0, max_duration_s: float | None = None,
                 ci_prob: float = CI_PROB, progress=None, deployment=None,
                 n_workers: int | None = None, scheduler: str | None = None,
                 chunk_size: int | None = None, dask_workers: int = 2,
                 keep_draws: bool = False, discrepancy=None) -> dict:
    """Simulate `scenario` once per draw and return the RESULT.json document.

    `discrepancy` (`bayesblis.discrepancy.Discrepancy`, or None for posterior-only
    intervals): widen the intervals of the metrics it calibrates into prediction intervals.

    `keep_draws`: also return every draw's stage metrics under ``per_draw_stages`` (a list
    per stage of {metric: [D values]}; not part of RESULT.json).

    `progress`: optional callable(i) after each draw (e.g. a tqdm update);
    `n_workers`: threads running draws in parallel (default: CPU count; on Dask, per task,
    default 1). `scheduler`: None (this process), 'local' (a LocalCluster of
    `dask_workers` processes) or a Dask address: the draws are split into chunks of
    `chunk_size` (default: about 4 chunks per local worker, at least 1 draw), one task
    per chunk. Draw `d` is seeded by state `d` of `SeedSequence(seed)` whatever the
    chunking, so every path returns the same metrics.
    """
    from bayesblis.distributed import check_scheduler, map_tasks

    check_scheduler(scheduler)
    deployment = deployment or scenario.deployment()
    cfg = scenario.engine_config(deployment)
    w = scenario.build_workload(max_duration_s)
    constants = deployment_constants(deployment)
    n_stage = w.n_stages
    valid = ~w.has_error
    t0 = time.perf_counter()
    draw_seeds = np.random.SeedSequence(seed).generate_state(draws.n_draws)
    if scheduler is None:
        records = _draw_records(w, cfg, constants, draws, draw_seeds, 0, n_workers, progress)
    else:
        size = int(chunk_size or max(1, -(-draws.n_draws // (4 * max(1, dask_workers)))))
        starts = list(range(0, draws.n_draws, size))
        tasks = [{"workload": w, "config": cfg, "constants": constants,
                  "draws": _draw_slice(draws, a, a + size), "seeds": draw_seeds[a:a + size],
                  "first": a, "n_workers": n_workers or 1} for a in starts]
        sizes = [len(t["seeds"]) for t in tasks]
        done = [0]

        def chunk_done(i):  # tasks finish in any order: advance by one chunk's draws
            for _ in range(sizes[i - 1]):
                if progress is not None:
                    progress(done[0])
                done[0] += 1

        chunks = map_tasks(_draw_chunk, tasks, scheduler=scheduler, n_workers=dask_workers,
                           progress=chunk_done)
        records = [rec for chunk in chunks for rec in chunk]
    wall = time.perf_counter() - t0
    per_draw = {"summary": {m: [r["summary"][m] for r in records] for m in METRICS},
                "stages": [{m: [r["stages"][s][m] for r in records] for m in METRICS}
                           for s in range(n_stage)]}
    preempt = [r["preempt"] for r in records]
    dropped = [r["dropped"] for r in records]
    steps = [r["steps"] for r in records]
    busy = [r["busy"] for r in records]
    lag = np.array([r["lag_growth"] for r in records], float).reshape(len(records), n_stage)
    sat = saturated(lag)
    reasons = records[0].get("reasons", {}) if records else {}

    def block(metrics, load):
        return {m: summarize_metric(metrics[m], m, discrepancy, ci_prob, seed, load)
                for m in METRICS}

    fitted = discrepancy.fitted_load if discrepancy is not None else None
    stages, loads = [], []
    for s in range(n_stage):
        sel = w.stage == s
        a, b = w.stage_bounds_s[s]
        rate = float(sel.sum() / (b - a)) if b > a else None
        load = predicted_load(rate, per_draw["stages"][s]["e2e_mean_s"])
        loads.append(load or 0.0)
        st = {"stage": s, "start_s": float(a), "end_s": float(b), "rate_rps": rate,
              "n_requests": int(sel.sum()), "n_excluded_errors": int((sel & ~valid).sum()),
              "in_flight": load, "load_excess": load_excess(load, fitted)}
        st.update(block(per_draw["stages"][s], load))
        st["saturated_share"] = saturated_share(sat[:, s])
        st["lag_growth"] = summarize(lag[:, s], ci_prob)
        st["prefix_cache_hit_share"] = _hit_summary([r["cache_hit"][s] for r in records], ci_prob)
        stages.append(st)
    summary = block(per_draw["summary"], max(loads, default=0.0) or None)  # the busiest stage
    extra = {"per_draw_stages": per_draw["stages"]} if keep_draws else {}
    return {
        **extra,
        "result_version": RESULT_VERSION,
        "summary": summary,
        "stages": stages,
        "workload": workload_summary(w, cfg.block_size),
        "counts": {"n_requests": int(len(w)), "n_excluded_errors": int((~valid).sum()),
                   "n_dropped": int(max(dropped) if dropped else 0), "drop_reasons": reasons,
                   "n_preemptions": summarize(preempt, ci_prob),
                   "n_steps": summarize(steps, ci_prob),
                   "busy_fraction": summarize(busy, ci_prob),
                   "prefix_cache_hit_share": _hit_summary([r["cache_hit_all"] for r in records],
                                                          ci_prob),
                   "saturated_share_any_stage": saturated_share(_any_stage(sat))},
        "metadata": {"scenario": scenario.describe(), "engine": cfg.__dict__,
                     "deployment": _describe(deployment),
                     "coefficients_source": draws.source, "draws": int(draws.n_draws),
                     "discrepancy": discrepancy.to_dict() if discrepancy else None,
                     "sampling_defaults": scenario.sampling_defaults(),
                     "caveats": scenario.caveats(deployment, draws.unseen_gpu),
                     "seed": int(seed), "ci_prob": float(ci_prob),
                     "max_duration_s": max_duration_s, "package_version": __version__,
                     "wall_s": round(wall, 3),
                     "itl_definition": "(mean E2E - mean TTFT) / (mean output tokens - 1) per "
                                       "stage: per generated token (inference-perf's own ITL is "
                                       "per streamed chunk, about half)",
                     "saturation_definition": SATURATION_DEFINITION,
                     "saturation_lag_growth": SATURATION_LAG_GROWTH},
    }


def _any_stage(flags: np.ndarray) -> np.ndarray:
    """Per draw [D, stages] -> [D]: 1 if any stage saturates, else 0 if any was judged, NaN."""
    judged = np.isfinite(flags).any(axis=1)
    return np.where(judged, (np.nan_to_num(flags) > 0).any(axis=1).astype(float), np.nan)


def _draw_slice(draws: Draws, a: int, b: int) -> Draws:
    return Draws(draws.beta[a:b], draws.alpha[a:b], draws.noise_sigma[a:b],
                 draws.noise_nu[a:b], draws.source, draws.unseen_gpu)


def _describe(deployment) -> dict:
    try:
        return deployment.describe()
    except Exception:  # noqa: BLE001 - metadata only
        return {"repr": repr(deployment)}


OPTIONAL_ALPHA = ("alpha_frontend_s",)
"""Alpha coefficients a coefficients file may leave out (then 0 µs): the last ones of
ALPHA_FEATURES, which BLIS's alpha does not have."""


def load_coefficients(path) -> Draws:
    """One fixed draw from a coefficients file (data_specs/coefficients-input.md).

    JSON: {"alpha": {ALPHA_FEATURES name: µs}, "beta": {BETA_FEATURES name: value},
    "noise_sigma": 0.0, "noise_nu": 30.0} (noise optional; beta names missing -> error).
    YAML (BLIS style): `alpha_coeffs` [4] and `beta_coeffs` [len(BETA_FEATURES)] lists in
    ALPHA_FEATURES / BETA_FEATURES order. Files written before `alpha_frontend_s` existed
    (three alpha values; BLIS's own alpha has three) simulate without it (0 µs); before
    `sampling_s` or `gemm_fixed_s` (`features.beta.LATE_FEATURES`), without those (0).
    """
    from pathlib import Path

    from bayesblis.errors import InputError
    from bayesblis.features.beta import BETA_FEATURES, LATE_FEATURES
    from bayesblis.io.text import parse_json_text, parse_yaml_text, read_text_checked

    path = Path(path)
    expected = "coefficients (data_specs/coefficients-input.md)"
    text = read_text_checked(path, expected=expected)
    if path.suffix.lower() in (".yaml", ".yml"):
        data = parse_yaml_text(text, path, expected=expected)
        if not isinstance(data, dict) or "alpha_coeffs" not in data or "beta_coeffs" not in data:
            raise InputError(path, "missing alpha_coeffs/beta_coeffs", field="alpha_coeffs",
                             expected="BLIS-style lists alpha_coeffs and beta_coeffs")
        alpha, beta = data["alpha_coeffs"], data["beta_coeffs"]
        if isinstance(alpha, list) and len(alpha) == len(ALPHA_FEATURES) - len(OPTIONAL_ALPHA):
            alpha = alpha + [0.0] * len(OPTIONAL_ALPHA)
        late = len(BETA_FEATURES) - len(beta) if isinstance(beta, list) else 0
        if 0 < late <= len(LATE_FEATURES):
            beta = beta + [0.0] * late
        for name, vals, n in (("alpha_coeffs", alpha, len(ALPHA_FEATURES)),
                              ("beta_coeffs", beta, len(BETA_FEATURES))):
            if not isinstance(vals, list) or len(vals) != n or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)
                    for v in vals):
                raise InputError(path, f"invalid value {vals!r}", field=name,
                                 expected=f"a list of {n} numbers" + (
                                     f" (or {n - len(OPTIONAL_ALPHA)})" if name == "alpha_coeffs"
                                     else f" (or {n - len(LATE_FEATURES)}-{n - 1})"))
        alpha = np.array(alpha, float)
        beta = np.array(beta, float)
    else:
        data = parse_json_text(text, path, expected=expected)
        if not isinstance(data, dict):
            raise InputError(path, "not a JSON object", expected='{"alpha": {...}, "beta": {...}}')
        vecs = {}
        for key, names in (("alpha", ALPHA_FEATURES), ("beta", BETA_FEATURES)):
            block = data.get(key)
            if not isinstance(block, dict):
                raise InputError(path, "missing or not an object", field=key,
                                 expected=f"{{name: value}} with names {list(names)}")
            block = {**{n: 0.0 for n in (OPTIONAL_ALPHA if key == "alpha" else LATE_FEATURES)}, **block}
            unknown = sorted(set(block) - set(names))
            missing = [n for n in names if n not in block]
            if unknown or missing:
                bad = (unknown or missing)[0]
                raise InputError(path, f"unknown {unknown} / missing {missing} coefficient(s)",
                                 field=f"{key}.{bad}", expected=f"exactly the names {list(names)}")
            for n in names:
                v = block[n]
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
                    raise InputError(path, f"invalid value {v!r}", field=f"{key}.{n}",
                                     expected="a finite number")
            vecs[key] = np.array([float(block[n]) for n in names])
        alpha, beta = vecs["alpha"], vecs["beta"]
    sigma = data.get("noise_sigma", 0.0)
    nu = data.get("noise_nu", 30.0)
    for key, v, low in (("noise_sigma", sigma, 0.0), ("noise_nu", nu, None)):
        if (isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v)
                or (v < low if low is not None else v <= 0)):
            raise InputError(path, f"invalid value {v!r}", field=key,
                             expected="a finite number " + (">= 0" if low is not None else "> 0"))
    return Draws(beta[None, :], alpha[None, :], [float(sigma)], [float(nu)],
                 source=f"coefficients file {path}")


def per_draw_metrics(workload, config, constants, draws: Draws, *, seed: int = 0,
                     n_workers: int | None = None, progress=None) -> dict:
    """Per-draw METRICS of one workload, as arrays (no summary): {metric: float [D]} plus
    `n_dropped` (int [D]), `busy_fraction` [D], `n_steps` (int [D]) and `saturated` [D]
    (1.0 when the draw saturates any stage, 0.0 if not, NaN if no stage could be judged).

    Same engine calls and per-draw noise seeds as `run_scenario` (draw d uses state d of
    `SeedSequence(seed)`), so a caller that builds `workload` and `config` itself (e.g. a
    rate sweep in `bayesblis.plan`) gets the values `run_scenario` would summarise.
    Metrics over requests that completed and are not recorded errors; NaN when none did.
    """
    draw_seeds = np.random.SeedSequence(seed).generate_state(draws.n_draws)
    records = _draw_records(workload, config, constants, draws, draw_seeds, 0, n_workers, progress)
    out = {m: np.array([r["summary"][m] for r in records], float) for m in METRICS}
    out.update(n_dropped=np.array([r["dropped"] for r in records], np.int64),
               busy_fraction=np.array([r["busy"] for r in records], float),
               n_steps=np.array([r["steps"] for r in records], np.int64),
               saturated=_any_stage(saturated(np.array([r["lag_growth"] for r in records],
                                                       float).reshape(len(records), -1))))
    return out
