"""Request workloads for the simulator: arrays of arrivals and token counts.

A `Workload` is what the engine consumes. Generators build one from load stages
(constant-rate or Poisson arrivals) and token-length distributions, seeded, including
inference-perf-style shared-prefix groups (a system prompt shared by a group of
requests, followed by a per-request question).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bayesblis.errors import InputError

DISTRIBUTIONS = ("fixed", "uniform", "normal", "lognormal")


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
    `poisson`: exponential inter-arrival times at the stage's rate.
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
            else:
                raise ValueError(f"unknown arrival process {arrival!r} (constant | poisson)")
            times.append(t)
            idx.append(np.full(len(t), i, np.int64))
        bounds.append((start, start + dur))
        start += dur
    if not times:
        return np.zeros(0), np.zeros(0, np.int64), bounds
    return np.concatenate(times), np.concatenate(idx), bounds


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


def shared_prefix(stages, *, num_groups: int, users_per_group: int, system_prompt_len: int,
                  question_len: int, output_len: int, arrival: str = "constant",
                  seed: int = 0) -> Workload:
    """inference-perf `shared_prefix` data: `num_groups` system prompts of
    `system_prompt_len` tokens, each shared by `users_per_group` users; every request is
    from a random user: group's system prompt + `question_len` tokens, `output_len` out."""
    rng = np.random.default_rng(seed)
    arr, stage, bounds = stage_arrivals(stages, arrival, rng)
    n = len(arr)
    users = max(1, num_groups * max(1, users_per_group))
    user = rng.integers(0, users, size=n)
    group = (user // max(1, users_per_group)).astype(np.int64)
    prompt = np.full(n, system_prompt_len + question_len, np.int64)
    return Workload(arr, np.maximum(prompt, 1), np.full(n, max(1, output_len), np.int64),
                    group, np.full(n, system_prompt_len, np.int64), stage, None, bounds)


def check_token_spec(spec, path, field_name):
    """Raise InputError when `spec` is not a valid token spec."""
    try:
        sample_tokens(spec, 1, np.random.default_rng(0))
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(path, f"invalid token distribution: {exc}", field=field_name,
                         expected="an int or {dist: fixed|uniform|normal|lognormal, ...}") from None
