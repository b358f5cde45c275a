"""Window observations from client-side request traces (arrival, TTFT, E2E, tokens).

No step timings exist in such traces; the batch timeline is reconstructed from the
request intervals themselves (see data_specs/observations.md, "client windows"):

- **decode window** of request r: from its first token (``t_f = arrival + ttft``) to its
  last (``t_e = arrival + e2e``) it emits ``out - 1`` tokens, one per engine step, so
  ``e2e - ttft`` is the sum of ``out - 1`` step times (plus r's per-output-token alpha).
  The steps' batches are the requests decoding at the same time: the number of decoding
  requests ``n(t)`` and the sum of their contexts ``c(t)`` are piecewise constant /
  piecewise linear in time (a request's context grows linearly from prompt + 1 at its first
  token to prompt + out at its last), so their time averages over r's window are exact
  integrals. Requests whose first token falls inside r's window had their prefill there:
  their prompt tokens (less prefix-cache hits) are added to the window's prefill sums.
  Approximation: steps are spread evenly in time inside a window, so a step average equals
  a time average.
- **TTFT window** of request r: ``ttft = alpha_const + alpha_prompt * prompt + 0.5 step``
  (waiting for the step in flight) ``+ 1 step`` (with async scheduling, the step already
  scheduled behind it) ``+ the step(s) that compute r's prefill`` (chunked by the token
  budget) next to the requests decoding at r's arrival. The waited-for steps are priced as
  decode steps of the batch running at r's arrival; an idle server waits for none. Then the
  token is returned through the API server, behind the outputs of the requests decoding
  when it came (``alpha_frontend`` per such request, `features.alpha.decoding_at`). The
  last token pays the same return cost; a decode window omits the difference of the two
  (the batch at its end less the batch at its start, zero on average at a steady load).
  Where the request lands in the in-flight step is uniform; the window records that spread
  (`phase_var`), and `ttft_phase_share` takes it out of the per-step noise the simulator
  adds (it draws the phase itself).

Overlapping windows share steps, so they are not independent observations. Windows are
thinned to at most one per ``min_gap_s`` of decode start (default: the median decode
window), which keeps the posterior from being over-confident about shared steps.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bayesblis.constants import US
from bayesblis.features.alpha import ALPHA_FEATURES, alpha_features, decoding_at
from bayesblis.features.beta import AGGREGATES, BETA_FEATURES, beta_feature_matrix
from bayesblis.io.inference_perf import correct_output_counts, stage_of
from bayesblis.model.priors import BETA_PRIORS

FIT_ON_RECORDED_COUNTS = True
"""Windows use the client's output counts (those with a decode time 1.5x too long per
recorded token re-estimated, their decode windows dropped), not the `max_tokens` an
ignore_eos run generated, which replays use. Fitted on the generated counts (model version
7, 2026-11-26) the held-out-by-experiment E2E error fell from 2.2 to 1.4%, but held out by
model it rose from 2.9 to 4.5% and the quick-tour fit failed its diagnostics on seed 1
(r_hat 1.24, 43 divergences at 1,000 draws): kept off until that is understood
(docs/new-models.md)."""

RESIDUAL_STEP_FRACTION = 0.5
"""Expected share of the in-flight step a new request waits for before it is scheduled."""

ASYNC_LAG_STEPS = 1.0
"""Steps a new request waits for under async scheduling besides the one in flight: the
step scheduled one ahead, before it arrived (simulate/engine.py)."""


def _active_integrals(starts, ends, slope, intercept, query_lo, query_hi):
    """Integrals over [lo, hi] of sum_q 1[start_q < t <= end_q] and of
    sum_q 1[...] (intercept_q + slope_q t), for many query intervals at once."""
    times = np.concatenate([starts, ends])
    d_count = np.concatenate([np.ones_like(starts), -np.ones_like(ends)])
    d_a = np.concatenate([intercept, -intercept])
    d_b = np.concatenate([slope, -slope])
    order = np.argsort(times, kind="stable")
    times, d_count, d_a, d_b = times[order], d_count[order], d_a[order], d_b[order]
    count = np.cumsum(d_count)          # active count on [times[i], times[i+1])
    a_sum = np.cumsum(d_a)
    b_sum = np.cumsum(d_b)
    widths = np.diff(times)
    seg_count = count[:-1] * widths
    seg_lin = a_sum[:-1] * widths + b_sum[:-1] * (times[1:] ** 2 - times[:-1] ** 2) / 2
    cum_count = np.concatenate([[0.0], np.cumsum(seg_count)])
    cum_lin = np.concatenate([[0.0], np.cumsum(seg_lin)])

    def integral(t, cum, level_a, level_b):
        i = np.clip(np.searchsorted(times, t, side="right") - 1, 0, len(times) - 1)
        base = cum[i]
        dt = t - times[i]
        extra = level_a[i] * dt + level_b[i] * (t ** 2 - times[i] ** 2) / 2
        return np.where(t < times[0], 0.0, base + extra)

    zeros = np.zeros_like(count, dtype=float)
    n_int = integral(query_hi, cum_count, count.astype(float), zeros) - \
        integral(query_lo, cum_count, count.astype(float), zeros)
    c_int = integral(query_hi, cum_lin, a_sum, b_sum) - integral(query_lo, cum_lin, a_sum, b_sum)
    return n_int, c_int


def _active_at(starts, ends, slope, intercept, t):
    """Count and context sum of requests active at each time t (sorted-sweep, O(n log n))."""
    eps = 1e-9
    n_int, c_int = _active_integrals(starts, ends, slope, intercept, t - eps, t + eps)
    return n_int / (2 * eps), c_int / (2 * eps)


def cached_prefix_tokens(prompt_tokens, prefix_tokens, block_size: int):
    """Prompt tokens served from the prefix cache: the prefix's full blocks, leaving at
    least one token to compute (vLLM never skips a whole prompt)."""
    full = (np.asarray(prefix_tokens) // block_size) * block_size
    return np.minimum(full, np.asarray(prompt_tokens) - 1).clip(min=0)


def prefill_aggregates(prompt_tokens, cached_tokens, chunk_tokens):
    """Per-request prefill sums over its chunks: tokens, context before, attention pairs,
    chunk count. Pairs do not depend on chunking: sum_{i=cached+1}^{prompt} i."""
    prompt = np.asarray(prompt_tokens, float)
    cached = np.asarray(cached_tokens, float)
    chunk = np.maximum(np.asarray(chunk_tokens, float), 1.0)
    tokens = prompt - cached
    n_chunks = np.ceil(tokens / chunk)
    full = np.floor(tokens / chunk)
    # contexts before each chunk: cached + k*chunk for k = 0..n_chunks-1
    ctx = n_chunks * cached + chunk * n_chunks * (n_chunks - 1) / 2
    pairs = (prompt * (prompt + 1) - cached * (cached + 1)) / 2
    del full
    return {"prefill_tokens": tokens, "prefill_context_tokens": ctx,
            "prefill_attention_pairs": pairs, "num_prefill_reqs": n_chunks}


def client_windows(requests: pd.DataFrame, deployment, *, max_num_batched_tokens: int,
                   block_size: int = 16, prefix_tokens=0, config: str, source: str = "",
                   min_gap_s: float | None = None, seed: int = 0,
                   warmup_s: float = 0.0, async_scheduling: bool = True) -> pd.DataFrame:
    """Decode and TTFT window observations from one client-side request trace.

    `requests` needs arrival_s, ttft_s, e2e_s, prompt_tokens, output_tokens (rows with
    NaN timings, errors, are left out of the windows; they still occupied the server,
    which this approximation cannot see, so stages where more than 1% failed, and stages
    that queue, give no window at all). Miscounted outputs are corrected for the batch
    timeline and give no decode window (io.inference_perf.correct_output_counts, on the
    client's counts: `FIT_ON_RECORDED_COUNTS`). Requests arriving in the first `warmup_s`
    seconds give no window (they stay in the timeline). Returns the observation-table rows.
    """
    counted = requests.drop(columns="max_tokens") if FIT_ON_RECORDED_COUNTS and \
        "max_tokens" in requests else requests
    ok = correct_output_counts(counted).dropna(subset=["ttft_s", "e2e_s"])
    ok = ok[(ok["e2e_s"] > ok["ttft_s"]) & (ok["ttft_s"] > 0) & (ok["output_tokens"] >= 1)]
    if ok.empty:
        return pd.DataFrame()
    arrival = ok["arrival_s"].to_numpy(float)
    prompt = ok["prompt_tokens"].to_numpy(float)
    out = ok["output_tokens"].to_numpy(float)
    t_f = arrival + ok["ttft_s"].to_numpy(float)
    t_e = arrival + ok["e2e_s"].to_numpy(float)
    dur = t_e - t_f
    if np.ndim(prefix_tokens):  # one per row of `requests`
        prefix_tokens = pd.Series(np.asarray(prefix_tokens, float), index=requests.index)[ok.index]
    prefix = np.broadcast_to(np.asarray(prefix_tokens, float), prompt.shape)
    cached = cached_prefix_tokens(prompt, prefix, block_size)

    # Decode context of q at time t in its window: prompt + 1 + (out - 1) (t - t_f) / dur.
    slope = np.where(dur > 0, (out - 1) / np.maximum(dur, 1e-12), 0.0)
    intercept = prompt + 1 - slope * t_f

    n_int, c_int = _active_integrals(t_f, t_e, slope, intercept, t_f, t_e)
    avg_decode = n_int / np.maximum(dur, 1e-12)
    avg_context = c_int / np.maximum(dur, 1e-12)

    chunk = np.maximum(max_num_batched_tokens - avg_decode, 16.0)
    pre = prefill_aggregates(prompt, cached, chunk)
    order = np.argsort(t_f, kind="stable")
    sorted_tf = t_f[order]
    cums = {k: np.concatenate([[0.0], np.cumsum(v[order])]) for k, v in pre.items()}
    lo = np.searchsorted(sorted_tf, t_f, side="right")
    hi = np.searchsorted(sorted_tf, t_e, side="right")
    window_prefill = {k: cums[k][hi] - cums[k][lo] for k in pre}

    rows = []
    dec = (out >= 2) & ~ok["output_count_suspect"].to_numpy(bool)
    n_steps = np.where(dec, out - 1, 0)
    # The window's steps: the other requests' prefill chunks each ride in a step of their
    # own (mixed steps: the decodes plus one average chunk), the rest decode only. Compute
    # is priced on a roofline (features.beta), so spreading the chunks thinly over every
    # step would hide their FLOPs under the weight streaming.
    n_mixed = np.minimum(window_prefill["num_prefill_reqs"], n_steps)
    plain = {"num_decode_reqs": avg_decode, "decode_context_tokens": avg_context,
             **{k: np.zeros_like(avg_decode) for k in window_prefill},
             "offload_blocks": np.zeros_like(avg_decode)}
    mixed = {**plain, **{k: v / np.maximum(n_mixed, 1) for k, v in window_prefill.items()}}
    decode_feats = (beta_feature_matrix(deployment, {k: mixed[k][dec] for k in AGGREGATES})
                    * n_mixed[dec, None]
                    + beta_feature_matrix(deployment, {k: plain[k][dec] for k in AGGREGATES})
                    * (n_steps - n_mixed)[dec, None])
    rows.append(_frame(decode_feats, alpha=np.column_stack([
        np.zeros(dec.sum()), np.zeros(dec.sum()), out[dec] * US, np.zeros(dec.sum())]),
        y=dur[dec], n_steps=n_steps[dec], kind="client_decode_window",
        config=config, source=source, request=ok.index.to_numpy()[dec], start=t_f[dec]))

    # TTFT: residual of the in-flight step (+ the step scheduled behind it, with async
    # scheduling) + the prefill step(s), alongside the decodes running at arrival.
    n_at, c_at = _active_at(t_f, t_e, slope, intercept, arrival)
    running = n_at > 0
    chunk_at = np.maximum(max_num_batched_tokens - n_at, 16.0)
    own = prefill_aggregates(prompt, cached, chunk_at)
    k_steps = own["num_prefill_reqs"]
    prefill_step = {
        "num_decode_reqs": n_at, "decode_context_tokens": c_at,
        **{k: v / k_steps for k, v in own.items()},
        "offload_blocks": np.zeros_like(n_at),
    }
    prefill_step["num_prefill_reqs"] = np.ones_like(n_at)
    residual_step = {k: np.zeros_like(n_at) for k in AGGREGATES}
    residual_step["num_decode_reqs"] = n_at
    residual_step["decode_context_tokens"] = c_at
    f_prefill = beta_feature_matrix(deployment, prefill_step) * k_steps[:, None]
    waited = (RESIDUAL_STEP_FRACTION + (ASYNC_LAG_STEPS if async_scheduling else 0.0)) * running
    f_residual = beta_feature_matrix(deployment, residual_step) * waited[:, None]
    ttft_feats = f_prefill + f_residual
    rows.append(_frame(ttft_feats, alpha=alpha_features(prompt, 0.0, decoding_at(t_f, t_e, t_f)),
        y=ok["ttft_s"].to_numpy(float), n_steps=k_steps + waited,
        kind="client_ttft", config=config, source=source, request=ok.index.to_numpy(),
        start=arrival))

    # where in the in-flight step it landed: its spread, in the window's average steps
    step_ref = beta_feature_matrix(deployment, residual_step) @ REFERENCE_BETA
    average_ref = ttft_feats @ REFERENCE_BETA / np.maximum(k_steps + waited, 1e-12)
    rows[-1]["phase_var"] = np.where(running, PHASE_VARIANCE * (step_ref / average_ref) ** 2, 0.0)
    table = pd.concat(rows, ignore_index=True)
    left_out = np.union1d(queueing_requests(ok), requests_in_error_stages(requests))
    if warmup_s > 0:
        first = float(requests["arrival_s"].min())
        left_out = np.union1d(left_out, ok.index[arrival < first + warmup_s])
    table = table[~table["request_id"].isin(left_out)]
    return thin_windows(table, min_gap_s=min_gap_s, seed=seed)


PHASE_VARIANCE = 1.0 / 12.0
"""Variance, in squared steps, of the share of the in-flight step a new request waits for
(uniform on [0, 1], mean RESIDUAL_STEP_FRACTION). A TTFT window that arrived while requests
decoded records it in column `phase_var`, in squared *average* steps of the window (the
in-flight decode step over the window's average step, both priced with the prior medians
REFERENCE_BETA, squared, times this); other rows: 0 or absent."""

REFERENCE_BETA = np.array([BETA_PRIORS[f]["median"] for f in BETA_FEATURES])
"""Prior-median step coefficients: only to express one step in units of another."""


def ttft_phase_share(obs: pd.DataFrame, steps_s, mean_s) -> float:
    """How much of a configuration's step-noise variance (``sigma_step^2``; the likelihood's
    relative variance of an n-step window is ``sigma_step^2 / n``) its TTFT windows owe to
    where each request landed in the in-flight step, which the simulator draws itself: the
    median, over the rows with a `phase_var`, of ``n x phase_var x (average step / window
    mean)^2``. `obs`: the configuration's observation rows; `steps_s`, `mean_s`: their step
    part and whole expected duration under the fitted coefficients. 0 without such rows
    (OTEL-traced data, or tables written before the column existed)."""
    if "phase_var" not in obs:
        return 0.0
    phase = obs["phase_var"].fillna(0.0).to_numpy(float)
    mean = np.asarray(mean_s, float)
    busy = (phase > 0) & (mean > 0)
    if not busy.any():
        return 0.0
    n = obs["n_steps"].to_numpy(float)[busy]
    per_step = np.asarray(steps_s, float)[busy] / n
    return float(np.median(n * phase[busy] * (per_step / mean[busy]) ** 2))


QUEUEING_TTFT_RATIO = 10.0
"""A stage whose median TTFT exceeds this many median per-token decode times is queueing
and gives no windows: its TTFTs are waits in the queue, which only the simulator can
explain, and its server runs at its limits (every sequence slot taken, KV cache near full,
preemption by recompute), so a request's decode window may hold steps in which it was
preempted rather than decoding: the one-token-per-step count no longer holds."""


def queueing_requests(requests: pd.DataFrame) -> np.ndarray:
    """Index of requests in stages that queue (overloaded), by the rule above."""
    per_token = (requests["e2e_s"] - requests["ttft_s"]) / (requests["output_tokens"] - 1).clip(lower=1)
    stage = stage_of(requests)
    ratio = requests["ttft_s"].groupby(stage).median() / per_token.groupby(stage).median()
    overloaded = ratio[ratio > QUEUEING_TTFT_RATIO].index
    return requests.index[stage.isin(overloaded)].to_numpy()


ERROR_SHARE_LIMIT = 0.01
"""A stage where more than this share of requests failed gives no windows (see below)."""


def requests_in_error_stages(requests: pd.DataFrame) -> np.ndarray:
    """Index of requests in stages where more than ERROR_SHARE_LIMIT of requests failed.

    A failed request (client timeout) has no timings, yet the server kept decoding it until
    it noticed the disconnect: the batch timeline reconstructed from the visible requests
    undercounts such a stage's batches, and its windows would blame the visible batch for
    the time the invisible one took. (In the shared real runs: three overloaded
    `reasoning` runs with 34-85% failed requests; the simulator still predicts them.)"""
    if "has_error" not in requests:
        return np.array([], dtype=requests.index.dtype)
    stage = stage_of(requests)
    share = requests["has_error"].astype(bool).groupby(stage).mean()
    failing = share[share > ERROR_SHARE_LIMIT].index
    return requests.index[stage.isin(failing)].to_numpy()


def _frame(beta_feats, *, alpha, y, n_steps, kind, config, source, request, start):
    frame = pd.DataFrame(beta_feats, columns=[f"f_{f}" for f in BETA_FEATURES])
    for j, name in enumerate(ALPHA_FEATURES):
        frame[f"a_{name}"] = alpha[:, j]
    frame["y_s"] = y
    frame["n_steps"] = n_steps
    frame["kind"] = kind
    frame["config"] = config
    frame["source"] = source
    frame["request_id"] = request
    frame["window_start_s"] = start
    return frame


TTFT_GAP_S = 2.0
"""Default spacing of kept TTFT windows. A TTFT spans only ~2.5 steps of the batch running
at its arrival (async scheduling), but TTFTs far outnumber decode windows: at one per
0.5 s they were 87% of a fit's rows, and their model's approximations (the in-flight step
is priced as an average decode step; other prefills in the waited-for steps are ignored)
then steered the step coefficients every configuration shares. One per 2 s, measured
leaving one model out (seeds 1 / 2): E2E 7.5 / 11.7% -> 2.8 / 8.8%, TTFT 8.9 / 7.2% -> 5.9 /
6.5% (docs/accuracy.md, "What shapes the model on these runs")."""


def thin_windows(table: pd.DataFrame, *, min_gap_s: float | None = None,
                 seed: int = 0) -> pd.DataFrame:
    """Keep, per kind, windows whose starts are at least `min_gap_s` apart (default: the
    kind's median window length for decode windows, one TTFT per TTFT_GAP_S), so that
    kept windows share few steps."""
    kept = []
    for kind, group in table.groupby("kind", sort=False):
        group = group.sort_values("window_start_s")
        gap = min_gap_s
        if gap is None:
            gap = float(np.median(group["y_s"])) if "decode" in kind else TTFT_GAP_S
        starts = group["window_start_s"].to_numpy()
        keep = np.zeros(len(group), bool)
        next_ok = -np.inf
        for i, t in enumerate(starts):
            if t >= next_ok:
                keep[i] = True
                next_ok = t + gap
        kept.append(group[keep])
    return pd.concat(kept, ignore_index=True) if kept else table.iloc[:0]


WARMUP_S = 20.0
"""Seconds at the start of a client-traced run whose requests give no window (fit and
calibration alike). In the 12 shared runs that start below capacity, the first ~100
requests (15-20 s) ran up to 2.3x slower per output token (11 of the 12) and with 1.2-18x
the steady TTFT than the same stage later: most likely a cold server, not the deployment's
steady speed. Calibrating on the first 50 requests taught the calibration that slowness
(held-out E2E off by 31%, against 7% with no calibration at all); in the fit, skipping them
took leave-one-model-out E2E from 5.2% to 3.5% (docs/history.md). Their requests still
occupy the batch timeline of the windows after them."""


def client_observations(source, deployment) -> pd.DataFrame:
    """Observation rows of an ingested inference-perf source (bayesblis.io.dataset.Source),
    without the windows of its first WARMUP_S seconds (a source cut by
    `calibrate.truncate_source` carries its own span, which `calibration_data` applies)."""
    profile = (getattr(source, "extra", {}) or {}).get("profile", {}) or {}
    shared = (profile.get("data", {}) or {}).get("shared_prefix", {}) or {}
    return source_windows(source, deployment, source.tables["requests"],
                          float(shared.get("system_prompt_len", 0)))


def source_windows(source, deployment, requests, shared_prefix_tokens) -> pd.DataFrame:
    """`client_windows` of a source's client-side request table with its settings: each
    request shares `shared_prefix_tokens` (one number or one per row) with the cache, a
    prompt sent before is cached whole (io/prompt_reuse.py); no windows in the warm-up."""
    from bayesblis.io.prompt_reuse import repeated_prompts
    from bayesblis.model.data import config_row

    settings = source.settings
    prefix = 0
    if settings.get("enable_prefix_caching", True):
        _, repeat = repeated_prompts(requests)
        prefix = np.where(repeat, requests["prompt_tokens"].to_numpy(float), shared_prefix_tokens)
    return client_windows(requests, deployment,
                          max_num_batched_tokens=int(settings.get("max_num_batched_tokens") or 2048),
                          block_size=int(settings.get("block_size") or 16),
                          prefix_tokens=prefix, config=config_row(deployment)["config"],
                          source=source.name,
                          warmup_s=0.0 if "calibration_windows" in source.meta else WARMUP_S,
                          async_scheduling=bool(settings.get("async_scheduling", True)))
