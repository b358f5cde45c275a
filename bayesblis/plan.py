"""Capacity planning under latency SLOs with a stated posterior probability (PLAN.json).

For one deployment option and an arrival rate ``r``, the scenario's request mix arrives
at rate ``r`` for ``duration_s`` (one constant-rate stage, the scenario's arrival process)
and every posterior draw simulates that *same* workload (common random numbers). Each draw
then passes or fails each SLO; ``P(r)`` is the fraction of draws that pass all of them.

The requests come from a `RequestStream`: a fixed sequence of requests (token counts,
prefix groups) with a unit-rate arrival clock ``u_i``. The workload at rate ``r`` is the
requests with ``u_i / r < duration_s``, arriving at ``u_i / r``: a higher rate compresses
the same requests in time and adds more, so ``P(r)`` is (nearly) monotone in ``r`` and
the search below does not chase sampling noise between rates.

The capacity of an option is the highest rate with ``P(r) >= prob``, found by
bracketing (doubling or halving from a start rate) and then geometric bisection until the
bracket ``[lo, hi]`` is within a relative tolerance (``hi / lo - 1 <= rel_tol``), about
8-12 rate evaluations instead of a dense grid; every evaluated rate is kept for the
probability-vs-rate curve (optionally with a few more rates at multiples of the capacity,
`SearchSettings.curve_factors`). Options (TP degree, GPU, vLLM settings) are evaluated
independently, serially or on Dask (`bayesblis.distributed.map_tasks`), with identical
results. File layout: data_specs/plan.md.

Every evaluated rate also records the share of draws that *saturate* (their queue keeps
growing through the traffic, `bayesblis.simulate.results.stage_lag_growth`): the cliff as a
probability ("at 24 req/s, 35% of draws saturate") instead of a blown-up mean.
"""

from __future__ import annotations

import itertools
import math
import re
import time
from dataclasses import dataclass, replace

import numpy as np

from bayesblis import __version__
from bayesblis.catalog.generation import GENERATION_CONFIG_MODES
from bayesblis.catalog.kernel_spread import HARDWARE_SCALE, unmeasured_metric_sd
from bayesblis.constants import CI_PROB
from bayesblis.discrepancy import (NEW_CONFIGURATION, NEW_GPU, UNMEASURED_GPU, load_excess,
                                   metric_widening, pass_probability)
from bayesblis.errors import BayesBlisError, UnseenLevelError
from bayesblis.simulate.results import (METRICS, Draws, per_draw_metrics, predicted_load,
                                        saturated_share, summarize_metric)
from bayesblis.simulate.scenario import VLLM_KEYS
from bayesblis.simulate.workload import (PromptSet, Workload, format_workload_summary,
                                         sample_tokens, workload_summary)

PLAN_VERSION = "1"

SLO_METRICS = {m[:-2]: m for m in METRICS if m.endswith("_s") and not m.endswith("_per_s")}
"""SLO metric name (RESULT metric without `_s`) -> RESULT metric: latencies in seconds."""

OPTION_KEYS = {"tp": int, "ep": int, "hardware": str, "dtype": str, **VLLM_KEYS}
"""Keys an --options axis may vary: deployment (tp, ep, hardware, dtype) and vLLM settings."""

_DEPLOYMENT_KEYS = ("tp", "ep", "hardware", "dtype", "gpu_memory_utilization", "block_size")
"""Changing one of these re-derives `kv_blocks_total` from the memory model (unless the
option sets it too): a KV capacity given for the scenario's deployment does not carry over."""

STATUSES = ("converged", "max_evaluations", "below_min_rate", "above_max_rate")


class PlanSpecError(BayesBlisError, ValueError):
    """An --slo or --options value cannot be read; the message names the bad token and
    what was expected."""

    def __init__(self, param: str, token: str, message: str, expected: str):
        self.param, self.token, self.expected = param, token, expected
        super().__init__(f"{param}: {message} in {token!r} (expected {expected})")


# ---------------------------------------------------------------------------------------
# SLOs and options
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SLO:
    """One latency objective: `metric` (e.g. ttft_p90) `op` (< or <=) `threshold_s`."""

    metric: str
    op: str
    threshold_s: float

    @property
    def name(self) -> str:
        return f"{self.metric}{self.op}{self.threshold_s:g}"

    @property
    def result_metric(self) -> str:
        return SLO_METRICS[self.metric]

    def passes(self, values) -> np.ndarray:
        """Per-draw pass/fail of the draws themselves; a NaN metric (no completed request)
        fails."""
        return self.pass_probability(values) > 0

    def pass_probability(self, values, discrepancy=None, stage_load=None) -> np.ndarray:
        """Per-draw probability of passing once the simulator discrepancy of this metric is
        allowed for at `stage_load` requests in flight
        (`bayesblis.discrepancy.pass_probability`); 0/1 without one."""
        sd, scale = metric_widening(discrepancy, self.result_metric, stage_load)
        return pass_probability(values, self.threshold_s, sd, inclusive=self.op == "<=",
                                scale=scale)

    def to_dict(self) -> dict:
        return {"name": self.name, "metric": self.metric, "result_metric": self.result_metric,
                "op": self.op, "threshold_s": self.threshold_s}


_SLO_RE = re.compile(r"^\s*([A-Za-z0-9_]+)\s*(<=|<)\s*([^<>=\s]+)\s*$")
_SLO_EXPECTED = ("METRIC<SECONDS or METRIC<=SECONDS, comma separated, e.g. "
                 "'ttft_p90<0.2,itl_mean<50ms'; metrics: " + ", ".join(SLO_METRICS))


def parse_slos(text: str, param: str = "--slo") -> list[SLO]:
    """Parse ``"ttft_p90<0.2,itl_mean<0.05"`` (thresholds in s; a `ms` or `s` suffix is
    allowed) into SLOs; errors name the bad token and what was expected."""
    if text is None or not str(text).strip():
        raise PlanSpecError(param, str(text or ""), "no SLO given", _SLO_EXPECTED)
    out, seen = [], set()
    for token in str(text).split(","):
        if not token.strip():
            raise PlanSpecError(param, str(text), "empty SLO between commas", _SLO_EXPECTED)
        m = _SLO_RE.match(token)
        if not m:
            raise PlanSpecError(param, token.strip(), "cannot read the SLO", _SLO_EXPECTED)
        metric, op, raw = m.groups()
        metric = metric.lower()
        if metric.endswith("_s") and metric[:-2] in SLO_METRICS:
            metric = metric[:-2]
        if metric not in SLO_METRICS:
            raise PlanSpecError(param, token.strip(), f"unknown metric {metric!r}",
                                "one of " + ", ".join(SLO_METRICS))
        value = _seconds(raw)
        if value is None:
            raise PlanSpecError(param, token.strip(), f"threshold {raw!r} is not a positive "
                                "number of seconds", "e.g. 0.2, 0.2s or 200ms")
        if metric in seen:
            raise PlanSpecError(param, token.strip(), f"second SLO on {metric}",
                                "at most one SLO per metric")
        seen.add(metric)
        out.append(SLO(metric, op, value))
    return out


def _seconds(raw: str) -> float | None:
    raw = raw.strip().lower()
    scale = 1.0
    if raw.endswith("ms"):
        raw, scale = raw[:-2], 1e-3
    elif raw.endswith("s"):
        raw = raw[:-1]
    try:
        v = float(raw) * scale
    except ValueError:
        return None
    return v if math.isfinite(v) and v > 0 else None


_OPTIONS_EXPECTED = ("KEY=V1,V2,... with KEY one of " + ", ".join(OPTION_KEYS)
                     + ", e.g. 'tp=1,2,4' 'hardware=H100,A100'")


def parse_options(axes, param: str = "--options") -> list[dict]:
    """Option axes (``["tp=1,2", "hardware=H100,A100"]``; axes may also be joined by
    ``;`` in one string) -> the Cartesian product as a list of settings dicts, first axis
    slowest. No axes: one option, the scenario as it is (``[{}]``). GPU names are
    resolved to catalog names."""
    tokens = []
    for item in axes or ():
        tokens += [t for t in str(item).split(";") if t.strip()]
    keys, values = [], []
    for token in tokens:
        key, sep, rest = token.partition("=")
        key = key.strip().lower().replace("-", "_")
        if not sep or not key:
            raise PlanSpecError(param, token.strip(), "no '=' after a setting name", _OPTIONS_EXPECTED)
        if key not in OPTION_KEYS:
            raise PlanSpecError(param, token.strip(), f"unknown setting {key!r}",
                                "one of " + ", ".join(OPTION_KEYS))
        if key in keys:
            raise PlanSpecError(param, token.strip(), f"setting {key!r} given twice",
                                "each setting in one axis, values comma separated")
        raw_values = [v.strip() for v in rest.split(",")]
        if not raw_values or any(not v for v in raw_values):
            raise PlanSpecError(param, token.strip(), "empty value", "comma-separated values")
        parsed = [_option_value(key, v, token.strip(), param) for v in raw_values]
        if len(set(map(repr, parsed))) != len(parsed):
            raise PlanSpecError(param, token.strip(), "repeated value", "distinct values")
        keys.append(key)
        values.append(parsed)
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)]


def _option_value(key: str, raw: str, token: str, param: str):
    typ = OPTION_KEYS[key]
    if key == "hardware":
        from bayesblis.catalog.gpus import load_gpu
        from bayesblis.errors import UnknownHardwareError

        try:
            return load_gpu(raw).name
        except UnknownHardwareError:
            from bayesblis.catalog.gpus import list_gpus

            raise PlanSpecError(param, token, f"unknown GPU {raw!r}",
                                "a catalog GPU: " + ", ".join(list_gpus())) from None
    if key == "generation_config":
        if raw not in GENERATION_CONFIG_MODES:
            raise PlanSpecError(param, token, f"value {raw!r} of {key} is not a vLLM mode",
                                " or ".join(GENERATION_CONFIG_MODES))
        return raw
    if typ is str:
        return raw
    if typ is bool:
        low = raw.lower()
        if low in ("true", "1", "yes", "on"):
            return True
        if low in ("false", "0", "no", "off"):
            return False
        raise PlanSpecError(param, token, f"value {raw!r} of {key} is not a boolean", "true or false")
    if typ is int:
        try:
            v = int(raw)
        except ValueError:
            v = None
        minimum = 0 if key == "cpu_offload_blocks" else 1
        if v is None or v < minimum:
            raise PlanSpecError(param, token, f"value {raw!r} of {key} is not an integer >= {minimum}",
                                f"integers >= {minimum}")
        return v
    try:
        v = float(raw)
    except ValueError:
        v = float("nan")
    if not 0 < v <= 1:
        raise PlanSpecError(param, token, f"value {raw!r} of {key} is not a number in (0, 1]",
                            "numbers in (0, 1]")
    return v


def option_label(settings: dict) -> str:
    """``tp=2,hardware=H100-SXM`` (``scenario`` for the scenario as it is)."""
    return ",".join(f"{k}={v}" for k, v in settings.items()) or "scenario"


def apply_option(scenario, settings: dict):
    """The scenario with an option's settings (tp, ep, hardware, dtype, vLLM keys).
    Changing the deployment re-derives `kv_blocks_total` unless the option sets it."""
    top = {k: v for k, v in settings.items() if k in ("tp", "ep", "hardware", "dtype")}
    vllm = dict(scenario.vllm)
    vllm.update({k: v for k, v in settings.items() if k in VLLM_KEYS})
    changes_memory = any(k in settings and settings[k] != _current(scenario, k)
                         for k in _DEPLOYMENT_KEYS)
    if changes_memory and "kv_blocks_total" not in settings:
        vllm["kv_blocks_total"] = None
    return replace(scenario, vllm=vllm, **top)


def _current(scenario, key):
    if key == "hardware" and scenario.hardware:
        from bayesblis.catalog.gpus import load_gpu

        return load_gpu(scenario.hardware).name
    return getattr(scenario, key) if key in ("tp", "ep", "dtype") else scenario.vllm.get(key)


# ---------------------------------------------------------------------------------------
# workload at any rate, common random numbers
# ---------------------------------------------------------------------------------------

class RequestStream:
    """The scenario's request mix as one fixed, endless sequence of requests.

    Request ``i`` has token counts and prefix group drawn from block ``i // block`` of a
    generator seeded by ``(seed, block index)`` (inference-perf ``shared_prefix`` data:
    prompt ``i mod P`` of its `PromptSet`), and a unit-rate arrival clock ``u_i``
    (constant: ``u_i = i``; every other process: cumulative Exp(1) gaps).
    `workload(rate, duration_s)` returns requests ``u_i / rate < duration_s`` arriving at ``u_i / rate``: the same
    requests at every rate, only compressed in time.

    Mix: a synthetic scenario's token specs and prefix groups (``workload.prompt_tokens``,
    ``output_tokens``, ``prefix``; inference-perf ``shared_prefix`` data), or, for a replayed
    scenario, its recorded requests without errors resampled with replacement (Poisson).
    """

    def __init__(self, scenario, *, seed: int = 0, block: int = 2048):
        self.block = int(block)
        spec = scenario.workload_spec
        self.seed = int(seed)
        if spec is not None:
            self.arrival = spec.get("arrival", "constant")
            self.kind = "shared_prefix" if spec.get("shared_prefix") else "spec"
            self.spec = spec
            self.workload_seed = int(spec.get("seed", 0))
            self.sys_len = None
            if self.kind == "shared_prefix":
                self.prompts = PromptSet.from_spec(spec["shared_prefix"], self.workload_seed)
            if self.kind == "spec" and spec.get("prefix"):
                rng = np.random.default_rng([self.workload_seed, self.seed, 2**31 - 1])
                g = int(spec["prefix"].get("num_groups", 1))
                self.sys_len = sample_tokens(spec["prefix"].get("system_prompt_len", 0), g, rng,
                                             minimum=0)
        else:
            w = scenario.workload
            keep = ~w.has_error
            if not keep.any():
                raise BayesBlisError(f"scenario {scenario.name}: every recorded request has an "
                                     "error; nothing to resample for a rate sweep")
            self.arrival, self.kind, self.workload_seed = "poisson", "replay", 0
            self.rows = {k: getattr(w, k)[keep] for k in ("prompt_tokens", "output_tokens",
                                                          "prefix_group", "prefix_tokens")}
        self._blocks: list[dict] = []

    def _block(self, k: int) -> dict:
        while len(self._blocks) <= k:
            self._blocks.append(self._make_block(len(self._blocks)))
        return self._blocks[k]

    def _make_block(self, k: int) -> dict:
        n = self.block
        rng = np.random.default_rng([self.workload_seed, self.seed, k])
        gaps = np.ones(n) if self.arrival == "constant" else rng.exponential(1.0, n)
        if self.kind == "replay":
            idx = rng.integers(0, len(self.rows["prompt_tokens"]), n)
            cols = {c: v[idx] for c, v in self.rows.items()}
        elif self.kind == "shared_prefix":   # request i carries prompt i mod P, at any rate
            cols = self.prompts.columns(np.arange(k * n, (k + 1) * n))
        else:
            question = sample_tokens(self.spec["prompt_tokens"], n, rng)
            output = sample_tokens(self.spec["output_tokens"], n, rng)
            if self.sys_len is not None:
                group = rng.integers(0, len(self.sys_len), n).astype(np.int64)
                ptok = self.sys_len[group]
                prompt = ptok + question
            else:
                group, ptok, prompt = np.full(n, -1, np.int64), np.zeros(n, np.int64), question
            cols = {"prompt_tokens": prompt, "output_tokens": output, "prefix_group": group,
                    "prefix_tokens": ptok}
        cols["gaps"] = gaps
        return cols

    def workload(self, rate: float, duration_s: float) -> Workload:
        """The requests arriving before `duration_s` at `rate` req/s (one stage)."""
        if not rate > 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        horizon = rate * duration_s
        blocks, total, k = [], 0.0, 0
        while total < horizon:
            b = self._block(k)
            blocks.append(b)
            total += float(b["gaps"].sum())
            k += 1
        if not blocks:
            blocks = [self._block(0)]
        gaps = np.concatenate([b["gaps"] for b in blocks])
        clock = np.arange(len(gaps), dtype=float) if self.arrival == "constant" else np.cumsum(gaps)
        arrival = clock / rate
        n = int(np.searchsorted(arrival, duration_s, side="left"))
        if self.arrival == "constant":   # stage_arrivals: floor(rate * duration) requests
            n = int(np.floor(horizon + 1e-9))
        cols = {c: np.concatenate([b[c] for b in blocks])[:n]
                for c in ("prompt_tokens", "output_tokens", "prefix_group", "prefix_tokens")}
        return Workload(arrival[:n], cols["prompt_tokens"], cols["output_tokens"],
                        cols["prefix_group"], cols["prefix_tokens"], None, None,
                        [(0.0, float(duration_s))])


def default_duration_s(scenario) -> float:
    """Traffic simulated per rate when --duration-s is not given: the scenario's total
    stage duration (synthetic) or the recorded span (replay)."""
    if scenario.workload_spec is not None:
        return float(sum(float(s["duration"]) for s in scenario.workload_spec["stages"]))
    w = scenario.workload
    return float(max(b for _, b in w.stage_bounds_s)) if len(w) else 60.0


def default_start_rate(scenario) -> float:
    """Search start: the scenario's highest stage rate (synthetic) or its mean recorded
    rate (replay)."""
    if scenario.workload_spec is not None:
        rates = [float(s["rate"]) for s in scenario.workload_spec["stages"] if float(s["rate"]) > 0]
        if rates:
            return max(rates)
        return 1.0
    return max(len(scenario.workload) / max(default_duration_s(scenario), 1e-9), 1e-3)


# ---------------------------------------------------------------------------------------
# evaluation and search
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SearchSettings:
    """How the capacity search runs (see module docstring)."""

    prob: float = 0.9
    duration_s: float = 60.0
    start_rate: float = 1.0
    min_rate: float | None = None     # default max(start / 1024, 5 requests / duration)
    max_rate: float | None = None     # default start * 64
    rel_tol: float = 0.02
    max_evals: int = 12
    curve_factors: tuple = ()         # extra rates after the search: capacity x factor
    seed: int = 0
    ci_prob: float = CI_PROB

    def bounds(self) -> tuple[float, float]:
        lo = self.min_rate if self.min_rate is not None else max(self.start_rate / 1024,
                                                                 5.0 / self.duration_s)
        hi = self.max_rate if self.max_rate is not None else self.start_rate * 64
        return float(lo), float(hi)


def find_capacity(evaluate, settings: SearchSettings):
    """Highest rate with ``evaluate(rate) >= prob`` by bracketing and geometric bisection.

    `evaluate(rate)` returns P(rate). Returns (capacity or None, status, (lo, hi)) where
    `status` is one of STATUSES and (lo, hi) the final bracket (None where unknown).
    """
    prob, tol = settings.prob, settings.rel_tol
    r_min, r_max = settings.bounds()
    start = min(max(settings.start_rate, r_min), r_max)
    n = 0

    def ok(rate):
        nonlocal n
        n += 1
        return evaluate(rate) >= prob

    lo = hi = None
    if ok(start):
        lo = start
        while hi is None:
            if lo >= r_max:
                return lo, "above_max_rate", (lo, None)
            if n >= settings.max_evals:
                return lo, "max_evaluations", (lo, None)
            r = min(lo * 2.0, r_max)
            if ok(r):
                lo = r
            else:
                hi = r
    else:
        hi = start
        while lo is None:
            if hi <= r_min:
                return None, "below_min_rate", (None, hi)
            if n >= settings.max_evals:
                return None, "max_evaluations", (None, hi)
            r = max(hi / 2.0, r_min)
            if ok(r):
                lo = r
            else:
                hi = r
    while hi / lo - 1.0 > tol:
        if n >= settings.max_evals:
            return lo, "max_evaluations", (lo, hi)
        mid = math.sqrt(lo * hi)
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo, "converged", (lo, hi)


def _clean(v):
    """JSON-safe float (NaN/inf -> None)."""
    v = float(v)
    return v if math.isfinite(v) else None


def _evaluate(stream, duration_s, cfg, constants, draws, slos, seed, ci_prob, n_workers,
              discrepancy=None):
    """Simulate every draw at one rate: the evaluation record and the per-draw arrays.

    With a `discrepancy`, each draw passes an SLO with a probability (its metric times the
    simulator's log-normal error) and all SLOs with the smallest of those: one error shared
    by the metrics of a run (held-out E2E and ITL errors are within a point of each other in
    every validated stage). Independent errors would give the product, lower."""
    def at(rate):
        w = stream.workload(rate, duration_s)
        if len(w):
            per = per_draw_metrics(w, cfg, constants, draws, seed=seed, n_workers=n_workers)
        else:   # no request arrives: every metric is missing, every SLO fails
            per = {m: np.full(draws.n_draws, np.nan) for m in METRICS}
            per.update(n_dropped=np.zeros(draws.n_draws, np.int64),
                       busy_fraction=np.zeros(draws.n_draws), n_steps=np.zeros(draws.n_draws, np.int64),
                       saturated=np.full(draws.n_draws, np.nan))
        load = predicted_load(rate, per["e2e_mean_s"])
        passes = {s.name: s.pass_probability(per[s.result_metric], discrepancy, load)
                  for s in slos}
        all_ok = np.minimum.reduce(list(passes.values()))
        rec = {"rate_per_s": float(rate), "n_requests": int(len(w)),
               "p_all": float(all_ok.mean()),
               "p_slo": {k: float(v.mean()) for k, v in passes.items()},
               "saturated_share": saturated_share(per["saturated"]),
               "in_flight": load,
               "load_excess": load_excess(load, discrepancy.fitted_load if discrepancy else None),
               "metrics": {m: summarize_metric(per[m], m, discrepancy, ci_prob, seed, load)
                           for m in METRICS},
               "dropped_fraction": (float(np.mean(per["n_dropped"]) / len(w)) if len(w) else 0.0),
               "busy_fraction": _clean(np.mean(per["busy_fraction"]))}
        return rec, per, w
    return at


def _setup(task: dict):
    from bayesblis.simulate.engine import deployment_constants

    sc, s = task["scenario"], task["search"]
    deployment = sc.deployment()
    # capacity is a warm server's: no start-up stall, whatever the scenario says
    cfg = replace(sc.engine_config(deployment), cold_start_s=0.0)
    constants = deployment_constants(deployment)
    stream = RequestStream(sc, seed=s.seed)
    at = _evaluate(stream, s.duration_s, cfg, constants, task["draws"], task["slos"], s.seed,
                   s.ci_prob, task.get("n_workers"), task.get("discrepancy"))
    return deployment, cfg, at


def probability_curve(task: dict, rates) -> list[dict]:
    """Evaluation records (as in PLAN.json `evaluations`, without `order`) of one option
    task at given rates: the same simulations the search runs at those rates."""
    _, _, at = _setup(task)
    return [at(float(r))[0] for r in rates]


def plan_option(task: dict) -> dict:
    """Search one option's capacity (a picklable task for `map_tasks`).

    `task`: scenario (with the option applied), settings (the option), draws (`Draws`),
    coefficients (metadata dict), slos (list of SLO), search (SearchSettings),
    n_workers (threads per evaluation, None = all CPUs); optional `on_eval(rec)` callback
    (serial path only). Returns the option object of PLAN.json.
    """
    s, draws, slos = task["search"], task["draws"], task["slos"]
    deployment, cfg, at = _setup(task)
    evaluations, kept, order = {}, {}, []
    on_eval = task.get("on_eval")

    def evaluate(rate, phase="search"):
        rec, per, w = at(rate)
        rec["phase"] = phase
        rec["order"] = len(order)
        order.append(rate)
        evaluations[rate] = rec
        kept[rate] = (per, w)
        if on_eval is not None:
            on_eval(rec)
        return rec["p_all"]

    capacity, status, bracket = find_capacity(evaluate, s)
    n_search = len(order)
    if capacity is not None:   # the shape of the curve away from the crossing
        for f in s.curve_factors:
            r = float(capacity) * float(f)
            if r > 0 and all(abs(r / e - 1) > 1e-3 for e in evaluations):
                evaluate(r, "curve")
    gpus = int(deployment.num_gpus)
    out = {"label": option_label(task["settings"]), "settings": dict(task["settings"]),
           "config": deployment.config_key,
           "deployment": {"model": deployment.model.name, "hardware": deployment.gpu.name,
                          "tp": int(deployment.tp), "ep": int(deployment.ep),
                          "dtype": deployment.compute_dtype},
           "engine": dict(cfg.__dict__), "coefficients": dict(task["coefficients"]),
           "gpus": gpus, "capacity_rate_per_s": None if capacity is None else float(capacity),
           "capacity_per_gpu_rate_per_s": None if capacity is None else float(capacity) / gpus,
           "tokens_per_s_per_gpu": None, "prob_at_capacity": None,
           "search": {"status": status, "n_evaluations": n_search,
                      "n_curve_evaluations": len(order) - n_search,
                      "n_simulations": len(order) * int(draws.n_draws),
                      "bracket_rate_per_s": [None if b is None else float(b) for b in bracket],
                      "start_rate_per_s": float(min(max(s.start_rate, s.bounds()[0]), s.bounds()[1])),
                      "min_rate_per_s": s.bounds()[0], "max_rate_per_s": s.bounds()[1],
                      "rel_tol": float(s.rel_tol), "max_evaluations": int(s.max_evals)},
           "evaluations": [evaluations[r] for r in sorted(evaluations)],
           "at_capacity": None}
    if capacity is not None:
        rec = evaluations[capacity]
        per, w = kept[capacity]
        valid = ~w.has_error
        out_tok = float(w.output_tokens[valid].mean()) if valid.any() else 0.0
        in_tok = float(w.prompt_tokens[valid].mean()) if valid.any() else 0.0
        tps = capacity * out_tok / gpus
        out["tokens_per_s_per_gpu"] = tps
        out["prob_at_capacity"] = rec["p_all"]
        out["at_capacity"] = {
            "rate_per_s": float(capacity), "n_requests": rec["n_requests"],
            "p_all": rec["p_all"], "p_slo": dict(rec["p_slo"]),
            "saturated_share": rec["saturated_share"],
            "in_flight": rec["in_flight"], "load_excess": rec["load_excess"],
            "tokens_per_s_per_gpu": tps,
            "prompt_tokens_per_s_per_gpu": capacity * in_tok / gpus,
            "mean_prompt_tokens": in_tok, "mean_output_tokens": out_tok,
            "metrics": rec["metrics"],
            "per_draw": {m: [_clean(v) for v in per[m]] for m in METRICS},
            "saturated_per_draw": [None if np.isnan(v) else bool(v) for v in per["saturated"]],
            "slo_pass": {sl.name: [bool(v) for v in sl.passes(per[sl.result_metric])]
                         for sl in slos}}
    return out


# ---------------------------------------------------------------------------------------
# the whole plan
# ---------------------------------------------------------------------------------------

def option_tasks(scenario, posterior, option_settings: list[dict], slos: list[SLO],
                 search: SearchSettings, *, n_draws: int = 50, allow_unseen: bool = False,
                 posterior_source: str = "posterior", n_workers: int | None = None,
                 discrepancy=None) -> list[dict]:
    """One task per option: the scenario with the option applied and its coefficient
    draws (checked here, before any simulation: unseen levels need `allow_unseen`)."""
    from bayesblis.coefficients import posterior_draws

    tasks = []
    for settings in option_settings:
        label = option_label(settings)
        sc = apply_option(scenario, settings)
        try:
            deployment = sc.deployment()
            sc.engine_config(deployment)
            cd = posterior_draws(posterior, deployment, n_draws, allow_unseen=allow_unseen,
                                 seed=search.seed)
        except UnseenLevelError as exc:
            raise UnseenLevelError(f"option {label}: {exc}") from None
        except BayesBlisError as exc:   # e.g. tp not dividing the heads, model not fitting
            raise BayesBlisError(f"option {label}: {exc}") from None
        draws = Draws.from_coefficient_draws(cd, source=f"{posterior_source}")
        rule = discrepancy.for_configuration(cd.seen_config, cd.unseen_levels, cd.fitted_load) \
            if discrepancy else None
        tasks.append({"scenario": sc, "settings": settings, "draws": draws, "slos": list(slos),
                      "search": search, "n_workers": n_workers, "discrepancy": rule,
                      "caveats": sc.caveats(deployment, draws.unseen_gpu),
                      "coefficients": {"source": posterior_source, "config": cd.config,
                                       "seen_config": bool(cd.seen_config),
                                       "unseen_levels": {k: str(v) for k, v in cd.unseen_levels.items()},
                                       "n_draws": int(draws.n_draws),
                                       "discrepancy_rule": rule.applies if rule else None,
                                       "fitted_load": cd.fitted_load}})
    return tasks


def run_plan(scenario, posterior, slos: list[SLO], option_settings: list[dict] | None = None, *,
             search: SearchSettings, n_draws: int = 50, allow_unseen: bool = False,
             scheduler: str | None = None, n_workers: int | None = None, dask_workers: int = 2,
             posterior_source: str = "posterior", progress=None, on_eval=None,
             discrepancy=None) -> dict:
    """Capacity of every option; the PLAN.json document (data_specs/plan.md).

    `posterior`: a loaded posterior or a path; `discrepancy`: a
    `bayesblis.discrepancy.Discrepancy` the SLO probabilities allow for (None: posterior
    draws only); `scheduler`: None (serial), 'local' or a
    Dask address (same results); `progress(i)` after each finished option; `on_eval(label,
    rec)` after each rate evaluation (serial path only).
    """
    from bayesblis.distributed import map_tasks
    from bayesblis.model.store import load_posterior

    t0 = time.perf_counter()
    if not hasattr(posterior, "idata"):
        posterior = load_posterior(posterior)
    option_settings = option_settings or [{}]
    tasks = option_tasks(scenario, posterior, option_settings, slos, search, n_draws=n_draws,
                         allow_unseen=allow_unseen, posterior_source=posterior_source,
                         n_workers=n_workers, discrepancy=discrepancy)
    if scheduler is None and on_eval is not None:
        for t in tasks:
            label = option_label(t["settings"])
            t["on_eval"] = (lambda rec, label=label: on_eval(label, rec))
    options = map_tasks(plan_option, tasks, scheduler=scheduler, n_workers=dask_workers,
                        progress=progress)
    caveats = option_caveats(tasks)
    with_cap = [o for o in options if o["tokens_per_s_per_gpu"] is not None]
    best = max(with_cap, key=lambda o: o["tokens_per_s_per_gpu"])["label"] if with_cap else None
    n_sim = sum(o["search"]["n_simulations"] for o in options)
    return {
        "plan_version": PLAN_VERSION,
        "scenario": scenario.describe(),
        "slos": [s.to_dict() for s in slos],
        "prob": float(search.prob),
        "traffic": traffic_description(scenario, search),
        "options": options,
        "best_option": best,
        "metadata": {"package_version": __version__, "posterior": posterior_source,
                     "draws": int(n_draws), "seed": int(search.seed),
                     "discrepancy": discrepancy.to_dict() if discrepancy else None,
                     "ci_prob": float(search.ci_prob), "scheduler": scheduler or "serial",
                     "n_options": len(options),
                     "n_evaluations": sum(o["search"]["n_evaluations"]
                                          + o["search"]["n_curve_evaluations"] for o in options),
                     "n_simulations": n_sim, "caveats": caveats,
                     "wall_s": round(time.perf_counter() - t0, 3),
                     "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
    }


def option_caveats(tasks: list[dict]) -> list[str]:
    """Each distinct caveat of the options (`Scenario.caveats` of the deployment each option
    simulates, kept in its task), prefixed with the options it applies to when not all."""
    by_text: dict[str, list[str]] = {}
    for t in tasks:
        for text in t["caveats"]:
            by_text.setdefault(text, []).append(option_label(t["settings"]))
    return [text if len(labels) == len(tasks) else f"options {'; '.join(labels)}: {text}"
            for text, labels in by_text.items()]


def traffic_description(scenario, search) -> dict:
    """PLAN.json `traffic`: duration, arrival process and what the request stream sends
    (`workload_summary` of the stream at the search's first rate: token counts and cache
    hits are the same at every rate, only the arrivals are compressed)."""
    stream = RequestStream(scenario, seed=search.seed)
    sent = stream.workload(float(search.start_rate), float(search.duration_s))
    return {"duration_s": float(search.duration_s), "arrival": stream.arrival,
            "common_random_numbers": True,
            "workload": workload_summary(sent, int(scenario.vllm["block_size"]))}


def never_fitted_options(plan: dict) -> list[str]:
    """Labels of a PLAN.json's options whose draws' spread the discrepancy scaled, on
    hardware the posterior fitted (a configuration it never fitted,
    `Discrepancy.for_configuration`)."""
    return _options_under(plan, NEW_CONFIGURATION)


def new_gpu_options(plan: dict) -> list[str]:
    """Labels of a PLAN.json's options on a GPU never traced that kernel-db measured: their
    spread scaled and widened by the GPU's own sd (`catalog.kernel_spread.HARDWARE_SCALE`)."""
    return _options_under(plan, NEW_GPU)


def unmeasured_gpu_options(plan: dict) -> list[str]:
    """Labels of a PLAN.json's options on a GPU neither traced nor in kernel-db: their spread
    scaled and widened by the GPU's sd with kernel-db's spread across GPUs
    (`catalog.kernel_spread.gpu_metric_sd`)."""
    return _options_under(plan, UNMEASURED_GPU)


def _options_under(plan: dict, rule: str) -> list[str]:
    return [o.get("label", "?") for o in plan["options"]
            if (o.get("coefficients") or {}).get("discrepancy_rule") == rule]


def extrapolated_options(plan: dict) -> list[str]:
    """'label: N in flight, x.x the fitted load' for each option of a PLAN.json whose
    capacity lies beyond the load its configuration was fitted at (its SLO probability
    there allows for the extrapolation, `Discrepancy.widening`)."""
    out = []
    for o in plan["options"]:
        at = o.get("at_capacity") or {}
        if at.get("load_excess", 0) > 0:
            out.append(f"{o.get('label', '?')}: {at['in_flight']:.0f} in flight, "
                       f"{math.exp(at['load_excess']):.1f}x the fitted load")
    return out


def format_plan(plan: dict) -> str:
    """The table the CLI prints: one row per option, then each option's probability curve
    (per evaluated rate: P(all SLOs), share of saturating draws, SLO metrics' median and mean)."""
    pct = f"{plan['prob']:g}"
    width = max([len("option")] + [len(o["label"]) for o in plan["options"]]) + 2
    head = (f"{'option':<{width}}{'GPUs':>5}{'capacity req/s':>16}{'tokens/s/GPU':>14}"
            f"{'P at capacity':>15}{'saturated':>11}{'evaluations':>13}  status")
    lines = [head, "-" * len(head)]
    for o in plan["options"]:
        cap, tps, p_cap = o["capacity_rate_per_s"], o["tokens_per_s_per_gpu"], o["prob_at_capacity"]
        cap_s = "-" if cap is None else f"{cap:.3g}"
        tps_s = "-" if tps is None else f"{tps:,.0f}"
        p_s = "-" if p_cap is None else f"{p_cap:.2f}"
        sat = (o.get("at_capacity") or {}).get("saturated_share")
        sat_s = "-" if sat is None else f"{sat:.0%}"
        n_eval = str(o["search"]["n_evaluations"])
        if o["search"].get("n_curve_evaluations"):
            n_eval += f"+{o['search']['n_curve_evaluations']}"
        lines.append(f"{o['label']:<{width}}{o['gpus']:>5}{cap_s:>16}{tps_s:>14}{p_s:>15}"
                     f"{sat_s:>11}{n_eval:>13}  {o['search']['status']}")
    slos = ", ".join(f"{s['metric']} {s['op']} {s['threshold_s']:g} s" for s in plan["slos"])
    disc = plan["metadata"].get("discrepancy")
    lines.append(f"SLOs {slos} must hold with probability >= {pct} "
                 f"({plan['metadata']['draws']} draws, {plan['traffic']['duration_s']:g} s of "
                 f"{plan['traffic']['arrival']} traffic per rate; "
                 + (f"each draw's pass probability includes the simulator discrepancy, "
                    f"{disc['source']}" if disc else "posterior draws only, no simulator "
                    "discrepancy") + ")")
    never_fitted = never_fitted_options(plan)
    if never_fitted:
        lines.append(f"never fitted ({', '.join(never_fitted)}): the draws' spread about their "
                     f"median is scaled as measured held out by model, not widened")
    new_gpus = new_gpu_options(plan)
    if new_gpus:
        lines.append(f"GPU never traced ({', '.join(new_gpus)}): the draws' spread is scaled "
                     f"likewise and widened by the GPU's own log-scale sd of {HARDWARE_SCALE:g} "
                     "(its kernels are in the features; docs/kernel-db.md)")
    unmeasured = unmeasured_gpu_options(plan)
    if unmeasured:
        lines.append(f"GPU neither traced nor in kernel-db ({', '.join(unmeasured)}): scaled "
                     f"likewise and widened by a log-scale sd of {unmeasured_metric_sd():.2g} "
                     "(kernel-db's spread of weight streaming across the GPUs it measures; "
                     "docs/kernel-db.md)")
    for text in plan["metadata"].get("caveats") or ():
        lines.append(f"caveat: {text}")
    beyond = extrapolated_options(plan)
    if beyond:
        lines.append(f"capacity beyond the traced load ({', '.join(beyond)}): the discrepancy "
                     "grows with the extrapolation, so the capacity is stated less surely")
    if plan["traffic"].get("workload"):
        lines.append("traffic at the first rate tried (token counts and cache hits are the same "
                     "at every rate): " + format_workload_summary(plan["traffic"]["workload"],
                                                                  plan["traffic"]["arrival"]))
    lines.append("saturated: share of draws whose queue keeps growing (data_specs/plan.md)")
    if any(o["search"].get("n_curve_evaluations") for o in plan["options"]):
        lines.append("evaluations: search + extra --curve rates")
    if plan["best_option"] is not None:
        lines.append(f"most tokens/s per GPU: {plan['best_option']}")
    for o in plan["options"]:
        lines += ["", *format_curve(o, plan["slos"])]
    return "\n".join(lines)


def format_curve(option: dict, slos: list[dict]) -> list[str]:
    """One option's evaluated rates: P(all SLOs), P(saturated) and each SLO metric's median
    over draws (mean in brackets: a few saturated draws inflate it)."""
    metrics = [s["result_metric"] for s in slos]
    col = max([24] + [len(m) + len(" median (mean)") + 2 for m in metrics])
    head = (f"  {'rate req/s':>10}{'P(all SLOs)':>13}{'P(saturated)':>14}"
            + "".join(f"{m + ' median (mean)':>{col}}" for m in metrics))
    lines = [f"{option['label']}: probability curve", head]
    for e in option.get("evaluations") or []:
        sat = e.get("saturated_share")
        row = (f"  {e['rate_per_s']:>10.3g}{e['p_all']:>13.2f}"
               f"{'-' if sat is None else f'{sat:.2f}':>14}")
        for m in metrics:
            v = (e.get("metrics") or {}).get(m) or {}
            cell = "-" if v.get("median") is None else \
                f"{_seconds_text(v['median'])} ({_seconds_text(v['mean'])})"
            row += f"{cell:>{col}}"
        lines.append(row)
    return lines


def _seconds_text(v: float) -> str:
    return f"{v * 1e3:.1f}ms" if abs(v) < 1 else f"{v:.2f}s"
