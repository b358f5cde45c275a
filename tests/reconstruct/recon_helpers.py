"""A tiny vLLM-V1-like FCFS scheduler that writes an OTEL traces.json with known batches.

Running requests first in admission order (a decode takes 1 token, a prefill chunk
min(remaining, budget)), then waiting requests FCFS while budget remains. No KV limit,
no preemption. Every step's true aggregates are returned for exactness checks.
"""

from __future__ import annotations

import json
from collections import deque

import numpy as np

from bayesblis.io.otel import encode_attributes

AGG = ("prefill_tokens", "prefill_context_tokens", "prefill_attention_pairs", "num_prefill_reqs",
       "num_decode_reqs", "decode_context_tokens")


def schedule(requests, max_num_batched_tokens, *, step_time=lambda agg: 1e-3 + 1e-5 * agg[0],
             max_num_seqs=10**9, t0=100.0):
    """requests: list of (arrival_s, prompt, output, cached). Returns (events, steps):
    events: list of dicts per request (journey events + api times); steps: list of dicts
    (step_id, start, end, aggregates, summary counts, entries)."""
    reqs = [dict(i=i, arrival=t0 + a, prompt=p, output=o, cached=c, computed=0, out=0, events=[])
            for i, (a, p, o, c) in enumerate(requests)]
    pending = deque(sorted(reqs, key=lambda r: r["arrival"]))
    waiting, running, steps = deque(), [], []
    t, step = t0, 0
    while True:
        while pending and pending[0]["arrival"] + 1e-4 <= t:
            r = pending.popleft()
            r["queued"] = r["arrival"] + 1e-4
            r["events"].append(("QUEUED", r["queued"], step, 0, 0, None))
            waiting.append(r)
        if not running and not waiting:
            if not pending:
                break
            t = pending[0]["arrival"] + 1e-4
            continue
        step += 1
        budget = max_num_batched_tokens
        sched = []
        for r in running:
            if budget <= 0:
                break
            if r["computed"] < r["prompt"]:
                new = min(r["prompt"] - r["computed"], budget)
            else:
                new = 1
            sched.append((r, new, r["computed"], r["out"]))
            budget -= new
        while waiting and budget > 0 and len(running) < max_num_seqs:
            r = waiting.popleft()
            r["computed"] = r["cached"]
            r["events"].append(("SCHEDULED", t, step, r["cached"], 0, "FIRST"))
            running.append(r)
            new = min(r["prompt"] - r["computed"], budget)
            sched.append((r, new, r["computed"], 0))
            budget -= new
        agg = np.zeros(6)
        entries = []
        for r, new, c, ob in sched:
            decode = ob >= 1 and new == 1 and c == r["prompt"] + ob - 1
            if decode:
                agg[4] += 1
                agg[5] += c
            else:
                agg[0] += new
                agg[1] += c
                agg[2] += new * c + new * (new + 1) / 2
                agg[3] += 1
            entries.append((r["i"], new, c, ob))
        end = t + step_time(agg)
        n_pre = sum(1 for r, new, c, ob in sched if ob == 0)
        p_tok = sum(new for r, new, c, ob in sched if ob == 0)
        n_fin = 0
        for r, new, c, ob in sched:
            r["computed"] = c + new
            if r["computed"] == r["prompt"] + r["out"]:
                r["out"] += 1
                if r["out"] == 1:
                    r["events"].append(("FIRST_TOKEN", end, step, r["prompt"], 1, None))
                if r["out"] >= r["output"]:
                    r["events"].append(("FINISHED", end, step, r["prompt"], r["out"], "length"))
                    r["finished"] = end
                    running.remove(r)
                    n_fin += 1
        steps.append(dict(step_id=step, start=t, end=end, agg=agg, entries=entries,
                          n_prefill=n_pre, prefill_tokens=p_tok, n_decode=len(sched) - n_pre,
                          decode_tokens=sum(new for r, new, c, ob in sched if ob > 0),
                          running=len(running), waiting=len(waiting), n_finished=n_fin,
                          prompts={r["i"]: r["prompt"] for r, *_ in sched}))
        t = end
    return reqs, steps


def write_trace(path, reqs, steps, *, sampled=None, snapshot_steps=(), drop_requests=()):
    """Write an OTLP/JSON traces.json; `sampled`: step ids with a BATCH_SUMMARY (default all)."""
    lines = []
    for r in reqs:
        if r["i"] in drop_requests:
            continue
        api = f"cmpl-{r['i']:08x}"
        eng = f"{api}-0-{r['i']:08x}"
        ev_api = [{"timeUnixNano": "1", "name": "api.ARRIVED",
                   "attributes": encode_attributes({"event.ts.monotonic": r["arrival"]})}]
        if "finished" in r:
            ev_api.append({"timeUnixNano": "2", "name": "api.DEPARTED",
                           "attributes": encode_attributes({"event.ts.monotonic": r["finished"] + 5e-4})})
        evs = []
        for etype, ts, st, pdone, ddone, extra in r["events"]:
            a = {"event.type": etype, "ts.monotonic": ts, "scheduler.step": st, "phase": "DECODE",
                 "prefill.done_tokens": pdone, "prefill.total_tokens": r["prompt"],
                 "decode.done_tokens": ddone, "decode.max_tokens": r["output"], "num_preemptions": 0}
            if etype == "SCHEDULED":
                a["schedule.kind"] = extra
            if etype == "FINISHED":
                a["finish.status"] = extra
            evs.append({"timeUnixNano": "3", "name": f"journey.{etype}", "attributes": encode_attributes(a)})
        sid = f"{r['i']:016x}"
        lines.append({"resourceSpans": [{"resource": {}, "scopeSpans": [
            {"scope": {"name": "vllm.api"}, "spans": [
                {"traceId": "0" * 32, "spanId": sid, "name": "llm_request", "kind": 2,
                 "attributes": encode_attributes({"gen_ai.request.id": api}), "events": ev_api}]},
            {"scope": {"name": "vllm.scheduler"}, "spans": [
                {"traceId": "0" * 32, "spanId": "f" + sid[1:], "parentSpanId": sid, "name": "llm_core",
                 "kind": 1, "attributes": encode_attributes({"gen_ai.request.id": eng}), "events": evs}]}]}]})
    step_events = []
    ids = {r["i"]: f"cmpl-{r['i']:08x}-0-{r['i']:08x}" for r in reqs}
    for s in steps:
        if sampled is not None and s["step_id"] not in sampled:
            continue
        ns = int(round(s["start"] * 1e9))
        step_events.append({"timeUnixNano": "4", "name": "step.BATCH_SUMMARY", "attributes": encode_attributes({
            "step.id": s["step_id"], "step.ts_start_ns": ns, "step.ts_end_ns": ns + 50_000,
            "step.duration_us": 50, "queue.running_depth": s["running"], "queue.waiting_depth": s["waiting"],
            "batch.num_prefill_reqs": s["n_prefill"], "batch.prefill_tokens": s["prefill_tokens"],
            "batch.num_decode_reqs": s["n_decode"], "batch.decode_tokens": s["decode_tokens"],
            "batch.scheduled_tokens": s["prefill_tokens"] + s["decode_tokens"],
            "batch.num_finished": s["n_finished"], "batch.num_preempted": 0,
            "kv.usage_gpu_ratio": 0.1, "kv.blocks_total_gpu": 1000, "kv.blocks_free_gpu": 900})})
        if s["step_id"] in snapshot_steps:
            for i, new, c, ob in s["entries"]:
                step_events.append({"timeUnixNano": "4", "name": "step.REQUEST_SNAPSHOT",
                                    "attributes": encode_attributes({
                                        "step.id": s["step_id"], "request.id": ids[i],
                                        "request.phase": "DECODE" if ob else "PREFILL",
                                        "request.num_prompt_tokens": s["prompts"][i],
                                        "request.num_computed_tokens": c, "request.num_output_tokens": ob,
                                        "request.num_preemptions": 0,
                                        "request.scheduled_tokens_this_step": new,
                                        "kv.blocks_allocated_gpu": 1, "kv.blocks_cached_gpu": 0})})
    lines.append({"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {"name": "vllm.scheduler.step"},
                  "spans": [{"traceId": "1" * 32, "spanId": "2" * 16, "name": "scheduler_steps_1", "kind": 1,
                             "attributes": [], "events": step_events}]}]}]})
    with open(path, "w") as fh:
        for line in lines:
            fh.write(json.dumps(line) + "\n")
    return path


def true_aggregates(steps) -> np.ndarray:
    return np.array([s["agg"] for s in steps])


HERE = __import__("pathlib").Path(__file__).resolve().parent
REPO = HERE.parents[1]
SAMPLE = REPO / "bayesblis" / "data" / "samples" / "otel-run"
