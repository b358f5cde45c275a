"""Request workloads for the simulator: arrays of arrivals and token counts.

A `Workload` is what the engine consumes. Generators build one from load stages
(`ARRIVALS`: evenly spaced, Poisson, or inference-perf's own load timers) and token-length
distributions, seeded, and inference-perf's shared-prefix data as it is sent: a fixed
prompt set cycled in send order (`PromptSet`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bayesblis.errors import InputError

DISTRIBUTIONS = ("fixed", "uniform", "normal", "lognormal")
ARRIVALS = ("constant", "poisson", "normalized_exponential", "poisson_per_second")
"""Arrival processes of a stage: evenly spaced, exponential gaps, and inference-perf's own
`constant` and `poisson` load timers (`stage_arrivals`)."""


@dataclass
class Workload:
    """Requests sorted by arrival.

    Fields (numpy arrays, one entry per request): `arrival_s` (s from the workload
    start), `prompt_tokens`, `output_tokens` (>= 1), `prefix_group` (int, -1 = no shared
    prefix), `prefix_tokens` (length of the group's shared prefix inside the prompt),
    `stage` (index of the load stage the request belongs to), `has_error` (measured
    request without valid client timings: simulated but excluded from latency metrics).
    `stage_bounds_s` holds the [start, end) of each stage.
    """

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    prefix_group: np.ndarray = None
    prefix_tokens: np.ndarray = None
    stage: np.ndarray = None
    has_error: np.ndarray = None
    stage_bounds_s: list = field(default_factory=list)

    def __post_init__(self):
        n = len(self.arrival_s)
        self.arrival_s = np.asarray(self.arrival_s, dtype=np.float64)
        self.prompt_tokens = np.asarray(self.prompt_tokens, dtype=np.int64)
        self.output_tokens = np.asarray(self.output_tokens, dtype=np.int64)
        self.prefix_group = (np.full(n, -1, np.int64) if self.prefix_group is None
                             else np.asarray(self.prefix_group, dtype=np.int64))
        self.prefix_tokens = (np.zeros(n, np.int64) if self.prefix_tokens is None
                              else np.asarray(self.prefix_tokens, dtype=np.int64))
        self.stage = (np.zeros(n, np.int64) if self.stage is None
                      else np.asarray(self.stage, dtype=np.int64))
        self.has_error = (np.zeros(n, bool) if self.has_error is None
                          else np.asarray(self.has_error, dtype=bool))
        for name in ("prompt_tokens", "output_tokens", "prefix_group", "prefix_tokens",
                     "stage", "has_error"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"Workload.{name} has {len(getattr(self, name))} entries, "
                                 f"arrival_s has {n}")
        if n and np.any(np.diff(self.arrival_s) < 0):
            raise ValueError("Workload.arrival_s must be sorted")
        if np.any(self.prompt_tokens < 1):
            raise ValueError("Workload.prompt_tokens must be >= 1")
        if np.any(self.output_tokens < 1):
            raise ValueError("Workload.output_tokens must be >= 1")
        self.prefix_tokens = np.minimum(np.maximum(self.prefix_tokens, 0), self.prompt_tokens)
        self.prefix_tokens[self.prefix_group < 0] = 0
        if not self.stage_bounds_s:
            end = float(self.arrival_s[-1]) if n else 0.0
            self.stage_bounds_s = [(0.0, end)]

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def n_groups(self) -> int:
        return int(self.prefix_group.max()) + 1 if len(self) and self.prefix_group.max() >= 0 else 0

    @property
    def n_stages(self) -> int:
        return len(self.stage_bounds_s)

    def truncate(self, max_duration_s: float) -> "Workload":
        """Keep the requests arriving before `max_duration_s` (stages cut to match)."""
        keep = self.arrival_s < max_duration_s
        bounds = [(a, min(b, max_duration_s)) for a, b in self.stage_bounds_s if a < max_duration_s]
        return Workload(self.arrival_s[keep], self.prompt_tokens[keep], self.output_tokens[keep],
                        self.prefix_group[keep], self.prefix_tokens[keep], self.stage[keep],
                        self.has_error[keep], bounds or [(0.0, max_duration_s)])


# -- arrivals --------------------------------------------------------------------------

def stage_arrivals(stages, arrival: str = "constant", rng=None):
    """Arrival times (s) and stage indices for `stages` = [{"rate": req/s, "duration": s}].

    `constant`: evenly spaced at 1/rate (first request at the stage start);
    `poisson`: exponential inter-arrival times at the stage's rate;
    `normalized_exponential` and `poisson_per_second`: what inference-perf sends for its
    load types `constant` and `poisson` (see the functions of those names).
    Returns (arrival_s, stage_index, bounds [(start_s, end_s)]).
    """
    rng = np.random.default_rng(0) if rng is None else rng
    times, idx, bounds = [], [], []
    start = 0.0
    for i, st in enumerate(stages):
        rate, dur = float(st["rate"]), float(st["duration"])
        if rate < 0 or dur <= 0:
            raise ValueError(f"stage {i}: rate must be >= 0 and duration > 0, got {st}")
        if rate > 0:
            if arrival == "constant":
                t = start + np.arange(int(np.floor(rate * dur + 1e-9))) / rate
            elif arrival == "poisson":
                n_max = int(rate * dur * 1.5 + 50 * np.sqrt(rate * dur) + 10)
                gaps = rng.exponential(1.0 / rate, size=n_max)
                t = start + np.cumsum(gaps)
                t = t[t < start + dur]
            elif arrival == "normalized_exponential":
                t = start + normalized_exponential(int(rate * dur + 1e-9), dur, rng)
            elif arrival == "poisson_per_second":
                t = start + poisson_per_second(rate, dur, rng)
            else:
                raise ValueError(f"unknown arrival process {arrival!r} (one of {ARRIVALS})")
            times.append(t)
            idx.append(np.full(len(t), i, np.int64))
        bounds.append((start, start + dur))
        start += dur
    if not times:
        return np.zeros(0), np.zeros(0, np.int64), bounds
    return np.concatenate(times), np.concatenate(idx), bounds


def normalized_exponential(n: int, duration_s: float, rng) -> np.ndarray:
    """inference-perf's `constant` load: `n` exponential gaps scaled to sum to
    `duration_s`; returns the `n` send times (s from the stage start, the last at its end)."""
    if n <= 0:
        return np.zeros(0)
    gaps = rng.exponential(1.0, n)
    return np.cumsum(gaps) * (duration_s / gaps.sum())


def poisson_per_second(rate: float, duration_s: float, rng) -> np.ndarray:
    """inference-perf's `poisson` load: each second a Poisson(rate) count of requests,
    spread over that second by `normalized_exponential`."""
    times = [s + normalized_exponential(int(k), 1.0, rng)
             for s, k in enumerate(rng.poisson(rate, int(np.ceil(duration_s))))]
    t = np.concatenate(times) if times else np.zeros(0)
    return t[t <= duration_s]


# -- token lengths ----------------------------------------------------------------------

def sample_tokens(spec, n: int, rng, *, minimum: int = 1) -> np.ndarray:
    """Draw `n` token counts from `spec`.

    `spec` is an int (fixed) or a mapping with `dist` in fixed {value}, uniform
    {min, max} (inclusive), normal {mean, std, min?, max?} (clipped, rounded),
    lognormal {mean, std, min?, max?} (mean and std of the counts, not of the log).
    """
    if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        return np.full(n, max(int(spec), minimum), np.int64)
    if not isinstance(spec, dict) or "dist" not in spec:
        raise ValueError(f"token spec must be an int or a mapping with 'dist', got {spec!r}")
    dist = spec["dist"]
    lo = int(spec.get("min", minimum))
    hi = int(spec.get("max", 10**9))
    if dist == "fixed":
        x = np.full(n, float(spec["value"]))
    elif dist == "uniform":
        x = rng.integers(int(spec["min"]), int(spec["max"]) + 1, size=n).astype(float)
    elif dist == "normal":
        x = rng.normal(float(spec["mean"]), float(spec["std"]), size=n)
    elif dist == "lognormal":
        m, s = float(spec["mean"]), float(spec["std"])
        if m <= 0:
            raise ValueError("lognormal mean must be > 0")
        sig2 = np.log1p((s / m) ** 2)
        x = rng.lognormal(np.log(m) - sig2 / 2, np.sqrt(sig2), size=n)
    else:
        raise ValueError(f"unknown token distribution {dist!r} (one of {DISTRIBUTIONS})")
    return np.clip(np.rint(x), max(lo, minimum), max(hi, minimum)).astype(np.int64)


def generate(stages, prompt, output, *, arrival: str = "constant", prefix=None,
             seed: int = 0) -> Workload:
    """A seeded synthetic workload.

    `prompt`/`output`: token specs (see `sample_tokens`); with `prefix` =
    {"num_groups": G, "system_prompt_len": spec} each request picks a group uniformly
    and its prompt is the group's system prompt followed by `prompt` question tokens
    (inference-perf `shared_prefix` data). Without `prefix`, `prompt` is the whole prompt.
    """
    rng = np.random.default_rng(seed)
    arr, stage, bounds = stage_arrivals(stages, arrival, rng)
    n = len(arr)
    question = sample_tokens(prompt, n, rng)
    out = sample_tokens(output, n, rng)
    if prefix:
        g_count = int(prefix.get("num_groups", 1))
        if g_count < 1:
            raise ValueError("prefix.num_groups must be >= 1")
        sys_len = sample_tokens(prefix.get("system_prompt_len", 0), g_count, rng, minimum=0)
        group = rng.integers(0, g_count, size=n).astype(np.int64)
        ptok = sys_len[group]
        prompt_tokens = ptok + question
    else:
        group = np.full(n, -1, np.int64)
        ptok = np.zeros(n, np.int64)
        prompt_tokens = question
    return Workload(arr, prompt_tokens, out, group, ptok, stage, None, bounds)


# -- inference-perf shared-prefix data ---------------------------------------------------

TOKEN_INFLATION = 1.046
"""Prompt tokens the server counts per nominal token of inference-perf's random prompts.

inference-perf draws random token ids, decodes them to text and sends the text; the
server's tokenizer (plus the completion template) counts more tokens than were drawn. In
the 16 shared H100 runs (Llama-2 and Mixtral tokenizers) the median recorded prompt is
1.039-1.051x `system_prompt_len + question_len` (median over runs 1.046)."""

PROMPT_JITTER_PER_SQRT_TOKEN = 0.27
"""Spread of a prompt's re-tokenized length around its mean: sd = 0.27 sqrt(tokens)
(recorded sd 5.5-7.9 tokens at 566-786 tokens in the same runs)."""

OUTPUT_EXTRA_TOKENS = 0
"""Output tokens generated beyond `output_len`: none, inference-perf sends it as `max_tokens`
with `ignore_eos` (the client's recorded counts, a re-tokenization of the text, run +1 to +2
on the shared runs; `io.inference_perf.correct_output_counts`)."""

DEFAULT_GROUPS = 10
DEFAULT_PROMPTS_PER_GROUP = 10
"""inference-perf's `SharedPrefix` defaults (`num_groups`, `num_prompts_per_group`)."""


@dataclass
class PromptSet:
    """The fixed prompts inference-perf's shared-prefix generator sends in turn.

    inference-perf builds `num_groups x prompts_per_group` prompts once (a random system
    prompt per group followed by a random question), shuffles them, and request ``i``
    carries prompt ``i mod P`` (P = the set's size). With prefix caching every prompt after
    its first occurrence is served from the cache (all but its last partial block), so the
    set is modelled as P prefix groups each cached whole: `columns` gives prefix group =
    prompt id and prefix tokens = the whole prompt, as replay does (`io/prompt_reuse.py`).
    Arrays are in send order, one entry per prompt.
    """

    prompt_tokens: np.ndarray
    output_tokens: np.ndarray

    def __len__(self) -> int:
        return len(self.prompt_tokens)

    @classmethod
    def from_spec(cls, sp: dict, seed: int = 0) -> "PromptSet":
        """The set of a `shared_prefix` spec (keys of `SHARED_PREFIX_KEYS`), seeded."""
        groups = int(sp.get("num_groups", DEFAULT_GROUPS))
        per_group = int(sp.get("prompts_per_group", DEFAULT_PROMPTS_PER_GROUP))
        nominal = int(sp.get("system_prompt_len", 0)) + int(sp["question_len"])
        inflation = float(sp.get("token_inflation", TOKEN_INFLATION))
        extra = int(sp.get("output_extra_tokens", OUTPUT_EXTRA_TOKENS))
        if groups < 1 or per_group < 1:
            raise ValueError("num_groups and prompts_per_group must be >= 1")
        rng = np.random.default_rng([int(seed), 7919])
        n = groups * per_group
        mean = inflation * nominal
        jitter = rng.normal(0.0, PROMPT_JITTER_PER_SQRT_TOKEN * np.sqrt(max(mean, 1.0)), n)
        prompt = np.maximum(np.rint(mean + jitter), 1).astype(np.int64)
        return cls(prompt[rng.permutation(n)],
                   np.full(n, max(1, int(sp["output_len"]) + extra), np.int64))

    def columns(self, index) -> dict:
        """Token counts and prefix columns of the requests sent at positions `index`."""
        p = np.asarray(index, np.int64) % len(self)
        return {"prompt_tokens": self.prompt_tokens[p], "output_tokens": self.output_tokens[p],
                "prefix_group": p, "prefix_tokens": self.prompt_tokens[p]}


SHARED_PREFIX_KEYS = {"num_groups", "prompts_per_group", "system_prompt_len", "question_len",
                      "output_len", "multi_turn", "token_inflation", "output_extra_tokens"}


def shared_prefix(stages, *, arrival: str = "normalized_exponential", seed: int = 0,
                  **spec) -> Workload:
    """inference-perf `shared_prefix` data (`PromptSet`) sent at the stages' rates.

    `spec`: keys of `SHARED_PREFIX_KEYS` (`data_specs/scenario.md`). `multi_turn`
    (inference-perf's `enable_multi_turn_chat`) changes no token count: the recorded prompts
    of multi-turn runs do not grow from round to round."""
    unknown = sorted(set(spec) - SHARED_PREFIX_KEYS)
    if unknown:
        raise ValueError(f"unknown shared_prefix key(s) {unknown} (one of {sorted(SHARED_PREFIX_KEYS)})")
    rng = np.random.default_rng(seed)
    arr, stage, bounds = stage_arrivals(stages, arrival, rng)
    cols = PromptSet.from_spec(spec, seed).columns(np.arange(len(arr)))
    return Workload(arr, cols["prompt_tokens"], cols["output_tokens"], cols["prefix_group"],
                    cols["prefix_tokens"], stage, None, bounds)


def check_token_spec(spec, path, field_name, *, minimum: int = 1):
    """Raise InputError when `spec` is not a valid token spec. A count below `minimum` (the
    int, or a mapping's `value`, `min`, `max`) and a parameter that is NaN or infinite are
    errors, not clipped."""
    expected = f"an int >= {minimum} or {{dist: fixed|uniform|normal|lognormal, ...}}"
    params = spec.items() if isinstance(spec, dict) else [(None, spec)]
    for key, v in params:
        if key == "dist" or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        name = field_name if key is None else f"{field_name}.{key}"
        if not np.isfinite(v):
            raise InputError(path, f"invalid value {v!r}", field=name, expected="a finite number")
        if key in (None, "value", "min", "max") and v < minimum:
            raise InputError(path, f"invalid value {v!r}", field=name,
                             expected=f"a token count >= {minimum}")
    try:
        sample_tokens(spec, 1, np.random.default_rng(0))
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(path, f"invalid token distribution: {exc}", field=field_name,
                         expected=expected) from None


def cached_prompt_tokens(w: Workload, block_size: int) -> np.ndarray:
    """Prompt tokens each request could take from the prefix cache, evictions ignored: the
    full blocks of its group's prefix (short of its last token) once the group was sent."""
    seen = np.zeros(len(w), bool)
    g = w.prefix_group
    has = g >= 0
    if has.any():
        _, first = np.unique(g[has], return_index=True)
        rows = np.flatnonzero(has)
        seen[rows] = True
        seen[rows[first]] = False
    usable = np.minimum(w.prefix_tokens, w.prompt_tokens - 1)
    return np.where(seen, (usable // max(1, int(block_size))) * int(block_size), 0)


def workload_summary(w: Workload, block_size: int = 16) -> list[dict]:
    """What a workload sends, per stage: requests, rate, prompt and output token counts
    (mean and p10/p50/p90) and `cache_hit_share` (prompt tokens the prefix cache can serve,
    `cached_prompt_tokens`, over all prompt tokens). RESULT.json and PLAN.json carry it."""
    cached = cached_prompt_tokens(w, block_size)
    out = []
    for s, (a, b) in enumerate(w.stage_bounds_s):
        sel = w.stage == s
        n = int(sel.sum())
        row = {"stage": s, "n_requests": n, "rate_rps": n / (b - a) if b > a else None}
        for name, x in (("prompt_tokens", w.prompt_tokens[sel]), ("output_tokens", w.output_tokens[sel])):
            row[name] = ({"mean": float(x.mean()),
                          **{f"p{q}": float(np.percentile(x, q)) for q in (10, 50, 90)}}
                         if n else None)
        row["n_prefix_groups"] = int(len(np.unique(w.prefix_group[sel & (w.prefix_group >= 0)])))
        total = float(w.prompt_tokens[sel].sum())
        row["cache_hit_share"] = float(cached[sel].sum() / total) if total else None
        out.append(row)
    return out


def format_workload_summary(rows: list[dict], arrival: str | None = None) -> str:
    """One line per stage of `workload_summary` rows: what the simulated traffic sent."""
    lines = []
    for r in rows:
        p, o = r["prompt_tokens"], r["output_tokens"]
        if p is None:
            lines.append(f"stage {r['stage']}: no requests")
            continue
        rate = "" if r.get("rate_rps") is None else f" at {r['rate_rps']:.3g} req/s"
        share = r.get("cache_hit_share")
        lines.append(f"stage {r['stage']}: {r['n_requests']} requests{rate}"
                     f"{'' if arrival is None else f' ({arrival})'}, prompt tokens mean "
                     f"{p['mean']:.0f} (p10-p90 {p['p10']:.0f}-{p['p90']:.0f}), output tokens "
                     f"mean {o['mean']:.0f}, {r['n_prefix_groups']} distinct prompts/prefixes, "
                     f"prefix cache can serve up to {0 if share is None else share:.0%} of prompt tokens")
    return "\n".join(lines)
