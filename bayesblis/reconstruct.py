"""Teacher-forced step batches from OTEL journey events, and window observations.

`journey_batches` rebuilds every engine step's batch aggregates (features.beta.AGGREGATES)
from the journey events of the traced requests (data_specs/observations.md, the format
doc's "Batch composition from journey events alone"):

1. Each SCHEDULED (FIRST or RESUME) opens an active interval of its request; PREEMPTED@P
   closes it at P-1, FINISHED@D at D (inclusive).
2. An interval starts with a *chunk phase* (prompt tokens computed, possibly over
   several steps under chunked prefill) and continues with a *decode phase* (one token
   per step). The chunk phase ends at FIRST_TOKEN when the interval holds it. A RESUME
   after the first token recomputes prompt + generated tokens (vLLM preemption is by
   recompute); its length in steps follows from the token counts (steps of the interval
   minus tokens produced in it, plus one).
3. A chunk phase of one step gets its exact token count. Multi-step chunk phases share
   `max_num_batched_tokens` minus the step's decodes greedily, oldest interval first
   (vLLM V1 FCFS: running requests in admission order, then waiting ones); the last step
   of a phase that ends with a produced token gets the remainder.
4. Decode context = tokens in the KV cache before the step (prompt + tokens generated
   before it - 1; the new token's own KV write is counted by `num_decode_reqs`), the
   convention of `features.beta` and the simulator.

Everything but the chunk sharing is vectorized over intervals (difference arrays onto
the step grid); the chunk sharing is a compiled loop over the chunk phases' steps.

Window observations (`step_gap_windows`, `journey_decode_windows`,
`journey_ttft_windows`, `alpha_windows`) turn measured durations into rows of the model's
observation table (bayesblis/model/data.py): `y_s`, `n_steps`, summed beta features
`f_*`, alpha features `a_*`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numba as nb
import numpy as np
import pandas as pd

from bayesblis.constants import US
from bayesblis.features.alpha import ALPHA_FEATURES, decoding_at
from bayesblis.features.beta import AGGREGATES, BETA_FEATURES, beta_feature_matrix

OK_FINISH = ("stopped", "length", "finished")
"""Finish statuses of requests that ran to completion (not aborted)."""

STEP_COLUMNS = (*AGGREGATES, "num_traced_reqs", "empty", "exact", "uncertain", "idle_after",
                "sampled", "summary_match", "from_snapshot")
"""Columns of `StepBatches.table` (index: step_id)."""

OBS_COLUMNS = ("config", "kind", "n_steps", "y_s", *(f"f_{f}" for f in BETA_FEATURES),
               *(f"a_{a}" for a in ALPHA_FEATURES), "source", "first_step", "last_step", "request_id")
"""Columns of an observation table, in order (data_specs/observations.md)."""

KINDS = ("step_gap", "decode_window", "queue_to_first_token", "arrival_to_queue", "post_decode")
"""Observation kinds produced from OTEL traces."""

FIT_KINDS = tuple(k for k in KINDS if k != "queue_to_first_token")
"""Kinds the demo and the synthetic-fleet checks fit. `queue_to_first_token` windows are
left out: they also hold the rest of the step during which the request queued (a known
approximation of the reconstruction, +20-35% on short windows), which would bias the
coefficients."""

_RANK = {"QUEUED": 0, "SCHEDULED": 1, "FIRST_TOKEN": 2, "PREEMPTED": 3, "FINISHED": 4}


@dataclass
class StepBatches:
    """Reconstructed per-step batch aggregates.

    `table` is indexed by step_id (1..last step seen) with the AGGREGATES columns, then:
    `num_traced_reqs` (traced requests with tokens in the step, journey reconstruction),
    `empty` (no reconstructed work), `exact` (no approximated chunk phase touches the
    step), `uncertain` (a traced request with an incomplete journey may be active),
    `idle_after` (the engine may have idled between this step and the next), `sampled`
    (the step has a BATCH_SUMMARY), `summary_match` (sampled steps: the summary's
    request and token counts equal the reconstruction's; True elsewhere),
    `from_snapshot` (aggregates taken from REQUEST_SNAPSHOTs).
    `summary` holds counts (intervals, inconsistencies, snapshot checks).
    """

    table: pd.DataFrame
    summary: dict = field(default_factory=dict)

    @property
    def n_steps(self) -> int:
        return len(self.table)

    def aggregates(self) -> pd.DataFrame:
        """The AGGREGATES columns only."""
        return self.table[list(AGGREGATES)]

    def features(self, deployment) -> np.ndarray:
        """Beta features [n_steps, len(BETA_FEATURES)] (s) of every step, in table order."""
        return beta_feature_matrix(deployment, self.aggregates())

    def cumulative_features(self, deployment) -> np.ndarray:
        """C[k] = summed features of steps 1..k (row 0 = zeros); C[j] - C[i-1] is the
        sum over steps i..j. Rows are step ids (the table starts at step 1)."""
        f = self.features(deployment)
        out = np.zeros((len(f) + 1, f.shape[1]))
        np.cumsum(f, axis=0, out=out[1:])
        return out


# ---------------------------------------------------------------------------------------
# chunk sharing (compiled)
# ---------------------------------------------------------------------------------------

@nb.njit(cache=True)
def _share_chunks(a, b, tokens, ctx0, forced, base, p_tok, p_ctx, p_pairs, n_p, bad):
    """Allocate each chunk phase's tokens over its steps, intervals in age order.

    Before its last step a phase takes min(avail, remaining) (keeping >= 1 token for the
    last step when `forced`); at the last step a forced phase takes the remainder.
    `bad[i]` is set when the data contradict the greedy rule (a forced phase would have
    finished early, or its remainder exceeds the free budget).
    """
    used = np.zeros(base.shape[0])
    for i in range(a.shape[0]):
        rem = tokens[i]
        ctx = ctx0[i]
        if rem <= 0:
            continue
        for s in range(a[i], b[i] + 1):
            avail = base[s] - used[s]
            if avail < 0.0:
                avail = 0.0
            if s == b[i] and forced[i]:
                x = rem
                if x > avail + 1e-9:
                    bad[i] = True
            else:
                cap = rem - 1.0 if forced[i] else rem
                if forced[i] and avail >= rem:
                    bad[i] = True
                x = avail if avail < cap else cap
                if x < 0.0:
                    x = 0.0
            if x > 0.0:
                used[s] += x
                p_tok[s] += x
                p_ctx[s] += ctx
                p_pairs[s] += x * ctx + x * (x + 1.0) / 2.0
                n_p[s] += 1.0
                ctx += x
                rem -= x
            if rem <= 0.0:
                break


# ---------------------------------------------------------------------------------------
# journey -> intervals
# ---------------------------------------------------------------------------------------

def _int_col(df, col, fill=0) -> np.ndarray:
    s = df[col]
    if isinstance(s.dtype, pd.api.extensions.ExtensionDtype) or s.dtype == object:
        return pd.to_numeric(s, errors="coerce").fillna(fill).to_numpy(np.float64)
    return s.fillna(fill).to_numpy(np.float64)


def _str_col(df, col) -> np.ndarray:
    return df[col].astype(object).where(df[col].notna(), "").astype(str).to_numpy()


def _bincount(idx, weights, n) -> np.ndarray:
    if len(idx) == 0:
        return np.zeros(n)
    return np.bincount(idx, weights=weights, minlength=n)[:n].astype(np.float64)


def _range_add(n, lo, hi, w=None) -> np.ndarray:
    """Sum over ranges [lo, hi] (inclusive, clipped to 0..n-1) of weight w, per index."""
    lo = np.asarray(lo, np.int64)
    hi = np.asarray(hi, np.int64)
    w = np.ones(len(lo)) if w is None else np.asarray(w, np.float64)
    keep = hi >= lo
    lo, hi, w = np.clip(lo[keep], 0, n), np.clip(hi[keep] + 1, 0, n), w[keep]
    d = _bincount(lo, w, n + 1) - _bincount(hi, w, n + 1)
    return np.cumsum(d)[:n]


def _intervals(je: pd.DataFrame):
    """Per request-interval arrays from the journey events (see module doc)."""
    etype = _str_col(je, "event_type")
    rid_codes, rid_names = pd.factorize(je["request_id"].astype(str), sort=False)
    step = je["step"].to_numpy(np.int64)
    ts = je["ts_s"].to_numpy(np.float64)
    rank = np.array([_RANK.get(t, 5) for t in etype], np.int64)
    order = np.lexsort((rank, ts, step, rid_codes))
    etype, rid, step, ts = etype[order], rid_codes[order], step[order], ts[order]
    pdone = _int_col(je, "prefill_done_tokens")[order]
    ptotal = _int_col(je, "prefill_total_tokens")[order]
    ddone = _int_col(je, "decode_done_tokens")[order]
    skind = _str_col(je, "schedule_kind")[order]
    fstatus = _str_col(je, "finish_status")[order]
    n_req = len(rid_names)

    prompt = np.zeros(n_req)
    np.maximum.at(prompt, rid, ptotal)
    is_open = etype == "SCHEDULED"
    is_close = (etype == "PREEMPTED") | (etype == "FINISHED")
    is_ft = etype == "FIRST_TOKEN"
    open_pos = np.flatnonzero(is_open)
    n_iv = len(open_pos)
    iv_of = np.cumsum(is_open) - 1                       # interval id of every event
    valid = iv_of >= 0
    valid[valid] &= rid[open_pos[iv_of[valid]]] == rid[valid]

    def first_in(mask):
        pos = np.flatnonzero(mask & valid)
        ids, first = np.unique(iv_of[pos], return_index=True)
        out = np.full(n_iv, -1, np.int64)
        out[ids] = pos[first]
        return out

    close_pos = first_in(is_close)
    ft_pos = first_in(is_ft)
    # a FIRST_TOKEN after the interval's close does not belong to it
    ft_pos[(close_pos >= 0) & (ft_pos > close_pos)] = -1

    # cached prefix of a request at its first admission (prefill.done_tokens at SCHEDULED FIRST)
    first_open = np.full(n_req, -1, np.int64)
    r_open = rid[open_pos]
    uniq_r, first_idx = np.unique(r_open, return_index=True)
    first_open[uniq_r] = open_pos[first_idx]
    cached0 = np.where(first_open >= 0, pdone[np.maximum(first_open, 0)], 0.0)

    iv = {
        "req": r_open, "a": step[open_pos], "open_ts": ts[open_pos],
        # a SCHEDULED that is not the request's first is a resume (schedule.kind may be absent)
        "resume": (skind[open_pos] == "RESUME") | (open_pos != first_open[r_open]),
        "k": ddone[open_pos], "pdone_open": pdone[open_pos],
        "close_pos": close_pos, "ft_pos": ft_pos,
    }
    req = {"names": np.asarray(rid_names, dtype=object), "prompt": prompt, "cached0": cached0}
    ev = {"etype": etype, "rid": rid, "step": step, "ts": ts, "pdone": pdone, "ddone": ddone,
          "status": fstatus}
    return iv, req, ev


def journey_batches(trace, max_num_batched_tokens: int, *, offload=None,
                    snapshots: str = "override") -> StepBatches:
    """Rebuild every step's batch aggregates from the journey events of `trace`.

    `trace`: an `io.otel.OtelTrace` (or any object with `journey_events`, `requests`,
    `steps`, `snapshots` DataFrames). `offload`: KV blocks moved GPU<->CPU per step (a
    Series indexed by step, e.g. `KvEvents.offload_blocks_per_step()`), or None (0).
    `snapshots`: 'override' (default) replaces a step's aggregates by the exact ones
    computed from its REQUEST_SNAPSHOTs (they list every running request, traced or
    not); 'check' only compares; 'ignore'.
    """
    if snapshots not in ("override", "check", "ignore"):
        raise ValueError("snapshots must be 'override', 'check' or 'ignore'")
    M = float(max_num_batched_tokens)
    if not M >= 1:
        raise ValueError("max_num_batched_tokens must be >= 1")
    je = trace.journey_events
    steps_df = trace.steps
    snaps = getattr(trace, "snapshots", None)
    last = 0
    if len(je):
        last = max(last, int(je["step"].max()))
    if steps_df is not None and len(steps_df):
        last = max(last, int(steps_df["step_id"].max()))
    if snaps is not None and len(snaps):
        last = max(last, int(snaps["step_id"].max()))
    n = last + 1                                  # grid index = step id; index 0 unused
    summary: dict = {"n_requests": 0, "n_intervals": 0, "n_chunk_phases": 0,
                     "n_multi_step_chunks": 0, "n_inconsistent_chunks": 0,
                     "n_incomplete_requests": 0, "n_steps": last}

    p_tok, p_ctx, p_pairs, n_p = (np.zeros(n) for _ in range(4))
    n_d = np.zeros(n)
    d_ctx = np.zeros(n)
    inexact = np.zeros(n)
    uncertain = np.zeros(n)

    if len(je):
        iv, req, ev = _intervals(je)
        summary["n_requests"] = len(req["names"])
        close_pos = iv["close_pos"]
        has_close = close_pos >= 0
        cp = np.maximum(close_pos, 0)
        close_pre = has_close & (ev["etype"][cp] == "PREEMPTED")
        e = np.where(close_pre, ev["step"][cp] - 1, ev["step"][cp])
        close_dd = ev["ddone"][cp]
        close_pd = ev["pdone"][cp]
        a = iv["a"]
        r = iv["req"]
        prompt = req["prompt"][r]
        k = iv["k"]
        has_ft = iv["ft_pos"] >= 0
        ft_step = ev["step"][np.maximum(iv["ft_pos"], 0)]
        ctx0 = np.where(iv["resume"], req["cached0"][r], iv["pdone_open"])
        L = e - a + 1
        ok = has_close & (L >= 1)

        # incomplete journeys: a request scheduled but never closed may run anywhere after
        # its admission (conservatively: to the end of the trace)
        open_end = ~has_close
        summary["n_incomplete_requests"] = int(len(np.unique(r[open_end])))
        uncertain += _range_add(n, a[open_end], np.full(open_end.sum(), n - 1))

        # chunk phase [a, b] and decode phase [b + 1, e]
        b = np.full(len(a), -1, np.int64)
        T = np.zeros(len(a))
        forced = np.zeros(len(a), bool)
        dec_ctx = np.zeros(len(a))
        approx = np.zeros(len(a), bool)
        # (1) interval holds FIRST_TOKEN: prefill (or re-prefill) up to F
        m1 = ok & has_ft
        b[m1] = ft_step[m1]
        T[m1] = prompt[m1] - ctx0[m1]
        forced[m1] = True
        dec_ctx[m1] = prompt[m1]
        approx[m1 & iv["resume"]] = True            # recompute start after preemption estimated
        # (2) resume after the first token: recompute prompt + k tokens, c steps
        m2 = ok & ~has_ft & iv["resume"] & (k > 0)
        produced = close_dd - k
        c = L - produced + 1
        done2 = m2 & (c <= L)
        c_cl = np.clip(c, 1, None)
        b[done2] = a[done2] + c_cl[done2] - 1
        T[m2] = prompt[m2] + k[m2] - ctx0[m2]
        forced[done2] = True
        dec_ctx[done2] = prompt[done2] + k[done2]
        b[m2 & ~done2] = e[m2 & ~done2]            # recompute cut short by a new preemption
        approx[m2] = True
        approx[m2 & (c < 1)] = True
        # (3) no token in the interval and nothing generated before: prefill only
        m3 = ok & ~has_ft & ~m2
        b[m3] = e[m3]
        T[m3] = close_pd[m3] - ctx0[m3]
        first3 = m3 & ~iv["resume"] & close_pre     # first admission preempted mid-prefill: exact
        forced[first3] = True
        approx[m3 & ~first3] = True
        T = np.maximum(T, 0)

        summary["n_intervals"] = int(ok.sum())

        # decodes: difference arrays (count and context intercept)
        d0 = b + 1
        dm = ok & (e >= d0)
        d0m, d1m = d0[dm], e[dm]
        n_d += _range_add(n, d0m, d1m)
        d_ctx += _range_add(n, d0m, d1m, dec_ctx[dm] - d0m) + np.arange(n) * _range_add(n, d0m, d1m)
        n_d_only = n_d.copy()

        # chunk phases, oldest first: (open step, open ts, resumed first, request order)
        cm = ok & (T > 0) & (b >= a)
        summary["n_chunk_phases"] = int(cm.sum())
        summary["n_multi_step_chunks"] = int((cm & (b > a)).sum())
        idx = np.flatnonzero(cm)
        queued_first = _first_ts(ev, "QUEUED", len(req["names"]))
        order = np.lexsort((queued_first[r[idx]], ~iv["resume"][idx], iv["open_ts"][idx], a[idx]))
        idx = idx[order]
        base = M - n_d_only
        bad = np.zeros(len(idx), np.bool_)
        _share_chunks(a[idx].astype(np.int64), b[idx].astype(np.int64), T[idx].astype(np.float64),
                      ctx0[idx].astype(np.float64), forced[idx], base.astype(np.float64),
                      p_tok, p_ctx, p_pairs, n_p, bad)
        summary["n_inconsistent_chunks"] = int(bad.sum())
        flag = np.zeros(len(a), bool)
        flag[idx[bad]] = True
        flag |= approx & cm
        inexact += _range_add(n, a[flag], b[flag])
        carry = _carry(trace, n, req, ev)
        idle_after = _idle_after(trace, n, carry, ev)
    else:
        idle_after = np.ones(n, bool)

    table = pd.DataFrame({
        "prefill_tokens": p_tok, "prefill_context_tokens": p_ctx, "prefill_attention_pairs": p_pairs,
        "num_prefill_reqs": n_p, "num_decode_reqs": n_d, "decode_context_tokens": d_ctx,
        "offload_blocks": np.zeros(n),
    }, index=pd.RangeIndex(n, name="step_id"))
    table["num_traced_reqs"] = (n_p + n_d).astype(np.int64)
    summary["n_offload_steps_outside"] = 0
    if offload is not None and len(offload):
        off = pd.Series(offload)
        inside = (off.index >= 1) & (off.index < n)
        summary["n_offload_steps_outside"] = int((~inside).sum())
        off = off[inside]
        table.loc[off.index.astype(np.int64), "offload_blocks"] = off.to_numpy(np.float64)
    table["empty"] = table["num_traced_reqs"] == 0
    table["exact"] = inexact == 0
    table["uncertain"] = uncertain > 0
    table["idle_after"] = idle_after
    table["sampled"] = False
    table["summary_match"] = True
    table["from_snapshot"] = False

    if steps_df is not None and len(steps_df):
        sid = steps_df["step_id"].to_numpy(np.int64)
        table.loc[sid, "sampled"] = True
        s_reqs = steps_df["num_prefill_reqs"].to_numpy(np.float64) + steps_df["num_decode_reqs"].to_numpy(np.float64)
        s_tok = steps_df["scheduled_tokens"].to_numpy(np.float64)
        r_reqs = table.loc[sid, "num_traced_reqs"].to_numpy(np.float64)
        r_tok = (table.loc[sid, "prefill_tokens"] + table.loc[sid, "num_decode_reqs"]).to_numpy(np.float64)
        known = (s_reqs >= 0) & (s_tok >= 0)          # -1 = attribute absent in the trace
        match = ~known | ((s_reqs == r_reqs) & (np.abs(s_tok - r_tok) < 0.5))
        table.loc[sid, "summary_match"] = match
        summary["n_sampled_steps"] = int(len(sid))
        summary["n_summary_mismatch"] = int((~match).sum())
    else:
        summary["n_sampled_steps"] = 0
        summary["n_summary_mismatch"] = 0

    summary["n_snapshot_steps"] = 0
    summary["n_snapshot_mismatch"] = 0
    if snapshots != "ignore" and snaps is not None and len(snaps):
        exact_agg = snapshot_aggregates(snaps)
        steps_s = exact_agg.index.to_numpy(np.int64)
        cols = [c for c in AGGREGATES if c != "offload_blocks"]
        rec = table.loc[steps_s, cols].to_numpy(np.float64)
        ref = exact_agg[cols].to_numpy(np.float64)
        mism = ~np.all(np.isclose(rec, ref, rtol=1e-9, atol=1e-6), axis=1)
        summary["n_snapshot_steps"] = int(len(steps_s))
        summary["n_snapshot_mismatch"] = int(mism.sum())
        summary["snapshot_mismatch_steps"] = [int(s) for s in steps_s[mism][:20]]
        if snapshots == "override":
            table.loc[steps_s, cols] = ref
            table.loc[steps_s, "from_snapshot"] = True
            table.loc[steps_s, "empty"] = (ref[:, AGGREGATES.index("num_prefill_reqs")]
                                           + ref[:, AGGREGATES.index("num_decode_reqs")]) == 0
    table = table.iloc[1:]
    return StepBatches(table=table, summary=summary)


def _first_ts(ev, etype, n_req) -> np.ndarray:
    out = np.full(n_req, np.inf)
    m = ev["etype"] == etype
    np.minimum.at(out, ev["rid"][m], ev["ts"][m])
    return out


def _carry(trace, n, req, ev) -> np.ndarray:
    """Requests in the engine after step s that were queued before step s began
    (QUEUED step < s and not finished at s): work that makes step s+1 run at once."""
    q = np.full(len(req["names"]), -1, np.int64)
    m = ev["etype"] == "QUEUED"
    q[ev["rid"][m]] = ev["step"][m]
    # requests without QUEUED: from their first event
    first = np.full(len(req["names"]), np.iinfo(np.int64).max)
    np.minimum.at(first, ev["rid"], ev["step"])
    q = np.where(q >= 0, q, first)
    fin = np.full(len(req["names"]), n - 1 + 1, np.int64)      # never finished: to the end
    mf = ev["etype"] == "FINISHED"
    fin[ev["rid"][mf]] = ev["step"][mf]
    return _range_add(n, q + 1, fin - 1)


def _idle_after(trace, n, carry, ev) -> np.ndarray:
    """True where the engine may have idled between step s and s+1: no carried-over
    work and the next request queued after the step's last token (or unknown)."""
    idle = carry <= 0
    if not idle.any():
        return idle
    done = (ev["etype"] == "FIRST_TOKEN") | ((ev["etype"] == "FINISHED") & np.isin(ev["status"], OK_FINISH))
    end_est = np.full(n, -np.inf)
    st = ev["step"][done]
    keep = st < n
    np.maximum.at(end_est, st[keep], ev["ts"][done][keep])
    trig = np.full(n, np.inf)
    mq = ev["etype"] == "QUEUED"
    sq = ev["step"][mq]
    keep = sq < n
    np.minimum.at(trig, sq[keep], ev["ts"][mq][keep])
    busy = np.isfinite(end_est) & np.isfinite(trig) & (trig < end_est)
    return idle & ~busy


def snapshot_aggregates(snapshots: pd.DataFrame) -> pd.DataFrame:
    """Exact batch aggregates of the steps that carry REQUEST_SNAPSHOTs (index step_id).

    A request with `scheduled_tokens` == 1, output tokens > 0 and `num_computed_tokens`
    == prompt + output - 1 decodes (context = num_computed_tokens); any other request
    with scheduled tokens computes a chunk of that many tokens after
    `num_computed_tokens` (prefill, or recompute after preemption).
    """
    s = snapshots
    sched = s["scheduled_tokens"].to_numpy(np.float64)
    comp = s["num_computed_tokens"].to_numpy(np.float64)
    prompt = s["num_prompt_tokens"].to_numpy(np.float64)
    out = s["num_output_tokens"].to_numpy(np.float64)
    dec = (sched == 1) & (out > 0) & (comp == prompt + out - 1)
    chunk = (sched > 0) & ~dec
    df = pd.DataFrame({
        "step_id": s["step_id"].to_numpy(np.int64),
        "prefill_tokens": np.where(chunk, sched, 0.0),
        "prefill_context_tokens": np.where(chunk, comp, 0.0),
        "prefill_attention_pairs": np.where(chunk, sched * comp + sched * (sched + 1) / 2, 0.0),
        "num_prefill_reqs": chunk.astype(float),
        "num_decode_reqs": dec.astype(float),
        "decode_context_tokens": np.where(dec, comp, 0.0),
    })
    return df.groupby("step_id").sum()


# ---------------------------------------------------------------------------------------
# window observations
# ---------------------------------------------------------------------------------------

def _empty_obs() -> pd.DataFrame:
    return _frame({})


def _frame(cols: dict, n: int | None = None) -> pd.DataFrame:
    """An observation table with every OBS_COLUMNS column (missing numeric ones = 0)."""
    if n is None:
        n = len(next(iter(cols.values()))) if cols else 0
    out = {}
    for c in OBS_COLUMNS:
        if c in cols:
            out[c] = cols[c]
        elif c.startswith(("f_", "a_")):
            out[c] = np.zeros(n)
        elif c in ("first_step", "last_step"):
            out[c] = pd.array([pd.NA] * n, dtype="Int64")
        elif c == "n_steps":
            out[c] = np.zeros(n, np.int64)
        elif c == "y_s":
            out[c] = np.zeros(n)
        else:
            out[c] = pd.array([None] * n, dtype="string")
    df = pd.DataFrame(out, columns=list(OBS_COLUMNS))
    df["first_step"] = df["first_step"].astype("Int64")
    df["last_step"] = df["last_step"].astype("Int64")
    df["n_steps"] = df["n_steps"].astype(np.int64)
    for c in ("config", "kind", "source", "request_id"):
        df[c] = df[c].astype("string")
    return df


def _window_rows(kind, y, first, last, cum, request_id=None, config=None, source=None):
    first = np.asarray(first, np.int64)
    last = np.asarray(last, np.int64)
    feats = cum[last] - cum[first - 1] if len(first) else np.zeros((0, len(BETA_FEATURES)))
    cols = {"kind": np.full(len(first), kind, dtype=object), "y_s": np.asarray(y, np.float64),
            "n_steps": (last - first + 1).astype(np.int64),
            "first_step": pd.array(first, dtype="Int64"), "last_step": pd.array(last, dtype="Int64")}
    for j, f in enumerate(BETA_FEATURES):
        cols[f"f_{f}"] = feats[:, j]
    if request_id is not None:
        cols["request_id"] = np.asarray(request_id, dtype=object)
    df = _frame(cols)
    if config is not None:
        df["config"] = config
    if source is not None:
        df["source"] = source
    return df


def _bad_prefix(batches: StepBatches, *, idle: bool = True) -> np.ndarray:
    """Cumulative count (by step id, row 0 = 0) of steps a window must not contain."""
    t = batches.table
    bad = t["empty"].to_numpy() | t["uncertain"].to_numpy()
    out = np.zeros(len(t) + 1, np.int64)
    np.cumsum(bad, out=out[1:])
    if idle:
        idl = np.zeros(len(t) + 1, np.int64)
        np.cumsum(t["idle_after"].to_numpy(), out=idl[1:])
        return out, idl
    return out, None


def _count(bad_cum, lo, hi):
    """Number of flagged steps in [lo, hi] (step ids, inclusive)."""
    return bad_cum[hi] - bad_cum[lo - 1]


def _keep_positive(df: pd.DataFrame, dropped: dict, why: str) -> pd.DataFrame:
    y = df["y_s"].to_numpy(np.float64)
    good = np.isfinite(y) & (y > 0)
    if (~good).any():
        dropped[why] = dropped.get(why, 0) + int((~good).sum())
    return df[good].reset_index(drop=True)


def step_gap_windows(batches: StepBatches, trace, deployment, *, config=None, source=None,
                     require_summary_match: bool = True, cum=None) -> tuple[pd.DataFrame, dict]:
    """Engine-cycle windows between consecutive sampled steps (kind 'step_gap').

    y = ts_start of the next sampled step - ts_start of this one (never
    `step.duration_us`, the scheduler's CPU time); window = steps [this, next).
    Dropped: windows holding an empty or uncertain step, a possible idle gap, or (with
    `require_summary_match`) starting at a step whose BATCH_SUMMARY disagrees with the
    reconstruction (e.g. journey sampling < 1). Returns (rows, drop counts).
    """
    dropped: dict = {}
    st = trace.steps
    if st is None or len(st) < 2:
        return _empty_obs(), dropped
    st = st.sort_values("step_id")
    sid = st["step_id"].to_numpy(np.int64)
    t0 = st["ts_start_s"].to_numpy(np.float64)
    i, j = sid[:-1], sid[1:]
    y = t0[1:] - t0[:-1]
    lo, hi = i, j - 1
    nmax = batches.n_steps
    inside = (lo >= 1) & (hi <= nmax) & (hi >= lo)
    dropped["outside_grid"] = int((~inside).sum())
    lo, hi, y, i = lo[inside], hi[inside], y[inside], i[inside]
    bad_cum, idle_cum = _bad_prefix(batches)
    keep = np.ones(len(lo), bool)
    empty_unc = _count(bad_cum, lo, hi) > 0
    idle = _count(idle_cum, lo, hi) > 0
    dropped["empty_or_uncertain"] = int(empty_unc.sum())
    keep &= ~empty_unc
    dropped["idle"] = int((keep & idle).sum())
    keep &= ~idle
    if require_summary_match:
        match = batches.table["summary_match"].to_numpy()[i - 1]
        dropped["summary_mismatch"] = int((keep & ~match).sum())
        keep &= match
    if cum is None:
        cum = batches.cumulative_features(deployment)
    df = _window_rows("step_gap", y[keep], lo[keep], hi[keep], cum, config=config, source=source)
    return _keep_positive(df, dropped, "non_positive_y"), dropped


def _request_frame(trace) -> pd.DataFrame:
    return trace.requests


def _preempted_after(trace, rids: np.ndarray, after_step: np.ndarray) -> np.ndarray:
    """Whether each request has a PREEMPTED event at a step > after_step."""
    je = trace.journey_events
    pre = je[je["event_type"].astype(str) == "PREEMPTED"]
    if not len(pre):
        return np.zeros(len(rids), bool)
    last_pre = pre.groupby(pre["request_id"].astype(str))["step"].max()
    lp = pd.Series(rids).map(last_pre).to_numpy(np.float64)
    return np.nan_to_num(lp, nan=-1.0) > after_step


def journey_decode_windows(batches: StepBatches, trace, deployment, *, config=None, source=None,
                           cum=None) -> tuple[pd.DataFrame, dict]:
    """Per completed request: y = finished_s - first_token_s over steps F+1..D
    (kind 'decode_window'); requests preempted during decode are skipped."""
    dropped: dict = {}
    rq = _request_frame(trace)
    if not len(rq):
        return _empty_obs(), dropped
    F = rq["first_token_step"].to_numpy(np.float64)
    D = rq["finished_step"].to_numpy(np.float64)
    status = rq["finish_status"].astype(str).to_numpy()
    rids = rq["request_id"].astype(str).to_numpy()
    y = (rq["finished_s"] - rq["first_token_s"]).to_numpy(np.float64)
    has = np.isfinite(F) & np.isfinite(D)
    dropped["no_first_token_or_finish"] = int((~has).sum())
    ok = has & np.isin(status, OK_FINISH)
    dropped["aborted"] = int((has & ~ok).sum())
    Fi = np.where(ok, F, 0).astype(np.int64)
    Di = np.where(ok, D, 0).astype(np.int64)
    single = ok & (Di <= Fi)
    dropped["single_token"] = int(single.sum())
    ok &= ~single
    pre = ok & _preempted_after(trace, rids, Fi)
    dropped["preempted_in_decode"] = int(pre.sum())
    ok &= ~pre
    inside = ok & (Di <= batches.n_steps)
    dropped["outside_grid"] = int((ok & ~inside).sum())
    ok = inside
    lo, hi = Fi + 1, Di
    ok = _drop_bad_windows(batches, ok, lo, hi, dropped)
    if cum is None:
        cum = batches.cumulative_features(deployment)
    df = _window_rows("decode_window", y[ok], lo[ok], hi[ok], cum, request_id=rids[ok],
                      config=config, source=source)
    return _keep_positive(df, dropped, "non_positive_y"), dropped


def _drop_bad_windows(batches: StepBatches, ok, lo, hi, dropped: dict):
    """`ok` without windows [lo, hi] that hold an empty or uncertain step, or an idle gap."""
    bad_cum, idle_cum = _bad_prefix(batches)
    lo_c, hi_c = np.where(ok, lo, 1), np.where(ok, hi, 1)
    bad = ok & ((_count(bad_cum, lo_c, hi_c) > 0)
                | (_count(idle_cum, lo_c, np.maximum(hi_c - 1, lo_c - 1)) > 0))
    dropped["empty_uncertain_or_idle"] = int(bad.sum())
    return ok & ~bad


def journey_ttft_windows(batches: StepBatches, trace, deployment, *, config=None, source=None,
                         cum=None) -> tuple[pd.DataFrame, dict]:
    """Per request: y = first_token_s - queued_s (engine clock) over steps Q+1..F, Q the
    QUEUED step (kind 'queue_to_first_token'). Approximation: y also holds the rest of
    step Q after the request queued (up to one step time)."""
    dropped: dict = {}
    rq = _request_frame(trace)
    if not len(rq):
        return _empty_obs(), dropped
    Q = rq["queued_step"].to_numpy(np.float64)
    F = rq["first_token_step"].to_numpy(np.float64)
    rids = rq["request_id"].astype(str).to_numpy()
    y = (rq["first_token_s"] - rq["queued_s"]).to_numpy(np.float64)
    ok = np.isfinite(Q) & np.isfinite(F)
    dropped["no_queued_or_first_token"] = int((~ok).sum())
    Qi = np.where(ok, Q, 0).astype(np.int64)
    Fi = np.where(ok, F, 1).astype(np.int64)
    order = ok & (Fi > Qi)
    dropped["first_token_not_after_queue"] = int((ok & ~order).sum())
    ok = order & (Fi <= batches.n_steps)
    lo, hi = Qi + 1, Fi
    ok = _drop_bad_windows(batches, ok, lo, hi, dropped)
    if cum is None:
        cum = batches.cumulative_features(deployment)
    df = _window_rows("queue_to_first_token", y[ok], lo[ok], hi[ok], cum, request_id=rids[ok],
                      config=config, source=source)
    return _keep_positive(df, dropped, "non_positive_y"), dropped


def alpha_windows(trace, *, config=None, source=None) -> tuple[pd.DataFrame, dict]:
    """Request-level delays on the API/engine monotonic clocks (same host):

    - 'arrival_to_queue': y = queued_s - arrived_s, a_alpha_const_s = 1e-6,
      a_alpha_prompt_s = prompt x 1e-6;
    - 'post_decode': y = departed_s - finished_s, a_alpha_output_s = output x 1e-6,
      a_alpha_frontend_s = requests decoding at finished_s (traced journeys) x 1e-6
      (completed requests only).

    No step features (n_steps = 0). Rows with missing or non-positive y are dropped and
    counted.
    """
    dropped: dict = {}
    rq = _request_frame(trace)
    if not len(rq):
        return _empty_obs(), dropped
    rids = rq["request_id"].astype(str).to_numpy()
    prompt = rq["prompt_tokens"].to_numpy(np.float64)
    output = rq["output_tokens"].to_numpy(np.float64)
    n = len(rq)
    y1 = (rq["queued_s"] - rq["arrived_s"]).to_numpy(np.float64)
    a1 = _frame({"kind": np.full(n, "arrival_to_queue", dtype=object), "y_s": y1,
                 "a_alpha_const_s": np.full(n, US), "a_alpha_prompt_s": prompt * US,
                 "request_id": rids})
    status = rq["finish_status"].astype(str).to_numpy()
    done = np.isin(status, OK_FINISH)
    y2 = (rq["departed_s"] - rq["finished_s"]).to_numpy(np.float64)
    finished = rq["finished_s"].to_numpy(np.float64)
    behind = decoding_at(rq["first_token_s"].to_numpy(np.float64), finished, finished)
    a2 = _frame({"kind": np.full(int(done.sum()), "post_decode", dtype=object), "y_s": y2[done],
                 "a_alpha_output_s": output[done] * US, "a_alpha_frontend_s": behind[done] * US,
                 "request_id": rids[done]})
    dropped["post_decode_not_completed"] = int((~done).sum())
    d1: dict = {}
    a1 = _keep_positive(a1, d1, "arrival_to_queue_missing_or_non_positive")
    a2 = _keep_positive(a2, d1, "post_decode_missing_or_non_positive")
    dropped.update(d1)
    out = pd.concat([a1, a2], ignore_index=True)
    if config is not None:
        out["config"] = config
    if source is not None:
        out["source"] = source
    out["n_steps"] = out["n_steps"].astype(np.int64)
    return out, dropped


def otel_observations(trace, deployment, max_num_batched_tokens: int, *, config=None, source=None,
                      offload=None, kinds=None, snapshots: str = "override",
                      require_summary_match: bool = True) -> tuple[pd.DataFrame, dict]:
    """Every window kind of one OTEL trace (or those in `kinds`), plus a summary dict:
    reconstruction counts (`reconstruction`) and per-kind kept/dropped counts."""
    kinds = KINDS if kinds is None else tuple(kinds)
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown observation kind(s) {sorted(unknown)}; known: {', '.join(KINDS)}")
    parts, summary = [], {"kept": {}, "dropped": {}}
    need_steps = any(k in kinds for k in ("step_gap", "decode_window", "queue_to_first_token"))
    if need_steps:
        batches = journey_batches(trace, max_num_batched_tokens, offload=offload, snapshots=snapshots)
        summary["reconstruction"] = batches.summary
        cum = batches.cumulative_features(deployment)
        calls = {"step_gap": lambda: step_gap_windows(batches, trace, deployment, config=config, source=source,
                                                      require_summary_match=require_summary_match, cum=cum),
                 "decode_window": lambda: journey_decode_windows(batches, trace, deployment, config=config,
                                                                 source=source, cum=cum),
                 "queue_to_first_token": lambda: journey_ttft_windows(batches, trace, deployment, config=config,
                                                                      source=source, cum=cum)}
        for kind, call in calls.items():
            if kind in kinds:
                df, dropped = call()
                parts.append(df)
                summary["kept"][kind] = len(df)
                summary["dropped"][kind] = dropped
    if "arrival_to_queue" in kinds or "post_decode" in kinds:
        df, dropped = alpha_windows(trace, config=config, source=source)
        df = df[df["kind"].isin(kinds)]
        parts.append(df)
        for k in ("arrival_to_queue", "post_decode"):
            if k in kinds:
                summary["kept"][k] = int((df["kind"] == k).sum())
        summary["dropped"]["alpha"] = dropped
    parts = [p for p in parts if len(p)]
    obs = pd.concat(parts, ignore_index=True) if parts else _empty_obs()
    return obs, summary


def trace_from_source(source):
    """An `OtelTrace` from an ingested OTEL `io.dataset.Source` (its tables), plus the
    per-step offload blocks Series (or None when the source has no KV events)."""
    from bayesblis.io.otel import OtelTrace

    t = source.tables
    trace = OtelTrace(requests=t["requests"], journey_events=t["journey_events"], steps=t["steps"],
                      snapshots=t.get("snapshots", pd.DataFrame(columns=["step_id"])),
                      meta=dict(source.meta or {}))
    offload = None
    off = t.get("kv_offload_per_step")
    if off is not None and len(off):
        step_col = "step" if "step" in off.columns else off.columns[0]
        offload = pd.Series(off["offload_blocks"].to_numpy(np.float64),
                            index=off[step_col].to_numpy(np.int64), name="offload_blocks")
    return trace, offload


__all__ = ["StepBatches", "journey_batches", "snapshot_aggregates", "step_gap_windows",
           "journey_decode_windows", "journey_ttft_windows", "alpha_windows", "otel_observations",
           "trace_from_source", "KINDS", "OBS_COLUMNS", "STEP_COLUMNS", "OK_FINISH"]
