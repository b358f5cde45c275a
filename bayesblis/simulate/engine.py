"""Discrete-event simulator of one vLLM V1 engine (numba-compiled step loop).

One call of `run_engine` simulates a whole workload for one draw of the coefficients.
Scheduler semantics (vLLM V1, `Scheduler.schedule`, FCFS):

1. Running requests first, in running (admission) order, within the token budget
   `max_num_batched_tokens`: a decode takes 1 token, a request still in (chunked)
   prefill takes min(remaining, budget). When its KV blocks cannot be allocated, the
   *last* running request is preempted (recompute): its blocks are freed, its computed
   tokens reset to 0 and it goes to the FRONT of the waiting queue, keeping the output
   tokens generated so far (recomputed as prompt on resume). If the victim is the
   request being scheduled, the running pass stops.
2. If nothing was preempted this step, waiting requests are admitted FCFS while budget,
   `max_num_seqs` and KV blocks allow; a prefill is chunked to the remaining budget
   (with chunked prefill off, a prompt that does not fit the budget waits).
3. KV cache: blocks of `block_size` tokens; a request holds
   ceil(num_computed_tokens / block_size) blocks (allocated for computed + new tokens).
4. Prefix caching (simple model): each prefix group caches up to
   floor(prefix_tokens / block_size) full blocks of its shared prefix, created when a
   request of the group computes past them. A later request of the group starts with
   num_computed_tokens = cached blocks x block_size (capped so >= 1 token is computed).
   Cached blocks of groups no running request uses are evictable, last used when their
   last request finished. Blocks a request held privately (the rest of its prompt, its
   output) are freed when it finishes or is preempted but, as in vLLM's free-block queue,
   stay in line: an allocation takes never-used blocks first, then evicts in the order
   blocks were freed, a request's own blocks before the group prefix it released with
   them (whole groups, least recently used first, and private blocks by release). So a
   long output pushes cached prefixes out as vLLM's does. A preempted request's own
   (non-prefix) blocks are not reused on resume.
5. CPU offload (when `cpu_offload_blocks` > 0): a group prefix evicted from the GPU is
   stored to CPU (LRU over groups, capacity in blocks); a later request of that group
   whose prefix is on CPU but not on GPU loads it back. Blocks stored plus loaded in a
   step are that step's `offload_blocks` aggregate (so the step time includes the
   transfer through the offload feature).
6. `max_model_len` caps prompt + output: such requests are dropped at arrival
   (reason 1); a request needing more KV blocks than the whole cache is dropped
   (reason 2).

Timing: a request arrives at `arrival_s`, enters the waiting queue after the alpha
pre-queue delay (alpha_const + alpha_prompt x prompt) µs; every step starts when the
previous ends (or at the next queueing time when idle) and lasts
beta . features(aggregates) x max(0.05, 1 + sigma x StudentT(nu)). Tokens are produced
at step end: the first token at the end of the step that completes the prefill, one
more per later scheduled step. A scheduled item is a decode when it adds the one token
after all computed ones of a request that already has output; its context is the
tokens already in the KV cache (num_computed_tokens before the step). Everything else
is a prefill chunk (including recomputation after preemption). The API server returns a
token behind the outputs of the requests decoding at that moment (alpha_frontend µs each,
`features.alpha.decoding_at`): client TTFT = first-token step end + alpha_frontend x
decoding - arrival; client E2E = finish + alpha_output x output + alpha_frontend x
decoding (at finish) µs - arrival. `first_token_s` and `finish_s` stay engine times.

Async scheduling (`EngineConfig.async_scheduling`, vLLM's default in the versions traced
here): the scheduler works one step ahead, so step k+1 is scheduled when step k starts and
admits only requests queued by then. A request queued while the engine is busy therefore
waits for the rest of the step in flight *and* the step already scheduled behind it before
its prefill runs: about 2.5 step times to its first token, against 1.5 without. (In the 16
shared H100 runs the measured TTFT is 2.6-3.1 times the per-token decode time at every
model, rate and prompt length below saturation; docs/accuracy.md, "What shapes the model on these runs".) An
idle engine schedules a queued request at once. Approximation: only admission from the
waiting queue lags; finished requests free their batch slots and KV blocks for the very
next step, as without async scheduling.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np

from bayesblis.constants import US
from bayesblis.features.alpha import ALPHA_FEATURES, decoding_at

STATUS_OK = 0
STATUS_DROPPED = 1
DROP_REASONS = {0: "", 1: "max_model_len", 2: "kv_capacity"}

AGGREGATES = ("prefill_tokens", "prefill_context_tokens", "prefill_attention_pairs",
              "num_prefill_reqs", "num_decode_reqs", "decode_context_tokens",
              "offload_blocks")
N_AGG = len(AGGREGATES)

# step record columns (record mode), besides start/end times and the aggregates
STEP_INT_COLS = ("step_id", "running_depth", "waiting_depth", "kv_used_blocks",
                 "summary_prefill_reqs", "summary_prefill_tokens", "summary_decode_reqs",
                 "summary_decode_tokens", "num_finished", "num_preempted")
# batch entry columns: one row per running request per step
ENTRY_COLS = ("step_id", "request", "scheduled_tokens", "computed_before",
              "output_before", "num_preemptions", "blocks_allocated", "blocks_cached")
# KV events: (step_id, kind, group, n_blocks, request)
KV_STORE_GPU, KV_REMOVE_GPU, KV_STORE_CPU, KV_REMOVE_CPU, KV_LOAD_CPU = 0, 1, 2, 3, 4
KV_EVENT_COLS = ("step_id", "kind", "group", "n_blocks", "request")


# ---------------------------------------------------------------------------------------
# configuration and results
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class EngineConfig:
    """vLLM scheduler settings the engine honours."""

    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    kv_blocks_total: int
    block_size: int = 16
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    cpu_offload_blocks: int = 0
    async_scheduling: bool = True
    cold_start_s: float = 0.0
    """Seconds after the first arrival before the server schedules anything: a fresh
    server's start-up stall (scenario `vllm.cold_start_s`; 0, a warm server, by default:
    benchmarks/cold_start.py measures it on the traced runs)."""

    def __post_init__(self):
        for name in ("max_num_batched_tokens", "max_num_seqs", "max_model_len",
                     "kv_blocks_total", "block_size"):
            v = getattr(self, name)
            if int(v) != v or v < 1:
                raise ValueError(f"EngineConfig.{name} must be a positive integer, got {v!r}")
        if self.cpu_offload_blocks < 0:
            raise ValueError("EngineConfig.cpu_offload_blocks must be >= 0")
        if not self.cold_start_s >= 0:
            raise ValueError(f"EngineConfig.cold_start_s must be >= 0, got {self.cold_start_s!r}")


@dataclass
class StepRecords:
    """Record-mode output: per-step table, per (step, running request) entries, events."""

    start_s: np.ndarray          # [S] step start (schedule() entry)
    end_s: np.ndarray            # [S] step end (outputs ready)
    aggregates: np.ndarray       # [S, N_AGG] in AGGREGATES order
    ints: np.ndarray             # [S, len(STEP_INT_COLS)]
    entries: np.ndarray          # [E, len(ENTRY_COLS)]
    preemptions: np.ndarray      # [P, 2] (step_id, request)
    kv_events: np.ndarray        # [K, len(KV_EVENT_COLS)]

    def step_col(self, name: str) -> np.ndarray:
        return self.ints[:, STEP_INT_COLS.index(name)]

    def entry_col(self, name: str) -> np.ndarray:
        return self.entries[:, ENTRY_COLS.index(name)]


@dataclass
class EngineRun:
    """Per-request outcome of one simulation (times in s from the workload start)."""

    queued_s: np.ndarray
    scheduled_s: np.ndarray      # first SCHEDULED (step start)
    first_token_s: np.ndarray
    finish_s: np.ndarray
    e2e_s: np.ndarray            # client-visible
    ttft_s: np.ndarray
    num_preemptions: np.ndarray
    status: np.ndarray           # STATUS_OK / STATUS_DROPPED
    drop_reason: np.ndarray      # key of DROP_REASONS
    queued_step: np.ndarray
    scheduled_step: np.ndarray
    first_token_step: np.ndarray
    finish_step: np.ndarray
    prefill_computed_tokens: np.ndarray   # prompt tokens computed incl. recomputation
    cached_prefix_tokens: np.ndarray      # tokens skipped by prefix hits (all admissions)
    n_steps: int
    busy_s: float                # sum of step durations
    end_s: float                 # end of the last step
    steps: StepRecords | None = None


# ---------------------------------------------------------------------------------------
# features (numba port of bayesblis.features.beta)
# ---------------------------------------------------------------------------------------

# Constants layout: [n_features, n_aggregates, weight_traffic_index, moe_coeff_s,
# n_experts, experts_per_tok, prefill_compute_index, decode_compute_index,
# kv_traffic_index, roofline_mfu, tp_comm_index, routed_compute_s_per_token,
# cuda_graph_max_tokens, W (n_agg x n_feat, row-major),
# bias (n_feat), attention FLOP time per aggregate (n_agg), n_curve, curve tokens
# (n_curve), curve seconds (n_curve)]
# -- the affine `features.beta.FeatureMap`, its MoE expert-traffic term (on the CUDA-graph
# padded tokens), its measured all-reduce curve and its rooflines.
_HEADER = 13


def deployment_constants(deployment) -> np.ndarray:
    """Per-deployment constants of the compiled feature kernel (float64 vector), from
    `bayesblis.features.beta.feature_weights(deployment)`."""
    from bayesblis.features.beta import AGGREGATES as FEATURE_AGGREGATES
    from bayesblis.features.beta import (COMPUTE_INDICES, MEMORY_INDICES, ROOFLINE_MFU,
                                         TP_COMM_INDEX, WEIGHT_TRAFFIC_INDEX, feature_weights)

    if tuple(FEATURE_AGGREGATES) != AGGREGATES:
        raise RuntimeError(f"features.beta.AGGREGATES {FEATURE_AGGREGATES} != engine {AGGREGATES}")
    if MEMORY_INDICES[0] != WEIGHT_TRAFFIC_INDEX:
        raise RuntimeError("features.beta.MEMORY_INDICES must start with the weight traffic")
    fm = feature_weights(deployment)
    w = np.asarray(fm.weights, float)
    n_agg, n_feat = w.shape
    head = [n_feat, n_agg, WEIGHT_TRAFFIC_INDEX, fm.moe_coeff_s, fm.n_experts, fm.experts_per_tok,
            COMPUTE_INDICES[0], COMPUTE_INDICES[1], MEMORY_INDICES[1], ROOFLINE_MFU, TP_COMM_INDEX,
            fm.routed_compute_s_per_token, fm.cuda_graph_max_tokens]
    curve = [np.asarray([len(fm.allreduce_tokens)], float), np.asarray(fm.allreduce_tokens, float),
             np.asarray(fm.allreduce_step_s, float)]
    return np.concatenate([np.asarray(head, float), w.ravel(), np.asarray(fm.bias, float),
                           np.asarray(fm.attention_compute, float), *curve])


def beta_feature_names() -> tuple:
    """BETA_FEATURES (the order of beta and of the kernel's output)."""
    from bayesblis.features.beta import BETA_FEATURES

    return tuple(BETA_FEATURES)



@nb.njit(cache=True, inline="always")
def _release_blocks(kvs, spv, sref, g_ref, g_cached, g_last, group, slot, req, step,
                    freed_step, freed_n):
    """Free a running slot's private KV blocks into the freed-block queue (`_free_later`)
    and drop its prefix-group reference (a group nobody references any more becomes
    evictable, last used at `step`)."""
    kvs[_PRIV] -= spv[slot]
    _free_later(kvs, freed_step, freed_n, step, spv[slot])
    if sref[slot]:
        g = group[req]
        g_ref[g] -= 1
        if g_ref[g] == 0:
            kvs[_EVICTABLE] += g_cached[g]
            g_last[g] = step
            kvs[_GROUP_LAST_FLOOR] = min(kvs[_GROUP_LAST_FLOOR], step)
        sref[slot] = False

@nb.njit(cache=True, inline="always")
def n_beta_features(constants):
    return int(constants[0])


@nb.njit(cache=True, inline="always")
def _aggregate_dot(c, start, stride, p_tok, p_ctx, p_pairs, n_p, n_d, d_ctx, offload):
    """The step's aggregates (AGGREGATES order) dotted with c[start], c[start + stride], ..."""
    return (p_tok * c[start] + p_ctx * c[start + stride] + p_pairs * c[start + 2 * stride]
            + n_p * c[start + 3 * stride] + n_d * c[start + 4 * stride]
            + d_ctx * c[start + 5 * stride] + offload * c[start + 6 * stride])


@nb.njit(cache=True, inline="always")
def _cuda_graph_tokens(tokens, max_tokens):
    """= features.beta.cuda_graph_tokens for one step."""
    if max_tokens <= 0.0 or tokens > max_tokens:
        return tokens
    if tokens <= 2.0:
        return np.ceil(tokens)
    if tokens <= 4.0:
        return 4.0
    if tokens <= 256.0:
        return np.ceil(tokens / 8.0) * 8.0
    return np.ceil(tokens / 16.0) * 16.0


@nb.njit(cache=True)
def _features(c, p_tok, p_ctx, p_pairs, n_p, n_d, d_ctx, offload, out):
    """Beta features (s) of one step from its aggregates into `out`
    (= features.beta.beta_features for one row)."""
    n_feat = int(c[0])
    n_agg = int(c[1])
    w0 = _HEADER
    b0 = _HEADER + n_agg * n_feat
    for f in range(n_feat):
        out[f] = c[b0 + f] + _aggregate_dot(c, w0 + f, n_feat, p_tok, p_ctx, p_pairs, n_p, n_d,
                                            d_ctx, offload)
    n_exp = c[4]
    routed_m = 0.0
    if n_exp > 0:
        miss = 1.0 - c[5] / n_exp
        routed_m = c[3] * n_exp * (1.0 - miss ** _cuda_graph_tokens(p_tok + n_d, c[12]))
        out[int(c[2])] += routed_m
    # measured all-reduces of the step (= FeatureMap.allreduce_term_s: np.interp)
    a0 = b0 + n_feat
    k0 = a0 + n_agg
    n_curve = int(c[k0])
    if n_curve > 0:
        tokens = p_tok + n_d
        t0 = k0 + 1
        s0 = t0 + n_curve
        if tokens <= c[t0]:
            ar = c[s0]
        elif tokens >= c[t0 + n_curve - 1]:
            ar = c[s0 + n_curve - 1]
        else:
            j = 1
            while c[t0 + j] < tokens:
                j += 1
            x0, x1 = c[t0 + j - 1], c[t0 + j]
            ar = c[s0 + j - 1] + (c[s0 + j] - c[s0 + j - 1]) * (tokens - x0) / (x1 - x0)
        out[int(c[10])] += ar
    # a roofline per kernel group: the compute columns keep only the dense GEMMs' FLOP
    # time beyond their weights', the fused-MoE kernels' beyond the experts' bytes and
    # attention's beyond the KV bytes (= features.beta.roofline_excess)
    ip, idc = int(c[6]), int(c[7])
    compute = out[ip] + out[idc]
    if compute > 0.0:
        routed_c = c[11] * (p_tok + n_d)
        attention_c = _aggregate_dot(c, a0, 1, p_tok, p_ctx, p_pairs, n_p, n_d, d_ctx, offload)
        dense = compute - attention_c - routed_c - c[9] * (out[int(c[2])] - routed_m)
        routed = routed_c - c[9] * routed_m
        attention = attention_c - c[9] * out[int(c[8])]
        excess = ((dense if dense > 0.0 else 0.0) + (routed if routed > 0.0 else 0.0)
                  + (attention if attention > 0.0 else 0.0))
        share = excess / compute
        out[ip] *= share
        out[idc] *= share


__all__ = ["EngineConfig", "EngineRun", "StepRecords", "run_engine", "run_engine_arrays",
           "deployment_constants", "step_features", "AGGREGATES"]


def step_features(constants, aggregates: dict) -> np.ndarray:
    """Beta features [n_steps, n_beta] from aggregate arrays, via the compiled kernel."""
    agg = np.column_stack([np.asarray(aggregates[k], dtype=np.float64) for k in AGGREGATES])
    return _features_rows(np.asarray(constants, np.float64), agg)


@nb.njit(cache=True)
def _features_rows(constants, agg):
    n = agg.shape[0]
    k = n_beta_features(constants)
    out = np.zeros((n, k))
    buf = np.zeros(k)
    for i in range(n):
        _features(constants, agg[i, 0], agg[i, 1], agg[i, 2], agg[i, 3], agg[i, 4],
                  agg[i, 5], agg[i, 6], buf)
        out[i, :] = buf
    return out


# ---------------------------------------------------------------------------------------
# compiled core
# ---------------------------------------------------------------------------------------

@nb.njit(cache=True, inline="always")
def _cdiv(a, b):
    return (a + b - 1) // b


# KV counters shared with the helpers (int64 vector); _FREED: blocks released but not yet
# reused (vLLM's free-block queue behind the never-used blocks), a ring of (release step,
# blocks) entries from _FREED_HEAD, _FREED_ENTRIES long
_PRIV, _CACHED, _EVICTABLE, _CPU_USED, _OFFLOAD, _NKV, _OVERFLOW = 0, 1, 2, 3, 4, 5, 6
_FREED, _FREED_HEAD, _FREED_ENTRIES = 7, 8, 9
_GROUP_LAST_FLOOR = 10    # at most the oldest last use of an evictable group prefix
_N_KVS = 11
_NO_GROUP = 1 << 62


@nb.njit(cache=True, inline="always")
def _never_used(kvs, kv_total):
    """Blocks holding nothing: never used, or taken back from the freed-block queue
    (`_make_room`); an allocation uses these before it evicts anything."""
    return kv_total - kvs[_PRIV] - kvs[_CACHED] - kvs[_FREED]


@nb.njit(cache=True, inline="always")
def _allocatable(kvs, kv_total):
    """Blocks an allocation can have: never used, freed, or an unreferenced group prefix."""
    return kv_total - kvs[_PRIV] - kvs[_CACHED] + kvs[_EVICTABLE]


@nb.njit(cache=True, inline="always")
def _free_later(kvs, freed_step, freed_n, step, n_blocks):
    """Queue `n_blocks` released at `step` (a full ring folds them into its newest entry)."""
    if n_blocks <= 0:
        return
    size = freed_step.shape[0]
    kvs[_FREED] += n_blocks
    if kvs[_FREED_ENTRIES] == size:
        freed_n[(kvs[_FREED_HEAD] + size - 1) % size] += n_blocks
        return
    tail = (kvs[_FREED_HEAD] + kvs[_FREED_ENTRIES]) % size
    freed_step[tail] = step
    freed_n[tail] = n_blocks
    kvs[_FREED_ENTRIES] += 1


@nb.njit(cache=True)
def _kv_event(rec_kv, kvs, step, kind, g, n_blocks, req):
    i = kvs[_NKV]
    if i >= rec_kv.shape[0]:
        kvs[_OVERFLOW] = 1
        return
    rec_kv[i, 0] = step
    rec_kv[i, 1] = kind
    rec_kv[i, 2] = g
    rec_kv[i, 3] = n_blocks
    rec_kv[i, 4] = req
    kvs[_NKV] += 1


@nb.njit(cache=True, inline="always")
def _lru_group(keep_g, g_cached, g_ref, g_last):
    """The unreferenced cached group prefix used longest ago (not `keep_g`), or -1."""
    best = -1
    for g in range(g_cached.shape[0]):
        if g_ref[g] == 0 and g_cached[g] > 0 and g != keep_g:
            if best < 0 or g_last[g] < g_last[best]:
                best = g
    return best


@nb.njit(cache=True)
def _make_room(need, keep_g, kv_total, cpu_total, g_cached, g_ref, g_last, g_cpu, g_cpu_last,
               kvs, step, record, rec_kv, freed_step, freed_n):
    """Reuse released blocks and evict unused group prefixes, oldest release first (a
    group's release: its last use), until `need` never-used blocks are free; with CPU
    offload, an evicted prefix is stored to CPU (LRU over groups on CPU)."""
    ng = g_cached.shape[0]
    size = freed_step.shape[0]
    best = -2                        # the LRU group, found only when a group may be older
    while need > _never_used(kvs, kv_total):
        head = kvs[_FREED_HEAD]
        if best == -2 and not (kvs[_FREED_ENTRIES] > 0
                               and freed_step[head] <= kvs[_GROUP_LAST_FLOOR]):
            best = _lru_group(keep_g, g_cached, g_ref, g_last)
            kvs[_GROUP_LAST_FLOOR] = g_last[best] if best >= 0 else _NO_GROUP
        if kvs[_FREED_ENTRIES] > 0 and (best < 0 or freed_step[head] <= g_last[best]):
            # the whole entry: its blocks hold nothing a request can hit, so taking them
            # early changes no eviction and saves calls
            kvs[_FREED] -= freed_n[head]
            freed_n[head] = 0
            kvs[_FREED_HEAD] = (head + 1) % size
            kvs[_FREED_ENTRIES] -= 1
            continue
        if best < 0:
            break
        nb_ev = g_cached[best]
        g_cached[best] = 0
        kvs[_CACHED] -= nb_ev
        kvs[_EVICTABLE] -= nb_ev
        if record:
            _kv_event(rec_kv, kvs, step, KV_REMOVE_GPU, best, nb_ev, -1)
        if cpu_total > 0 and g_cpu[best] < nb_ev <= cpu_total:
            add = nb_ev - g_cpu[best]
            while kvs[_CPU_USED] + add > cpu_total:
                worst = -1
                for g in range(ng):
                    if g != best and g != keep_g and g_cpu[g] > 0:
                        if worst < 0 or g_cpu_last[g] < g_cpu_last[worst]:
                            worst = g
                if worst < 0:
                    break
                kvs[_CPU_USED] -= g_cpu[worst]
                if record:
                    _kv_event(rec_kv, kvs, step, KV_REMOVE_CPU, worst, g_cpu[worst], -1)
                g_cpu[worst] = 0
            if kvs[_CPU_USED] + add <= cpu_total:
                g_cpu[best] = nb_ev
                g_cpu_last[best] = step
                kvs[_CPU_USED] += add
                kvs[_OFFLOAD] += add
                if record:
                    _kv_event(rec_kv, kvs, step, KV_STORE_CPU, best, add, -1)
        best = -2


@nb.njit(cache=True, nogil=True)
def _simulate(queued_s, order, prompt, output, group, prefix_tok, n_groups,
              budget_max, max_seqs, max_model_len, bs, kv_total, prefix_on, chunked,
              cpu_total, async_sched, constants, beta, sigma, nu, seed, record,
              rec_t, rec_agg, rec_int, rec_ent, rec_pre, rec_kv):
    """The step loop. Record arrays are preallocated by the caller (capacity = rows);
    on overflow recording stops and the returned flag is set (caller retries larger).

    Running requests live in slots (admission order). A request's token counts are
    advanced while it is scheduled; first-token, finish and prefix-cache updates are
    applied after the step time is known. Finished slots are marked dead and compacted
    lazily (at most DEAD_MAX dead slots), which keeps the per-step work to one pass.
    """
    n = prompt.shape[0]
    np.random.seed(seed)
    n_beta = beta.shape[0]
    fbuf = np.zeros(n_beta)
    DEAD_MAX = 32

    # per-request state (cold: touched at admission, preemption and completion)
    nout = np.zeros(n, np.int64)
    npre = np.zeros(n, np.int64)
    status = np.zeros(n, np.int64)
    reason = np.zeros(n, np.int64)
    sched_s = np.full(n, np.nan)
    ft_s = np.full(n, np.nan)
    fin_s = np.full(n, np.nan)
    q_step = np.full(n, -1, np.int64)
    s_step = np.full(n, -1, np.int64)
    ft_step = np.full(n, -1, np.int64)
    fin_step = np.full(n, -1, np.int64)
    pf_computed = np.zeros(n, np.int64)
    hit_tok = np.zeros(n, np.int64)

    # running slots (hot state, in running order); dead slots await compaction
    m1 = max_seqs + DEAD_MAX + 1
    sr = np.empty(m1, np.int64)      # request index
    sc = np.empty(m1, np.int64)      # num_computed_tokens
    sn = np.empty(m1, np.int64)      # output tokens so far
    sp = np.empty(m1, np.int64)      # prompt tokens
    so = np.empty(m1, np.int64)      # output tokens wanted
    ssh = np.empty(m1, np.int64)     # shared (group prefix) blocks referenced
    spv = np.empty(m1, np.int64)     # own blocks
    sk = np.zeros(m1, np.int64)      # tokens scheduled this step
    scb = np.empty(m1, np.int64)     # computed before this step
    sprod = np.zeros(m1, np.int64)   # 1 if the step produced a token for the slot
    sref = np.zeros(m1, np.bool_)    # holds a reference on its group prefix
    sdead = np.zeros(m1, np.bool_)   # finished
    sfb = np.zeros(m1, np.int64)     # full blocks of its group prefix (0 without a group)
    ev_ft = np.empty(m1, np.int64)   # slots with their first token this step
    ev_fin = np.empty(m1, np.int64)  # slots finishing this step
    ev_pro = np.empty(m1, np.int64)  # slots that may extend their group's cached prefix
    r_n = 0                          # slots in use (live + dead)
    n_dead = 0

    # prefix groups
    ng = max(n_groups, 1)
    g_cached = np.zeros(ng, np.int64)
    g_ref = np.zeros(ng, np.int64)
    g_last = np.zeros(ng, np.int64)
    g_cpu = np.zeros(ng, np.int64)
    g_cpu_last = np.zeros(ng, np.int64)
    kvs = np.zeros(_N_KVS, np.int64)
    kvs[_GROUP_LAST_FLOOR] = _NO_GROUP
    freed_size = max(min(kv_total, 4 * n + 1024), 1)
    freed_step = np.zeros(freed_size, np.int64)
    freed_n = np.zeros(freed_size, np.int64)

    # waiting queue: ring buffer (each request at most once in it)
    cap = n + 1
    wbuf = np.empty(cap, np.int64)
    w_head = 0
    w_n = 0

    n_rec = 0
    n_ent = 0
    n_pre = 0

    t = 0.0
    busy = 0.0
    step = 0
    ptr = 0
    done = 0
    fin_since = 0
    prev_start = 0.0   # start of the step before this one
    in_flight = False  # a step ran right before t (async scheduling: this one was
                       # scheduled when that one started)
    while done < n:
        # -- arrivals into the waiting queue (async scheduling: only those queued before
        #    the previous step started, when this step was scheduled)
        cutoff = prev_start if (async_sched and in_flight) else t
        while ptr < n and queued_s[order[ptr]] <= cutoff:
            r = order[ptr]
            ptr += 1
            q_step[r] = step
            if prompt[r] + output[r] > max_model_len:
                status[r] = 1
                reason[r] = 1
                done += 1
                continue
            if _cdiv(prompt[r] + output[r], bs) > kv_total:
                status[r] = 1
                reason[r] = 2
                done += 1
                continue
            wbuf[(w_head + w_n) % cap] = r
            w_n += 1
        # -- lazy compaction of finished slots (keeps running order)
        if n_dead >= DEAD_MAX or (n_dead > 0 and r_n - n_dead == 0):
            m = 0
            for j in range(r_n):
                if not sdead[j]:
                    if m != j:
                        sr[m] = sr[j]
                        sc[m] = sc[j]
                        sn[m] = sn[j]
                        sp[m] = sp[j]
                        so[m] = so[j]
                        ssh[m] = ssh[j]
                        spv[m] = spv[j]
                        sref[m] = sref[j]
                        sfb[m] = sfb[j]
                        sdead[m] = False
                    m += 1
            r_n = m
            n_dead = 0
        if r_n == 0 and w_n == 0:
            in_flight = False  # an idle engine schedules as soon as a request is queued
            if ptr < n and queued_s[order[ptr]] <= t:
                continue
            if ptr >= n:
                break
            t = queued_s[order[ptr]]
            continue

        step += 1
        budget = budget_max
        n_preempted = 0
        kvs[_OFFLOAD] = 0
        p_tok = 0.0
        p_ctx = 0.0
        p_pairs = 0.0
        n_p = 0.0
        n_d = 0.0
        d_ctx = 0.0
        n_ft = 0
        n_fin = 0
        n_pro = 0

        # -- (a) running requests, in running order
        i = 0
        while i < r_n and budget > 0:
            if sdead[i]:
                sk[i] = 0
                i += 1
                continue
            c = sc[i]
            new = sp[i] + sn[i] - c
            if new > budget:
                new = budget
            held = ssh[i] + spv[i]
            need = 0
            if c + new > held * bs:          # (cheap test first: division is slow)
                need = _cdiv(c + new, bs) - held
            if need > 0:
                stop = False
                while need > _allocatable(kvs, kv_total):
                    # preempt the last running request (recompute)
                    while sdead[r_n - 1]:
                        r_n -= 1
                        n_dead -= 1
                    v = r_n - 1
                    r_n -= 1
                    rv = sr[v]
                    _release_blocks(kvs, spv, sref, g_ref, g_cached, g_last, group, v, rv, step,
                                    freed_step, freed_n)
                    nout[rv] = sn[v]
                    npre[rv] += 1
                    n_preempted += 1
                    w_head = (w_head - 1 + cap) % cap
                    wbuf[w_head] = rv
                    w_n += 1
                    if record and n_pre >= rec_pre.shape[0]:
                        kvs[_OVERFLOW] = 1
                    elif record:
                        rec_pre[n_pre, 0] = step
                        rec_pre[n_pre, 1] = rv
                        n_pre += 1
                    if v == i:
                        stop = True
                        break
                if stop:
                    break
                if need > _never_used(kvs, kv_total):
                    _make_room(need, -1, kv_total, cpu_total, g_cached, g_ref, g_last,
                               g_cpu, g_cpu_last, kvs, step, record, rec_kv, freed_step, freed_n)
                spv[i] += need
                kvs[_PRIV] += need
            sk[i] = new
            scb[i] = c
            if new == 1 and sn[i] >= 1 and c == sp[i] + sn[i] - 1:
                n_d += 1.0
                d_ctx += c
            else:
                n_p += 1.0
                p_tok += new
                p_ctx += c
                p_pairs += new * c + new * (new + 1.0) / 2.0
                if c < sp[i]:
                    pf_computed[sr[i]] += min(c + new, sp[i]) - c
            # advance the request (outputs become visible at step end)
            sc[i] = c + new
            # only a slot holding fewer prefix blocks than its group's full prefix, and
            # computed past that prefix, can extend the group's cache at step end
            if sref[i] and ssh[i] < sfb[i] and c + new >= sfb[i] * bs:
                ev_pro[n_pro] = i
                n_pro += 1
            if c + new == sp[i] + sn[i]:
                sn[i] += 1
                sprod[i] = 1
                if sn[i] == 1:
                    ev_ft[n_ft] = i
                    n_ft += 1
                if sn[i] >= so[i]:
                    ev_fin[n_fin] = i
                    n_fin += 1
            else:
                sprod[i] = 0
            budget -= new
            i += 1
        for j in range(i, r_n):
            sk[j] = 0
            sprod[j] = 0

        # -- (b) waiting requests, FCFS
        if n_preempted == 0:
            while w_n > 0 and budget > 0 and r_n - n_dead < max_seqs:
                r = wbuf[w_head]
                g = group[r]
                ntok = prompt[r] + nout[r]
                hit_blocks = 0
                load = 0
                use_group = prefix_on and g >= 0
                if use_group:
                    cap_blocks = min(prefix_tok[r] // bs, (ntok - 1) // bs)
                    hit_blocks = min(g_cached[g], cap_blocks)
                    if cpu_total > 0 and g_cpu[g] > hit_blocks:
                        load = max(min(g_cpu[g], cap_blocks) - hit_blocks, 0)
                start = (hit_blocks + load) * bs
                new = ntok - start
                if not chunked and new > budget:
                    break
                if new > budget:
                    new = budget
                need = _cdiv(start + new, bs) - hit_blocks
                avail = _allocatable(kvs, kv_total)
                if use_group and g_ref[g] == 0:
                    avail -= g_cached[g]     # the prefix we hit cannot be evicted
                if need > avail:
                    break
                w_head = (w_head + 1) % cap
                w_n -= 1
                # slots stay < m1: live < max_seqs and dead < DEAD_MAX (compacted at step start)
                j = r_n
                r_n += 1
                sdead[j] = False
                sref[j] = False
                if use_group:
                    if g_ref[g] == 0:
                        kvs[_EVICTABLE] -= g_cached[g]
                    g_ref[g] += 1
                    g_last[g] = step
                    sref[j] = True
                    sfb[j] = prefix_tok[r] // bs
                if need > _never_used(kvs, kv_total):
                    _make_room(need, g, kv_total, cpu_total, g_cached, g_ref, g_last,
                               g_cpu, g_cpu_last, kvs, step, record, rec_kv, freed_step, freed_n)
                if load > 0:
                    # blocks loaded from CPU join the group's GPU prefix cache
                    g_cached[g] += load
                    kvs[_CACHED] += load
                    g_cpu_last[g] = step
                    kvs[_OFFLOAD] += load
                    need -= load
                    if record:
                        _kv_event(rec_kv, kvs, step, KV_LOAD_CPU, g, load, r)
                sr[j] = r
                sp[j] = prompt[r]
                so[j] = output[r]
                ssh[j] = hit_blocks + load
                spv[j] = need
                kvs[_PRIV] += need
                hit_tok[r] += start
                if s_step[r] < 0:
                    s_step[r] = step
                    sched_s[r] = t
                sk[j] = new
                scb[j] = start
                nj = nout[r]
                if new == 1 and nj >= 1 and start == prompt[r] + nj - 1:
                    n_d += 1.0
                    d_ctx += start
                else:
                    n_p += 1.0
                    p_tok += new
                    p_ctx += start
                    p_pairs += new * start + new * (new + 1.0) / 2.0
                    if start < prompt[r]:
                        pf_computed[r] += min(start + new, prompt[r]) - start
                sc[j] = start + new
                if sref[j] and ssh[j] < sfb[j] and start + new >= sfb[j] * bs:
                    ev_pro[n_pro] = j
                    n_pro += 1
                if start + new == prompt[r] + nj:
                    sn[j] = nj + 1
                    sprod[j] = 1
                    if nj + 1 == 1:
                        ev_ft[n_ft] = j
                        n_ft += 1
                    if nj + 1 >= output[r]:
                        ev_fin[n_fin] = j
                        n_fin += 1
                else:
                    sn[j] = nj
                    sprod[j] = 0
                budget -= new

        # -- step time from the aggregates (accumulated while scheduling)
        offload = float(kvs[_OFFLOAD])
        _features(constants, p_tok, p_ctx, p_pairs, n_p, n_d, d_ctx, offload, fbuf)
        dur = 0.0
        for j in range(n_beta):
            dur += fbuf[j] * beta[j]
        if sigma > 0.0:
            eps = 1.0 + sigma * np.random.standard_t(nu)
            if eps < 0.05:
                eps = 0.05
            dur *= eps
        t_end = t + dur

        if record and (n_rec >= rec_t.shape[0] or n_ent + r_n > rec_ent.shape[0]):
            kvs[_OVERFLOW] = 1
        elif record:
            rec_t[n_rec, 0] = t
            rec_t[n_rec, 1] = t_end
            rec_agg[n_rec, 0] = p_tok
            rec_agg[n_rec, 1] = p_ctx
            rec_agg[n_rec, 2] = p_pairs
            rec_agg[n_rec, 3] = n_p
            rec_agg[n_rec, 4] = n_d
            rec_agg[n_rec, 5] = d_ctx
            rec_agg[n_rec, 6] = offload
            sp_n = 0
            sp_t = 0
            sd_n = 0
            sd_t = 0
            for j in range(r_n):
                if sdead[j]:
                    continue
                k = sk[j]
                out_before = sn[j] - sprod[j]
                if k > 0:
                    if out_before == 0:
                        sp_n += 1
                        sp_t += k
                    else:
                        sd_n += 1
                        sd_t += k
                rec_ent[n_ent, 0] = step
                rec_ent[n_ent, 1] = sr[j]
                rec_ent[n_ent, 2] = k
                rec_ent[n_ent, 3] = scb[j] if k > 0 else sc[j]
                rec_ent[n_ent, 4] = out_before
                rec_ent[n_ent, 5] = npre[sr[j]]
                rec_ent[n_ent, 6] = ssh[j] + spv[j]
                rec_ent[n_ent, 7] = ssh[j]
                n_ent += 1
            rec_int[n_rec, 0] = step
            rec_int[n_rec, 1] = r_n - n_dead
            rec_int[n_rec, 2] = w_n
            rec_int[n_rec, 3] = kvs[_PRIV] + kvs[_CACHED] - kvs[_EVICTABLE]
            rec_int[n_rec, 4] = sp_n
            rec_int[n_rec, 5] = sp_t
            rec_int[n_rec, 6] = sd_n
            rec_int[n_rec, 7] = sd_t
            rec_int[n_rec, 8] = fin_since
            rec_int[n_rec, 9] = n_preempted
            n_rec += 1

        # -- outputs at step end: prefix blocks become cached, first tokens, finishes
        for e in range(n_pro):
            j = ev_pro[e]
            r = sr[j]
            g = group[r]
            full = prefix_tok[r] // bs
            if sc[j] >= full * bs and g_cached[g] < full and ssh[j] == g_cached[g]:
                delta = full - g_cached[g]
                spv[j] -= delta
                kvs[_PRIV] -= delta
                ssh[j] = full
                g_cached[g] = full
                kvs[_CACHED] += delta
                if record:
                    _kv_event(rec_kv, kvs, step, KV_STORE_GPU, g, delta, r)
        for e in range(n_ft):
            r = sr[ev_ft[e]]
            ft_s[r] = t_end
            ft_step[r] = step
        for e in range(n_fin):
            j = ev_fin[e]
            r = sr[j]
            fin_s[r] = t_end
            fin_step[r] = step
            nout[r] = sn[j]
            _release_blocks(kvs, spv, sref, g_ref, g_cached, g_last, group, j, r, step,
                            freed_step, freed_n)
            sdead[j] = True
            n_dead += 1
            done += 1
        fin_since = n_fin
        busy += dur
        prev_start = t
        in_flight = True
        t = t_end

    return (sched_s, ft_s, fin_s, npre, status, reason, q_step, s_step, ft_step, fin_step,
            pf_computed, hit_tok, step, busy, t, n_rec, n_ent, n_pre, kvs[_NKV],
            kvs[_OVERFLOW])


# ---------------------------------------------------------------------------------------
# Python entry points
# ---------------------------------------------------------------------------------------

def run_engine_arrays(arrival_s, prompt_tokens, output_tokens, prefix_group, prefix_tokens,
                      config: EngineConfig, constants, beta, alpha_us, *,
                      noise_sigma: float = 0.0, noise_nu: float = 30.0, seed: int = 0,
                      record: bool = False) -> EngineRun:
    """Simulate one draw. `alpha_us` in µs, ALPHA_FEATURES order (const, per prompt token,
    per output token, per request decoding when a token is returned); `beta` in the order of
    the constants' feature layout (BETA_FEATURES)."""
    arrival_s = np.ascontiguousarray(arrival_s, dtype=np.float64)
    prompt = np.ascontiguousarray(prompt_tokens, dtype=np.int64)
    output = np.ascontiguousarray(output_tokens, dtype=np.int64)
    group = np.ascontiguousarray(prefix_group, dtype=np.int64)
    ptok = np.ascontiguousarray(prefix_tokens, dtype=np.int64)
    a = np.asarray(alpha_us, dtype=np.float64)
    if a.shape != (len(ALPHA_FEATURES),):
        raise ValueError(f"alpha_us must have {len(ALPHA_FEATURES)} entries "
                         f"({', '.join(ALPHA_FEATURES)}), got {a.shape}")
    beta = np.ascontiguousarray(beta, dtype=np.float64)
    constants = np.ascontiguousarray(constants, dtype=np.float64)
    k = int(n_beta_features(constants))
    if beta.shape != (k,):
        raise ValueError(f"beta must have {k} entries, got {beta.shape}")
    queued_s = arrival_s + (a[0] + a[1] * prompt) * US
    if config.cold_start_s > 0 and len(arrival_s):
        # a fresh server admits nothing until its start-up is over
        queued_s = np.maximum(queued_s, arrival_s.min() + float(config.cold_start_s))
    order = np.argsort(queued_s, kind="stable").astype(np.int64)
    n_groups = int(group.max()) + 1 if len(group) and group.max() >= 0 else 0
    args = (queued_s, order, prompt, output, group, ptok, n_groups,
            int(config.max_num_batched_tokens), int(config.max_num_seqs),
            int(config.max_model_len), int(config.block_size), int(config.kv_blocks_total),
            bool(config.enable_prefix_caching), bool(config.enable_chunked_prefill),
            int(config.cpu_offload_blocks), bool(config.async_scheduling), constants, beta, float(noise_sigma),
            float(noise_nu), int(seed) % (2**32), bool(record))
    if record:
        # first guess (retried with larger buffers on overflow): steps ~ decode tokens
        # over a batch of 16 + prefill chunks; entries ~ running request-steps
        steps_est = int(np.sum(prompt) // int(config.max_num_batched_tokens)
                        + np.sum(output) // 16 + 1024)
        entries_est = int(1.3 * np.sum(output) + 4 * len(prompt) + 1024)
        caps = [steps_est, entries_est, 1024, 4096]
    else:
        caps = [1, 1, 1, 1]
    while True:
        bufs = (np.zeros((caps[0], 2)), np.zeros((caps[0], N_AGG)),
                np.zeros((caps[0], len(STEP_INT_COLS)), np.int64),
                np.zeros((caps[1], len(ENTRY_COLS)), np.int64), np.zeros((caps[2], 2), np.int64),
                np.zeros((caps[3], len(KV_EVENT_COLS)), np.int64))
        out = _simulate(*args, *bufs)
        (sched_s, ft_s, fin_s, npre, status, reason, q_step, s_step, ft_step, fin_step,
         pf_comp, hit_tok, n_steps, busy, t_end, n_rec, n_ent, n_pre, n_kv, overflow) = out
        if not (record and overflow):
            break
        caps = [max(c * 2, int(n_steps) + 16) if i == 0 else c * 4 for i, c in enumerate(caps)]
    behind_first, behind_last = decoding_at(ft_s, fin_s, np.stack([ft_s, fin_s]))
    e2e = fin_s + (a[2] * output + a[3] * behind_last) * US - arrival_s
    ttft = ft_s + a[3] * behind_first * US - arrival_s
    steps = None
    if record:
        rt, ragg, rint, rent, rpre, rkv = bufs
        steps = StepRecords(rt[:n_rec, 0].copy(), rt[:n_rec, 1].copy(), ragg[:n_rec].copy(),
                            rint[:n_rec].copy(), rent[:n_ent].copy(), rpre[:n_pre].copy(),
                            rkv[:n_kv].copy())
    return EngineRun(queued_s, sched_s, ft_s, fin_s, e2e, ttft, npre, status, reason,
                     q_step, s_step, ft_step, fin_step, pf_comp, hit_tok, int(n_steps),
                     float(busy), float(t_end), steps)


def run_engine(workload, config: EngineConfig, constants, beta, alpha_us, **kwargs) -> EngineRun:
    """Simulate `workload` (a `Workload`) for one coefficient draw (see run_engine_arrays)."""
    return run_engine_arrays(workload.arrival_s, workload.prompt_tokens, workload.output_tokens,
                             workload.prefix_group, workload.prefix_tokens, config, constants,
                             beta, alpha_us, **kwargs)


def kv_blocks_from_deployment(deployment, gpu_memory_utilization: float) -> int:
    """KV cache capacity in blocks from the deployment's memory model."""
    return int(deployment.kv_cache_blocks(gpu_memory_utilization))
