"""Write a recorded simulation as vLLM traces: OTEL journey + step tracing
(`traces.json`) and KV-cache events (`kv_events.jsonl`).

Formats: shared/formats/otel-vllm-tracing.md and kv-events.md (project copies in
data_specs/otel-traces.md, kv-events.md). The output reads back with
`bayesblis.io.otel.read_otel` and `bayesblis.io.kv_events.read_kv_events`.

Clocks: engine and API monotonic clocks are the simulation clock plus
`monotonic_origin_s` (default 1000 s); epoch times are `epoch_offset_s` (1.76e9 s) +
monotonic. Journey sampling is 1.0 (every request); step summaries are Bernoulli
sampled per step (`step_sample_rate`, vLLM default 0.01) and request snapshots per
sampled step (`rich_subsample_rate`, default 0.001), with a seeded RNG.

`step.ts_start_ns` is the real (simulated) step start, so gaps between consecutive
step starts are the engine cycle; `step.duration_us` imitates vLLM's scheduler CPU
time (`cpu_base_us` + `cpu_per_request_us` x running requests, capped at the step
duration) and `step.ts_end_ns` = start + that duration, as in the instrumented vLLM.

Request ids: API id `cmpl-<32 hex>`, engine id `<API id>-0-<8 hex>`. Finish status is
`length` (requests stop at their output length, like inference-perf's ignore_eos);
requests dropped for exceeding `max_model_len` get only an API span with
`api.ABORTED` (reason `error`). Prefix-cache block hashes are synthetic and
deterministic per (prefix group, block index); CPU-tier hashes are the same 8 bytes,
base64 encoded.
"""

from __future__ import annotations

import base64
import bisect
import json
from pathlib import Path

import numpy as np

from bayesblis.atomic import atomic_path
from bayesblis.simulate.engine import (ENTRY_COLS, KV_LOAD_CPU, KV_REMOVE_CPU, KV_REMOVE_GPU,
                                       KV_STORE_CPU, KV_STORE_GPU, STATUS_OK, EngineRun)

MASK63 = (1 << 63) - 1
_E = {name: i for i, name in enumerate(ENTRY_COLS)}


def _attr(key, value):
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, (int, np.integer)):
        return {"key": key, "value": {"intValue": str(int(value))}}
    if isinstance(value, (float, np.floating)):
        return {"key": key, "value": {"doubleValue": float(value)}}
    return {"key": key, "value": {"stringValue": str(value)}}


def _attrs(d: dict) -> list:
    return [_attr(k, v) for k, v in d.items() if v is not None]


def block_hash(group: int, index: int, salt: int = 0) -> int:
    """Deterministic 63-bit hash of prefix block `index` of `group` (splitmix64)."""
    z = (int(group) * 0x9E3779B97F4A7C15 + int(index) * 0xBF58476D1CE4E5B9 + salt + 1) & ((1 << 64) - 1)
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & ((1 << 64) - 1)
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & ((1 << 64) - 1)
    return (z ^ (z >> 31)) & MASK63


def _b64(h: int) -> str:
    return base64.b64encode(int(h).to_bytes(8, "big")).decode("ascii")


class _Clock:
    def __init__(self, origin_s: float, epoch_offset_s: float):
        self.origin_ns = int(round(origin_s * 1e9))
        self.epoch_ns = int(round(epoch_offset_s * 1e9))

    def mono_ns(self, t_s) -> int:
        return self.origin_ns + int(round(float(t_s) * 1e9))

    def mono_s(self, t_s) -> float:
        return self.mono_ns(t_s) / 1e9

    def epoch_ns_of(self, t_s) -> int:
        return self.epoch_ns + self.mono_ns(t_s)


def request_ids(n: int, seed: int = 0) -> tuple[list, list]:
    """(API ids, engine ids) for `n` requests, seeded."""
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 2**63, size=(n, 3), dtype=np.int64)
    api = [f"cmpl-{a:016x}{b:016x}" for a, b in raw[:, :2]]
    eng = [f"{x}-0-{c & 0xFFFFFFFF:08x}" for x, c in zip(api, raw[:, 2])]
    return api, eng


def write_traces(run: EngineRun, workload, config, out_dir, *, step_sample_rate: float = 0.01,
                 rich_subsample_rate: float = 0.001, closure_interval: int = 100,
                 spans_per_line: int = 64, monotonic_origin_s: float = 1000.0,
                 epoch_offset_s: float = 1.76e9, cpu_base_us: float = 40.0,
                 cpu_per_request_us: float = 2.0, seed: int = 0,
                 kv_events: bool = True) -> dict:
    """Write `traces.json` (and `kv_events.jsonl`) for a run made with record=True.

    Returns {"traces": path, "kv_events": path | None, "engine_ids": [...]}.
    """
    if run.steps is None:
        raise ValueError("write_traces needs a run recorded with record=True")
    if not 1 <= closure_interval:
        raise ValueError("closure_interval must be >= 1")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    clock = _Clock(monotonic_origin_s, epoch_offset_s)
    rng = np.random.default_rng(seed)
    api_ids, eng_ids = request_ids(len(workload), seed)
    spans = []   # (end_ns, scope, span)
    spans += _request_spans(run, workload, clock, rng, api_ids, eng_ids)
    spans += _step_spans(run, workload, config, clock, rng, eng_ids, step_sample_rate,
                         rich_subsample_rate, closure_interval, cpu_base_us, cpu_per_request_us)
    spans.sort(key=lambda x: x[0])
    traces = out_dir / "traces.json"
    resource = {"attributes": _attrs({"service.name": "vllm"})}
    with atomic_path(traces) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for i in range(0, len(spans), max(1, spans_per_line)):
            chunk = spans[i:i + spans_per_line]
            scopes: dict[str, list] = {}
            for _, scope, span in chunk:
                scopes.setdefault(scope, []).append(span)
            line = {"resourceSpans": [{"resource": resource, "scopeSpans": [
                {"scope": {"name": s}, "spans": sp} for s, sp in scopes.items()]}]}
            fh.write(json.dumps(line, separators=(",", ":")) + "\n")
    kv_path = None
    if kv_events:
        kv_path = out_dir / "kv_events.jsonl"
        _write_kv_events(run, workload, config, clock, eng_ids, kv_path, seed)
    return {"traces": traces, "kv_events": kv_path, "engine_ids": eng_ids}


# ---------------------------------------------------------------------------------------
# journeys
# ---------------------------------------------------------------------------------------

def _hex(rng, nbytes):
    return "".join(f"{b:02x}" for b in rng.integers(0, 256, nbytes))


def _request_spans(run, w, clock, rng, api_ids, eng_ids):
    st = run.steps
    start_of = st.start_s
    end_of = st.end_s
    ent = st.entries[st.entries[:, _E["scheduled_tokens"]] > 0]
    ent = ent[np.lexsort((ent[:, 0], ent[:, 1]))]
    bounds = np.searchsorted(ent[:, 1], np.arange(len(w) + 1))
    pre = st.preemptions[np.lexsort((st.preemptions[:, 0], st.preemptions[:, 1]))] \
        if len(st.preemptions) else np.zeros((0, 2), np.int64)
    pbounds = np.searchsorted(pre[:, 1], np.arange(len(w) + 1))
    out = []
    for r in range(len(w)):
        trace_id = _hex(rng, 16)
        api_span_id = _hex(rng, 8)
        arrival = w.arrival_s[r]
        api_events = [{"timeUnixNano": str(clock.epoch_ns_of(arrival)), "name": "api.ARRIVED",
                       "attributes": _attrs({"event.ts.monotonic": clock.mono_s(arrival)})}]
        if run.status[r] != STATUS_OK:
            api_events.append({"timeUnixNano": str(clock.epoch_ns_of(arrival)), "name": "api.ABORTED",
                               "attributes": _attrs({"event.ts.monotonic": clock.mono_s(arrival),
                                                     "reason": "error"})})
            out.append((clock.epoch_ns_of(arrival), "vllm.api", {
                "traceId": trace_id, "spanId": api_span_id, "name": "llm_request", "kind": 2,
                "startTimeUnixNano": str(clock.epoch_ns_of(arrival)),
                "endTimeUnixNano": str(clock.epoch_ns_of(arrival)),
                "attributes": _attrs({"gen_ai.request.id": api_ids[r], "http.route": "/v1/completions"}),
                "events": api_events, "status": {"code": 2}}))
            continue
        departed = arrival + run.e2e_s[r]
        api_events.append({"timeUnixNano": str(clock.epoch_ns_of(departed)), "name": "api.DEPARTED",
                           "attributes": _attrs({"event.ts.monotonic": clock.mono_s(departed)})})
        out.append((clock.epoch_ns_of(departed), "vllm.api", {
            "traceId": trace_id, "spanId": api_span_id, "name": "llm_request", "kind": 2,
            "startTimeUnixNano": str(clock.epoch_ns_of(arrival)),
            "endTimeUnixNano": str(clock.epoch_ns_of(departed)),
            "attributes": _attrs({"gen_ai.request.id": api_ids[r], "http.route": "/v1/completions"}),
            "events": api_events, "status": {}}))

        prompt, n_out = int(w.prompt_tokens[r]), int(w.output_tokens[r])
        events = []

        def ev(etype, t_s, step, phase, pf_done, dec_done, npre, kind=None, status=None):
            mono_ns = clock.mono_ns(t_s)
            attrs = {"event.type": etype, "ts.monotonic": mono_ns / 1e9, "ts.monotonic_ns": mono_ns,
                     "scheduler.step": int(step), "phase": phase, "prefill.done_tokens": int(pf_done),
                     "prefill.total_tokens": prompt, "decode.done_tokens": int(dec_done),
                     "decode.max_tokens": n_out, "num_preemptions": int(npre),
                     "schedule.kind": kind, "finish.status": status}
            events.append((int(step), mono_ns, {"timeUnixNano": str(clock.epoch_ns + mono_ns),
                                                "name": f"journey.{etype}",
                                                "attributes": _attrs(attrs)}))

        ev("QUEUED", run.queued_s[r], run.queued_step[r], "WAITING", 0, 0, 0)
        rows = ent[bounds[r]:bounds[r + 1]]
        p_steps = pre[pbounds[r]:pbounds[r + 1], 0]
        steps_r = rows[:, 0]
        before = rows[:, _E["computed_before"]]
        out_before = rows[:, _E["output_before"]]
        after = before + rows[:, _E["scheduled_tokens"]]
        hw_after = np.maximum.accumulate(np.minimum(after, prompt))   # prefill high-water mark
        produced = (after == prompt + out_before).astype(np.int64)
        last_before = np.searchsorted(steps_r, p_steps) - 1            # last row before each preemption
        admissions = np.concatenate([[0], last_before + 1])
        for m, row_i in enumerate(admissions):
            if m > 0:   # the preemption that precedes this admission
                li = int(last_before[m - 1])
                ev("PREEMPTED", start_of[int(p_steps[m - 1]) - 1], int(p_steps[m - 1]),
                   "DECODE" if out_before[li] + produced[li] else "PREFILL", int(hw_after[li]),
                   int(out_before[li] + produced[li]), m)
            if row_i >= len(rows):
                continue
            hw = max(int(hw_after[row_i - 1]) if row_i > 0 else 0, min(int(before[row_i]), prompt))
            step = int(steps_r[row_i])
            ev("SCHEDULED", start_of[step - 1], step, "DECODE" if out_before[row_i] else "PREFILL",
               hw, int(out_before[row_i]), m, kind="FIRST" if m == 0 else "RESUME")
        ft, fin = int(run.first_token_step[r]), int(run.finish_step[r])
        ev("FIRST_TOKEN", end_of[ft - 1], ft, "DECODE", prompt, 1,
           _npre_before(pre[pbounds[r]:pbounds[r + 1], 0], ft))
        ev("FINISHED", end_of[fin - 1], fin, "DECODE", prompt, n_out, int(run.num_preemptions[r]),
           status="length")
        events = [e for _, _, e in sorted(events, key=lambda x: (x[0], x[1]))]
        out.append((clock.epoch_ns_of(run.finish_s[r]), "vllm.scheduler", {
            "traceId": trace_id, "spanId": _hex(rng, 8), "parentSpanId": api_span_id,
            "name": "llm_core", "kind": 1,
            "startTimeUnixNano": str(clock.epoch_ns_of(run.queued_s[r])),
            "endTimeUnixNano": str(clock.epoch_ns_of(run.finish_s[r])),
            "attributes": _attrs({"gen_ai.request.id": eng_ids[r]}),
            "events": events, "status": {}}))
    return out


def _npre_before(pre_steps, step):
    return int(np.sum(np.asarray(pre_steps) < step))


# ---------------------------------------------------------------------------------------
# steps
# ---------------------------------------------------------------------------------------

def _step_spans(run, w, config, clock, rng, eng_ids, rate, rich_rate, closure, cpu_base_us,
                cpu_per_req_us):
    st = run.steps
    n = len(st.start_s)
    if n == 0:
        return []
    sampled = rng.random(n) < rate
    rich = sampled & (rng.random(n) < rich_rate)
    total = int(config.kv_blocks_total)
    col = {name: st.step_col(name) for name in ("step_id", "running_depth", "waiting_depth",
                                                "kv_used_blocks", "summary_prefill_reqs",
                                                "summary_prefill_tokens", "summary_decode_reqs",
                                                "summary_decode_tokens", "num_finished",
                                                "num_preempted")}
    ent = st.entries
    ebounds = np.searchsorted(ent[:, 0], np.arange(1, n + 2)) if len(ent) else np.zeros(n + 1, int)
    spans = []
    seq = 0
    span_start = 0
    events = []
    for i in range(n):
        sid = int(col["step_id"][i])
        if sampled[i]:
            start_ns = clock.mono_ns(st.start_s[i])
            dur_s = st.end_s[i] - st.start_s[i]
            cpu_us = int(min(cpu_base_us + cpu_per_req_us * col["running_depth"][i], dur_s * 1e6))
            used = int(col["kv_used_blocks"][i])
            attrs = {"step.id": sid, "step.ts_start_ns": start_ns,
                     "step.ts_end_ns": start_ns + cpu_us * 1000, "step.duration_us": cpu_us,
                     "queue.running_depth": int(col["running_depth"][i]),
                     "queue.waiting_depth": int(col["waiting_depth"][i]),
                     "batch.num_prefill_reqs": int(col["summary_prefill_reqs"][i]),
                     "batch.prefill_tokens": int(col["summary_prefill_tokens"][i]),
                     "batch.num_decode_reqs": int(col["summary_decode_reqs"][i]),
                     "batch.decode_tokens": int(col["summary_decode_tokens"][i]),
                     "batch.scheduled_tokens": int(col["summary_prefill_tokens"][i]
                                                   + col["summary_decode_tokens"][i]),
                     "batch.num_finished": int(col["num_finished"][i]),
                     "batch.num_preempted": int(col["num_preempted"][i]),
                     "kv.usage_gpu_ratio": used / total if total else 0.0,
                     "kv.blocks_total_gpu": total, "kv.blocks_free_gpu": total - used}
            t_ns = clock.epoch_ns + start_ns + cpu_us * 1000
            events.append({"timeUnixNano": str(t_ns), "name": "step.BATCH_SUMMARY",
                           "attributes": _attrs(attrs)})
            if rich[i]:
                for row in ent[ebounds[i]:ebounds[i + 1]]:
                    r = int(row[_E["request"]])
                    prompt = int(w.prompt_tokens[r])
                    cached_tok = int(row[_E["blocks_cached"]]) * int(config.block_size)
                    eff = prompt - cached_tok
                    sa = {"step.id": sid, "request.id": eng_ids[r],
                          "request.phase": "DECODE" if row[_E["output_before"]] else "PREFILL",
                          "request.num_prompt_tokens": prompt,
                          "request.num_computed_tokens": int(row[_E["computed_before"]]),
                          "request.num_output_tokens": int(row[_E["output_before"]]),
                          "request.num_preemptions": int(row[_E["num_preemptions"]]),
                          "request.scheduled_tokens_this_step": int(row[_E["scheduled_tokens"]]),
                          "kv.blocks_allocated_gpu": int(row[_E["blocks_allocated"]]),
                          "kv.blocks_cached_gpu": int(row[_E["blocks_cached"]]),
                          "request.effective_prompt_len": eff if 0 < eff < prompt or cached_tok == 0 else None}
                    events.append({"timeUnixNano": str(t_ns), "name": "step.REQUEST_SNAPSHOT",
                                   "attributes": _attrs(sa)})
        last = i == n - 1
        if events and (i - span_start + 1 >= closure or last):
            seq += 1
            range_start, range_end = int(col["step_id"][span_start]), sid
            end_ns = clock.epoch_ns_of(st.end_s[i])
            spans.append((end_ns, "vllm.scheduler.step", {
                "traceId": _hex(rng, 16), "spanId": _hex(rng, 8), "name": f"scheduler_steps_{seq}",
                "kind": 1, "startTimeUnixNano": str(clock.epoch_ns_of(st.start_s[span_start])),
                "endTimeUnixNano": str(end_ns),
                "attributes": _attrs({"scheduler.span_sequence": seq,
                                      "scheduler.step_range_start": range_start,
                                      "scheduler.step_range_end": range_end,
                                      "scheduler.closure_interval": int(closure)}),
                "events": events, "status": {}}))
            events = []
            span_start = i + 1
    return spans


# ---------------------------------------------------------------------------------------
# KV events
# ---------------------------------------------------------------------------------------

def _write_kv_events(run, w, config, clock, eng_ids, path, seed):
    st = run.steps
    bs = int(config.block_size)
    n_steps = len(st.start_s)
    kv = st.kv_events
    gpu: dict[int, int] = {}
    cpu: dict[int, int] = {}
    lines: dict[int, list] = {}
    # latest request of each group scheduled at or before a step (for pipeline request ids)
    by_group: dict[int, tuple[list, list]] = {}
    if len(kv) and np.any(kv[:, 1] == KV_STORE_CPU):
        ent = st.entries[st.entries[:, _E["scheduled_tokens"]] > 0]
        ent = ent[w.prefix_group[ent[:, 1]] >= 0]
        for step, r in zip(ent[:, 0].tolist(), ent[:, 1].tolist()):
            steps_l, reqs_l = by_group.setdefault(int(w.prefix_group[r]), ([], []))
            steps_l.append(step)
            reqs_l.append(r)

    def req_of(g, step, r):
        if r >= 0:
            return eng_ids[r]
        steps_l, reqs_l = by_group.get(g, ([], []))
        j = bisect.bisect_right(steps_l, step) - 1
        return eng_ids[reqs_l[j]] if j >= 0 else f"prefix-group-{g}"

    def add(step, event):
        lines.setdefault(int(step), []).append(event)

    def stored_gpu(step, g, first, count):
        hashes = [block_hash(g, i, seed) for i in range(first, first + count)]
        parent = block_hash(g, first - 1, seed) if first > 0 else None
        tokens = [int((h + 7919 * j) % 32000) for h in hashes for j in range(bs)]
        add(step, ["BlockStored", hashes, parent, tokens, bs, None, "GPU", None])

    transfer = 0
    for step, kind, g, nblk, r in kv.tolist():
        if kind == KV_STORE_GPU:
            first = gpu.get(g, 0)
            stored_gpu(step, g, first, nblk)
            gpu[g] = first + nblk
        elif kind == KV_REMOVE_GPU:
            add(step, ["BlockRemoved", [block_hash(g, i, seed) for i in range(nblk)], "GPU"])
            gpu[g] = 0
        elif kind == KV_STORE_CPU:
            transfer += 1
            first = cpu.get(g, 0)
            rid = req_of(g, step, r)
            add(step, ["CacheStoreCommitted", rid, "CPU", nblk, step])
            add(step + 1, ["TransferInitiated", transfer, rid, "GPU", "CPU", nblk, step + 1])
            add(step + 2, ["TransferCompleted", transfer, rid, "GPU", "CPU", nblk, True, step + 1])
            add(step + 2, ["BlockStored", [_b64(block_hash(g, i, seed)) for i in range(first, first + nblk)],
                           None, [], bs, None, "CPU", None])
            cpu[g] = first + nblk
        elif kind == KV_REMOVE_CPU:
            add(step, ["CacheEviction", "CPU", nblk, "lru", step, None])
            add(step, ["BlockRemoved", [_b64(block_hash(g, i, seed)) for i in range(nblk)], "CPU"])
            cpu[g] = 0
        elif kind == KV_LOAD_CPU:
            transfer += 1
            rid = req_of(g, step, r)
            first = gpu.get(g, 0)
            add(step, ["CacheLoadCommitted", rid, "CPU", nblk, step])
            add(step, ["TransferInitiated", transfer, rid, "CPU", "GPU", nblk, step])
            add(step + 1, ["TransferCompleted", transfer, rid, "CPU", "GPU", nblk, True, step])
            stored_gpu(step, g, first, nblk)
            gpu[g] = first + nblk
    last_end = st.end_s[-1] if n_steps else 0.0
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for step in sorted(lines):
            t = st.end_s[step - 1] if 1 <= step <= n_steps else last_end + 1e-3 * (step - n_steps)
            ts = clock.epoch_ns_of(t) / 1e9
            fh.write(json.dumps([ts, lines[step], 0, None], separators=(",", ":")) + "\n")
