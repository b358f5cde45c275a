"""Synthetic fleets with a documented ground truth, for the demo and for recovery tests.

A fleet is a set of simulated vLLM runs (one folder per run: OTEL ``traces.json``,
``kv_events.jsonl`` and a ``deployment.yaml`` that `bayesblis.io.dataset.ingest`
reads), whose step times come from coefficients drawn from a known hierarchy with the
same structure as `bayesblis.model.hierarchy.LatencyModel`::

    log coef[c, k] = mu[k] + u_arch[a(c), k] + u_hw[h(c), k] + u_family[f(c), k] + u_config[c, k]

for every beta feature (`features.beta.BETA_FEATURES`) and alpha feature
(`features.alpha.ALPHA_FEATURES`). `Truth` holds the values (`TRUTH` is the default
one, seed 0); data_specs/synthetic-fleet.md documents every number and the
``truth.json`` layout.

Each effect is drawn once from a RNG seeded by (truth seed, level, level value), so the
truth of a configuration does not depend on which other configurations a fleet holds,
and an unseen configuration has a well-defined truth too. Some effects are fixed by
physics instead of drawn (hardware compute efficiency from the BLIS MFU table, HBM and
interconnect efficiency, MoE overheads); see `STRUCTURED_EFFECTS`.

Simulation per run: the truth's alpha/beta drive `simulate.engine.run_engine` with
multiplicative Student-t step noise (nu 5, sigma 0.05-0.10 per configuration); then a
fraction of steps (0.5%) is stretched x3-10 (outliers: GC pauses, NCCL hiccups), which
delays everything after them (idle gaps absorb the delay); request-level delays
(arrival -> queued, finished -> departed) get the same kind of mean-one noise. The
result is written with `simulate.trace_writer.write_traces` (journey sampling 1.0, step
summaries sampled at `FleetSpec.step_sample_rate`).
"""

from __future__ import annotations

import copy
import json
import warnings
import zlib
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from bayesblis.atomic import write_json, write_text
from bayesblis.features.alpha import ALPHA_FEATURES
from bayesblis.features.beta import BETA_FEATURES, LATE_FEATURES
from bayesblis.model.priors import ALPHA_PRIORS, BETA_PRIORS, TIED_BETA, floor_of

TRUTH_VERSION = "1"

# ---------------------------------------------------------------------------------------
# the ground truth
# ---------------------------------------------------------------------------------------

REFERENCE_MFU_PREFILL = {"H100-SXM": 0.45, "H200-SXM": 0.45, "A100-SXM-80GB": 0.38, "L40S": 0.32}
"""Prefill MFU of the BLIS hardware table (shared/data/hardware/blis_hardware_config.json;
H200 as H100). The true compute coefficient of a GPU is ~ 1/MFU."""

_LOG_EXCESS_INV_MFU = {g: float(np.log(1.0 / m - 1.0)) for g, m in REFERENCE_MFU_PREFILL.items()}
COMPUTE_CENTRE = float(np.mean(list(_LOG_EXCESS_INV_MFU.values())))
"""Mean over the four GPUs of log(1/MFU_prefill - 1) = log(1.51): the population centre of
`prefill_compute_s` above its floor of 1 (the hardware effects are deviations from it, so
each GPU's compute coefficient is 1/MFU before its family and configuration effects)."""

POPULATION_MEDIANS = {
    "beta": {**{k: float(v["median"]) for k, v in BETA_PRIORS.items()},
             "prefill_compute_s": float(1.0 + np.exp(COMPUTE_CENTRE))},
    "alpha": {k: float(v["median"]) for k, v in ALPHA_PRIORS.items()},
}
"""The population centre: the prior medians of model/priors.py, except prefill compute,
centred on the BLIS MFU table (2.51 instead of 2.0)."""

FLOORS = {kind: {k: floor_of(v) for k, v in priors.items() if floor_of(v) > 0}
          for kind, priors in (("beta", BETA_PRIORS), ("alpha", ALPHA_PRIORS))}
"""Physical floors of the priors (model/priors.py): a floored coefficient's effects scale
its part above the floor, ``floor + (median - floor) x exp(sum of effects)``, as in the
model, so no truth is faster than the datasheet."""

LEVEL_SCALES = {"arch": 0.10, "hardware": 0.10, "family": 0.10, "config": 0.05}
"""Standard deviation (log scale) of the randomly drawn effects of each level."""

NOISE_NU = 5.0
"""Student-t degrees of freedom of the multiplicative step noise (and request delays)."""
NOISE_SIGMA_RANGE = (0.05, 0.10)
"""Per-configuration relative step noise sigma, drawn uniformly in this range."""
ALPHA_NOISE_SIGMA = 0.10
"""Relative noise of request-level delays (arrival -> queued, finished -> departed)."""
OUTLIER_RATE = 0.005
"""Fraction of steps stretched by an outlier factor."""
OUTLIER_FACTOR = (3.0, 10.0)
"""Outlier step duration multiplier, uniform in this range."""


def _hw_structured() -> dict:
    out = {}
    hbm = {"H100-SXM": 0.0, "H200-SXM": -0.05, "A100-SXM-80GB": 0.05, "L40S": 0.10}
    link = {"H100-SXM": 0.0, "H200-SXM": 0.0, "A100-SXM-80GB": 0.05, "L40S": 0.15}
    for g, lim in _LOG_EXCESS_INV_MFU.items():
        compute = lim - COMPUTE_CENTRE
        out[g] = {"prefill_compute_s": compute, "decode_compute_s": compute,
                  "weight_traffic_s": hbm[g], "kv_traffic_s": hbm[g], "tp_comm_s": link[g]}
    return out


STRUCTURED_EFFECTS = {
    "hardware": _hw_structured(),
    "arch": {"dense": {"prefill_compute_s": 0.0, "decode_compute_s": 0.0, "weight_traffic_s": 0.0,
                       "layer_overhead_s": 0.0},
             "moe": {"prefill_compute_s": 0.15, "decode_compute_s": 0.10, "weight_traffic_s": 0.10,
                     "layer_overhead_s": 0.15}},
}
"""Log-scale effects fixed by physics instead of drawn:

- hardware compute (prefill and decode), on the part above the floor:
  log(1/MFU_prefill - 1) - COMPUTE_CENTRE (H100/H200 -0.211, A100 +0.078, L40S +0.342);
- hardware HBM traffic (weights, KV): H100 0, H200 -0.05 (HBM3e, slightly better),
  A100 +0.05, L40S +0.10 (GDDR6);
- hardware TP all-reduce: H100/H200 0, A100 +0.05, L40S +0.15 (PCIe, no NVLink);
- arch: MoE grouped GEMMs and routing: prefill compute +0.15, decode compute +0.10,
  weight traffic +0.10, per-layer overhead +0.15 (dense 0).

Every other (level, coefficient) effect is drawn from Normal(0, LEVEL_SCALES[level])."""

_ADDED_LATER = ("kv_token_layer_s", "tp_sync_s", *LATE_FEATURES)
_NAMES = ([("beta", f) for f in BETA_FEATURES if f not in _ADDED_LATER]
          + [("alpha", f) for f in ALPHA_FEATURES] + [("beta", f) for f in _ADDED_LATER])
"""The order of an effect's normal draws: features added to the model after a truth was
published draw last, so the effects of the others (and every documented truth) stay put."""


def _rng(*parts) -> np.random.Generator:
    """A RNG seeded by integers and strings (strings hashed with crc32, stable)."""
    ints = [p if isinstance(p, (int, np.integer)) else zlib.crc32(str(p).encode()) for p in parts]
    return np.random.default_rng([int(i) % (2**32) for i in ints])


def _levels_of(deployment) -> dict:
    from bayesblis.model.data import config_row

    row = config_row(deployment)
    return {"arch": row["arch"], "hardware": row["hardware"], "family": row["model_family"],
            "config": row["config"]}


@dataclass(frozen=True)
class Truth:
    """The ground-truth hierarchy (see module doc); `seed` fixes every drawn effect."""

    seed: int = 0

    # -- pieces ---------------------------------------------------------------------
    def log_mu(self) -> dict:
        """{"beta": {name: mu}, "alpha": {...}}: log of the population medians' part above
        their floors (FLOORS)."""
        return {kind: {k: float(np.log(v - FLOORS[kind].get(k, 0.0))) for k, v in d.items()}
                for kind, d in POPULATION_MEDIANS.items()}

    def effect(self, level: str, value: str) -> dict:
        """Log-scale effect of one level value: {"beta": {...}, "alpha": {...}}."""
        if level not in LEVEL_SCALES:
            raise KeyError(f"unknown level {level!r} (one of {list(LEVEL_SCALES)})")
        z = _rng(self.seed, level, str(value)).standard_normal(len(_NAMES))
        fixed = STRUCTURED_EFFECTS.get(level, {}).get(str(value), {})
        out = {"beta": {}, "alpha": {}}
        for (kind, name), zi in zip(_NAMES, z):
            out[kind][name] = float(fixed[name]) if (kind == "beta" and name in fixed) \
                else float(LEVEL_SCALES[level] * zi)
        return out

    def noise_sigma(self, config_key: str) -> float:
        lo, hi = NOISE_SIGMA_RANGE
        return float(_rng(self.seed, "noise", config_key).uniform(lo, hi))

    # -- per configuration ----------------------------------------------------------
    def coefficients(self, deployment) -> dict:
        """True coefficients of a `Deployment` (or anything `Deployment` accepts via
        `RunSpec.deployment()`): {"config", "levels", "beta", "alpha", "log_effects",
        "noise_sigma", "noise_nu"}; beta/alpha on the natural scale (alpha in µs)."""
        levels = _levels_of(deployment)
        mu = self.log_mu()
        effects = {lv: self.effect(lv, levels[lv]) for lv in ("arch", "hardware", "family", "config")}
        coef = {}
        for kind in ("beta", "alpha"):
            coef[kind] = {name: FLOORS[kind].get(name, 0.0) + float(np.exp(
                mu[kind][name] + sum(effects[lv][kind][name] for lv in effects)))
                          for name in mu[kind]}
        for tied, source in TIED_BETA.items():  # one GEMM efficiency (model/priors.py)
            coef["beta"][tied] = coef["beta"][source]
        return {"config": levels["config"],
                "levels": {"arch": levels["arch"], "hardware": levels["hardware"],
                           "model_family": levels["family"]},
                "beta": coef["beta"], "alpha": coef["alpha"], "log_effects": effects,
                "noise_sigma": self.noise_sigma(levels["config"]), "noise_nu": NOISE_NU}

    def beta_vector(self, deployment) -> np.ndarray:
        c = self.coefficients(deployment)
        return np.array([c["beta"][f] for f in BETA_FEATURES])

    def alpha_vector(self, deployment) -> np.ndarray:
        c = self.coefficients(deployment)
        return np.array([c["alpha"][f] for f in ALPHA_FEATURES])

    def population(self) -> dict:
        """Population parameters: mu (log and natural), level scales, noise settings."""
        return {"log_mu": self.log_mu(), "median": copy.deepcopy(POPULATION_MEDIANS),
                "level_scales": dict(LEVEL_SCALES), "structured_effects": STRUCTURED_EFFECTS,
                "noise": {"step_nu": NOISE_NU, "step_sigma_range": list(NOISE_SIGMA_RANGE),
                          "alpha_sigma": ALPHA_NOISE_SIGMA, "outlier_rate": OUTLIER_RATE,
                          "outlier_factor": list(OUTLIER_FACTOR)}}


TRUTH = Truth(seed=0)
"""The default ground truth (seed 0)."""

# ---------------------------------------------------------------------------------------
# fleet specifications
# ---------------------------------------------------------------------------------------

WORKLOADS = {
    "balanced": {"prompt_tokens": {"dist": "lognormal", "mean": 600, "std": 400, "min": 16, "max": 4096},
                 "output_tokens": {"dist": "lognormal", "mean": 200, "std": 100, "min": 2, "max": 1024},
                 "prefix": {"num_groups": 8, "system_prompt_len": 256}},
    "prefill_heavy": {"prompt_tokens": {"dist": "lognormal", "mean": 2000, "std": 800, "min": 64, "max": 8000},
                      "output_tokens": {"dist": "lognormal", "mean": 50, "std": 25, "min": 2, "max": 256}},
    "decode_heavy": {"prompt_tokens": {"dist": "lognormal", "mean": 200, "std": 100, "min": 16, "max": 1024},
                     "output_tokens": {"dist": "lognormal", "mean": 500, "std": 200, "min": 16, "max": 1500}},
    "long_prompt": {"prompt_tokens": {"dist": "lognormal", "mean": 2200, "std": 900, "min": 1024, "max": 4096},
                    "output_tokens": {"dist": "lognormal", "mean": 150, "std": 80, "min": 16, "max": 512}},
}
"""Request mixes (token specs of `simulate.workload.sample_tokens`; `balanced` prompts
start with one of 8 shared 256-token system prompts, so prefix caching and KV events
show up)."""

OFFLOAD_PREFIX = {"num_groups": 48, "system_prompt_len": 1024}
"""Runs with CPU offload share system prompts (48 groups x 1024 tokens) and get a GPU KV
cache too small for all of them, so prefixes are evicted to CPU and loaded back."""

MIN_KV_BLOCKS = 2048
"""A deployment must leave at least this many KV blocks (32k tokens) to be used."""


@dataclass(frozen=True)
class RunSpec:
    """One simulated run: a configuration (model x GPU x TP x EP) plus vLLM knobs and a
    workload mix. `heldout` runs are not part of the training fleet."""

    model: str
    hardware: str
    tp: int = 1
    ep: int = 1
    chunk: int = 2048                 # max_num_batched_tokens
    cpu_offload: bool = False
    workload: str = "balanced"
    max_num_seqs: int = 256
    heldout: bool = False

    def deployment(self):
        """The run's `Deployment`, its sampler the one a fit of its traces assumes (the
        model's sampling defaults, `catalog.generation.sampler_for`)."""
        from bayesblis.catalog.generation import sampler_for
        from bayesblis.features.physics import Deployment

        return Deployment(self.model, self.hardware, tp=self.tp, ep=self.ep, dtype="auto",
                          sampler=sampler_for(self.model))

    @property
    def name(self) -> str:
        hw = {"H100-SXM": "h100", "H200-SXM": "h200", "A100-SXM-80GB": "a100", "L40S": "l40s"}
        parts = [self.model, hw.get(self.hardware, self.hardware.lower()), f"tp{self.tp}"]
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        parts.append(f"c{self.chunk}")
        if self.cpu_offload:
            parts.append("offload")
        parts.append(self.workload.replace("_", "-"))
        return "-".join(parts)


@dataclass(frozen=True)
class FleetSpec:
    """Which runs a fleet holds and how each is simulated.

    `duration_s`: simulated traffic per run, split evenly over `load_levels` (stages at
    these fractions of the run's burst capacity, Poisson arrivals).
    """

    name: str
    runs: tuple
    duration_s: float = 90.0
    load_levels: tuple = (0.35, 0.7)
    step_sample_rate: float = 0.1
    rich_subsample_rate: float = 0.01
    outlier_rate: float = OUTLIER_RATE
    heldout_traces: bool = True

    @property
    def train(self) -> list:
        return [r for r in self.runs if not r.heldout]

    @property
    def heldout(self) -> list:
        return [r for r in self.runs if r.heldout]

    @classmethod
    def preset(cls, name: str) -> "FleetSpec":
        """`tiny` (2 runs, 20 s, tests), `demo` (7 + 1 held out, 75 s), `full` (24 + 2) or
        `long_prompt` (6 + 1, 1-4k-token prompts at four rising rates, 120 s)."""
        if name not in PRESETS:
            raise KeyError(f"unknown fleet preset {name!r} (one of {sorted(PRESETS)})")
        return PRESETS[name]()

    def describe(self) -> dict:
        return {"name": self.name, "duration_s": self.duration_s, "load_levels": list(self.load_levels),
                "step_sample_rate": self.step_sample_rate,
                "rich_subsample_rate": self.rich_subsample_rate, "outlier_rate": self.outlier_rate,
                "runs": [asdict(r) | {"name": r.name} for r in self.runs]}


def _tiny() -> FleetSpec:
    return FleetSpec("tiny", (
        RunSpec("llama-3.1-8b", "H100-SXM", 1, workload="balanced"),
        RunSpec("qwen2.5-7b", "A100-SXM-80GB", 2, workload="decode_heavy"),
        RunSpec("qwen2.5-7b", "H100-SXM", 1, workload="balanced", heldout=True),
    ), duration_s=20.0, step_sample_rate=0.2)


def _demo() -> FleetSpec:
    return FleetSpec("demo", (
        RunSpec("llama-3.1-8b", "H100-SXM", 1, workload="balanced"),
        RunSpec("llama-3.1-8b", "A100-SXM-80GB", 2, chunk=512, workload="prefill_heavy"),
        RunSpec("llama-3.1-8b", "L40S", 1, workload="decode_heavy"),
        RunSpec("qwen2.5-7b", "A100-SXM-80GB", 1, workload="decode_heavy"),
        RunSpec("qwen2.5-7b", "L40S", 2, chunk=8192, workload="balanced"),
        RunSpec("mixtral-8x7b", "H100-SXM", 2, workload="balanced"),
        RunSpec("mistral-nemo-12b", "H100-SXM", 4, workload="prefill_heavy"),
        RunSpec("qwen2.5-7b", "H100-SXM", 1, workload="balanced", heldout=True),
    ), duration_s=75.0)


def _full() -> FleetSpec:
    R = RunSpec
    return FleetSpec("full", (
        # H100
        R("llama-3.1-8b", "H100-SXM", 1, workload="balanced"),
        R("llama-3.1-8b", "H100-SXM", 1, chunk=512, workload="prefill_heavy"),
        R("llama-3.1-70b", "H100-SXM", 4, workload="decode_heavy"),
        R("llama-3.1-70b", "H100-SXM", 8, chunk=8192, workload="prefill_heavy"),
        R("mixtral-8x7b", "H100-SXM", 2, workload="balanced"),
        R("qwen3-30b-a3b", "H100-SXM", 2, ep=2, workload="decode_heavy"),
        R("mistral-nemo-12b", "H100-SXM", 1, cpu_offload=True, workload="balanced"),
        # A100
        R("llama-3.1-8b", "A100-SXM-80GB", 1, workload="decode_heavy"),
        R("llama-2-70b", "A100-SXM-80GB", 4, workload="balanced"),
        R("qwen2.5-7b", "A100-SXM-80GB", 1, chunk=8192, workload="prefill_heavy"),
        R("mixtral-8x7b", "A100-SXM-80GB", 4, ep=4, workload="balanced"),
        R("deepseek-v2-lite", "A100-SXM-80GB", 1, workload="decode_heavy"),
        R("codellama-34b", "A100-SXM-80GB", 2, cpu_offload=True, workload="balanced"),
        # L40S
        R("llama-3.1-8b", "L40S", 1, chunk=512, workload="balanced"),
        R("qwen2.5-7b", "L40S", 2, workload="decode_heavy"),
        R("qwen3-14b", "L40S", 2, workload="prefill_heavy"),
        R("yi-34b", "L40S", 4, workload="balanced"),
        R("mixtral-8x7b", "L40S", 4, workload="decode_heavy"),
        # H200
        R("llama-3.1-8b", "H200-SXM", 1, cpu_offload=True, workload="prefill_heavy"),
        R("llama-3.1-70b", "H200-SXM", 2, workload="balanced"),
        R("qwen3-30b-a3b", "H200-SXM", 1, workload="balanced"),
        R("qwen3-14b", "H200-SXM", 1, chunk=8192, workload="decode_heavy"),
        R("mixtral-8x7b", "H200-SXM", 8, ep=8, workload="prefill_heavy"),
        R("mistral-nemo-12b", "H200-SXM", 2, chunk=512, workload="decode_heavy"),
        # held out: every level seen, the configuration not
        R("qwen2.5-7b", "H100-SXM", 1, workload="balanced", heldout=True),
        R("mixtral-8x7b", "H200-SXM", 2, workload="balanced", heldout=True),
    ), duration_s=120.0)


def _long_prompt() -> FleetSpec:
    """Issue #19's load-response fleet: 1-4k-token prompts at four rising rates, so prefill
    chunks share ever more steps with decodes and the inter-token latency rises with load."""
    R = partial(RunSpec, workload="long_prompt")
    return FleetSpec("long_prompt", (
        R("llama-3.1-8b", "H100-SXM", 1),
        R("llama-3.1-8b", "A100-SXM-80GB", 2, chunk=512),
        R("qwen2.5-7b", "A100-SXM-80GB", 1),
        R("qwen2.5-7b", "L40S", 2, chunk=8192),
        R("mixtral-8x7b", "H100-SXM", 2),
        R("mistral-nemo-12b", "H100-SXM", 2),
        R("qwen2.5-7b", "H100-SXM", 1, heldout=True),
    ), duration_s=120.0, load_levels=(0.2, 0.4, 0.6, 0.8))


PRESETS = {"tiny": _tiny, "demo": _demo, "full": _full, "long_prompt": _long_prompt}

# ---------------------------------------------------------------------------------------
# simulation of one run
# ---------------------------------------------------------------------------------------


def _kv_blocks(run: RunSpec, dep) -> int:
    blocks = int(dep.kv_cache_blocks(0.9))
    if run.cpu_offload:
        # a GPU cache smaller than the shared prefixes plus a running batch
        prefix_blocks = OFFLOAD_PREFIX["num_groups"] * OFFLOAD_PREFIX["system_prompt_len"] // 16
        blocks = min(blocks, int(prefix_blocks * 0.75) + 2048)
    return blocks


def _offload_blocks(run: RunSpec, dep) -> tuple[int, float]:
    """(CPU offload blocks, kv_offloading_size_gb) holding every shared prefix."""
    if not run.cpu_offload:
        return 0, 0.0
    prefix_blocks = OFFLOAD_PREFIX["num_groups"] * OFFLOAD_PREFIX["system_prompt_len"] // 16
    per_block = 16 * dep.kv_bytes_per_token_per_gpu
    size_gb = float(np.ceil(prefix_blocks * 1.5 * per_block / 2**30 * 10) / 10)
    return int(size_gb * 2**30 // per_block), size_gb


def run_scenario_spec(run: RunSpec, spec: FleetSpec, *, seed: int, rate_rps=None):
    """The `simulate.scenario.Scenario` of a run (workload stages filled in from
    `rate_rps`, one rate per load level; None -> placeholder rate 1 req/s)."""
    from bayesblis.simulate.scenario import Scenario

    dep = run.deployment()
    mix = WORKLOADS[run.workload]
    rates = list(rate_rps) if rate_rps is not None else [1.0] * len(spec.load_levels)
    stage_s = spec.duration_s / len(rates)
    wl = {"seed": int(seed), "arrival": "poisson",
          "stages": [{"rate": float(r), "duration": float(stage_s)} for r in rates],
          "prompt_tokens": mix["prompt_tokens"], "output_tokens": mix["output_tokens"]}
    if run.cpu_offload:
        wl["prefix"] = dict(OFFLOAD_PREFIX)
    elif mix.get("prefix"):
        wl["prefix"] = dict(mix["prefix"])
    off_blocks, _ = _offload_blocks(run, dep)
    vllm = {"max_num_batched_tokens": run.chunk, "max_num_seqs": run.max_num_seqs,
            "max_model_len": 16384, "gpu_memory_utilization": 0.9, "block_size": 16,
            "enable_prefix_caching": True, "enable_chunked_prefill": True,
            "kv_blocks_total": _kv_blocks(run, dep), "cpu_offload_blocks": off_blocks}
    return Scenario(model=run.model, hardware=run.hardware, tp=run.tp, ep=run.ep, dtype="auto",
                    vllm=vllm, workload_spec=wl, name=run.name, source="bayesblis.synth")


def burst_capacity_rps(run: RunSpec, spec: FleetSpec, truth: Truth, *, seed: int = 0,
                       n_requests: int = 400) -> float:
    """Requests/s the run's deployment sustains at full batch: `n_requests` of the mix
    arriving at once, divided by the time to finish them (true coefficients, no noise)."""
    from bayesblis.simulate.engine import deployment_constants, run_engine
    from bayesblis.simulate.workload import Workload, sample_tokens

    sc = run_scenario_spec(run, spec, seed=seed)
    dep = run.deployment()
    cfg = sc.engine_config(dep)
    rng = np.random.default_rng(seed)
    mix = WORKLOADS[run.workload]
    n = int(n_requests)
    w = Workload(np.zeros(n), sample_tokens(mix["prompt_tokens"], n, rng),
                 sample_tokens(mix["output_tokens"], n, rng))
    res = run_engine(w, cfg, deployment_constants(dep), truth.beta_vector(dep),
                     truth.alpha_vector(dep), noise_sigma=0.0, seed=seed)
    return float(n / max(res.end_s, 1e-6))


def inject_outliers(run, workload, rng, rate: float = OUTLIER_RATE, factor=OUTLIER_FACTOR):
    """Stretch a fraction `rate` of the recorded steps of an `EngineRun` (record=True) by
    a factor uniform in `factor`. Returns (count, workload with shifted arrivals).

    Time stops for everything else while a stretched step runs: every time t of the run
    (step starts/ends, arrivals, queue, schedule, first-token and finish times) maps to
    t + the extra duration of all stretched steps that ended by t. Order and every other
    interval are preserved, so the batches stay those the scheduler formed and every
    step lasts features . beta x noise (x the outlier factor). `run` is modified in
    place; the returned workload is a copy (no arrivals during the extra time)."""
    st = run.steps
    n = len(st.start_s)
    if n == 0 or rate <= 0:
        return 0, workload
    pick = rng.random(n) < rate
    mult = np.ones(n)
    mult[pick] = rng.uniform(factor[0], factor[1], int(pick.sum()))
    extra = (st.end_s - st.start_s) * (mult - 1.0)
    cum = np.concatenate([[0.0], np.cumsum(extra)])
    ends = st.end_s.copy()

    def shift(t):
        t = np.asarray(t, float)
        k = np.searchsorted(ends, np.nan_to_num(t, nan=np.inf), side="right")
        return t + cum[k]

    arrival = np.asarray(workload.arrival_s, float)
    post = run.e2e_s - (run.finish_s - arrival)          # finished -> departed (alpha)
    returned = run.ttft_s - (run.first_token_s - arrival)  # first token -> client (alpha)
    new_arrival = shift(arrival)
    run.queued_s = shift(run.queued_s)
    run.scheduled_s = shift(run.scheduled_s)
    run.first_token_s = shift(run.first_token_s)
    run.finish_s = shift(run.finish_s)
    run.e2e_s = run.finish_s + post - new_arrival
    run.ttft_s = run.first_token_s + returned - new_arrival
    st.start_s, st.end_s = shift(st.start_s), shift(st.end_s)
    run.busy_s = float(np.sum(st.end_s - st.start_s))
    run.end_s = float(st.end_s[-1])
    w = copy.copy(workload)
    w.arrival_s = new_arrival
    return int(pick.sum()), w


def _alpha_noise(run, workload, rng, sigma: float, nu: float):
    """A copy of `workload` whose API arrival times carry noisy arrival->queued delays,
    and `run.e2e_s` with noisy finished->departed delays (both mean-one multiplicative
    Student-t, as the step noise)."""
    n = len(workload)

    def eps(size):
        return np.maximum(0.2, 1.0 + sigma * rng.standard_t(nu, size))

    delay = run.queued_s - workload.arrival_s
    arrival = run.queued_s - delay * eps(n)
    post = run.e2e_s - (run.finish_s - workload.arrival_s)
    post = post * eps(n)
    returned = run.ttft_s - (run.first_token_s - workload.arrival_s)
    w = copy.copy(workload)
    w.arrival_s = arrival                    # may be slightly unsorted: fine for the writer
    run.e2e_s = run.finish_s + post - arrival
    run.ttft_s = run.first_token_s + returned - arrival
    return w


def simulate_run(run: RunSpec, spec: FleetSpec, out_dir, *, truth: Truth, seed: int) -> dict:
    """Simulate one run and write its folder (traces.json, kv_events.jsonl,
    deployment.yaml). Returns its entry of `fleet.json`."""
    from bayesblis.simulate.engine import deployment_constants, run_engine
    from bayesblis.simulate.trace_writer import write_traces

    out_dir = Path(out_dir)
    dep = run.deployment()
    blocks = _kv_blocks(run, dep)
    if blocks < MIN_KV_BLOCKS:
        raise ValueError(f"{run.name}: only {blocks} KV blocks (< {MIN_KV_BLOCKS}); the model "
                         f"does not fit this GPU x TP")
    coef = truth.coefficients(dep)
    cap = burst_capacity_rps(run, spec, truth, seed=seed)
    rates = [round(f * cap, 3) for f in spec.load_levels]
    sc = run_scenario_spec(run, spec, seed=seed, rate_rps=rates)
    cfg = sc.engine_config(dep)
    w = sc.build_workload()
    beta = np.array([coef["beta"][f] for f in BETA_FEATURES])
    alpha = np.array([coef["alpha"][f] for f in ALPHA_FEATURES])
    res = run_engine(w, cfg, deployment_constants(dep), beta, alpha,
                     noise_sigma=coef["noise_sigma"], noise_nu=coef["noise_nu"],
                     seed=seed, record=True)
    rng = _rng(seed, "outliers", run.name)
    n_out, w_shifted = inject_outliers(res, w, rng, spec.outlier_rate)
    w_trace = _alpha_noise(res, w_shifted, rng, ALPHA_NOISE_SIGMA, NOISE_NU)
    has_kv = len(res.steps.kv_events) > 0          # no prefix sharing: no KV events
    if not has_kv and (out_dir / "kv_events.jsonl").exists():
        (out_dir / "kv_events.jsonl").unlink()
    write_traces(res, w_trace, cfg, out_dir, step_sample_rate=spec.step_sample_rate,
                 rich_subsample_rate=spec.rich_subsample_rate, seed=seed, kv_events=has_kv)
    _, size_gb = _offload_blocks(run, dep)
    deployment_yaml = {
        "name": run.name, "model": run.model, "hardware": run.hardware,
        "vllm": {"model": run.model, "tp": run.tp, "ep": run.ep,
                 "max_num_batched_tokens": cfg.max_num_batched_tokens,
                 "max_num_seqs": cfg.max_num_seqs, "max_model_len": cfg.max_model_len,
                 "gpu_memory_utilization": 0.9, "block_size": cfg.block_size,
                 "enable_prefix_caching": cfg.enable_prefix_caching,
                 "enable_chunked_prefill": cfg.enable_chunked_prefill,
                 "async_scheduling": cfg.async_scheduling,
                 "kv_offloading_size_gb": size_gb, "dtype": "auto",
                 "kv_blocks_total_gpu": cfg.kv_blocks_total},
        "synthetic": {"config": coef["config"], "workload": run.workload, "heldout": run.heldout,
                      "truth": "../../truth.json"},
    }
    import yaml

    write_text(out_dir / "deployment.yaml",
               "# synthetic run written by bayesblis.synth (true coefficients: truth.json)\n"
               + yaml.safe_dump(deployment_yaml, sort_keys=False))
    ok = res.status == 0
    return {"name": run.name, "config": coef["config"], "path": str(out_dir),
            "heldout": run.heldout, **{k: v for k, v in asdict(run).items() if k != "heldout"},
            "model_family": coef["levels"]["model_family"], "arch": coef["levels"]["arch"],
            "kv_blocks_total": int(cfg.kv_blocks_total), "cpu_offload_blocks": int(cfg.cpu_offload_blocks),
            "capacity_rps": cap, "stage_rates_rps": rates, "n_requests": int(len(w)),
            "n_ok": int(ok.sum()), "n_steps": int(res.n_steps),
            "n_preemptions": int(res.num_preemptions.sum()), "n_outlier_steps": n_out,
            "busy_fraction": float(res.busy_s / res.end_s) if res.end_s > 0 else 0.0,
            "ttft_mean_s": float(np.nanmean(res.ttft_s[ok])) if ok.any() else None,
            "e2e_mean_s": float(np.nanmean(res.e2e_s[ok])) if ok.any() else None,
            "scenario": sc.describe()}


# ---------------------------------------------------------------------------------------
# the fleet
# ---------------------------------------------------------------------------------------

@dataclass
class Fleet:
    """A generated fleet: `root` (folder), `runs` (training run folders, what to
    ingest), `heldout_runs`, `configs` (one row per run), `truth` (truth.json content)."""

    root: Path
    spec: FleetSpec
    configs: pd.DataFrame
    truth: dict
    seed: int = 0
    runs_dir: Path = field(default=None)

    @property
    def runs(self) -> list[Path]:
        t = self.configs[~self.configs["heldout"]]
        return [Path(p) for p in t["path"]]

    @property
    def heldout_runs(self) -> list[Path]:
        t = self.configs[self.configs["heldout"]]
        return [Path(p) for p in t["path"]]

    @property
    def heldout_configs(self) -> list[str]:
        return list(dict.fromkeys(self.configs.loc[self.configs["heldout"], "config"]))

    @property
    def train_configs(self) -> list[str]:
        return list(dict.fromkeys(self.configs.loc[~self.configs["heldout"], "config"]))

    def _config_truth(self, config_key: str) -> dict:
        c = self.truth["configs"].get(config_key)
        if c is None:
            raise KeyError(f"configuration {config_key!r} is not in this fleet "
                           f"(known: {sorted(self.truth['configs'])})")
        return c

    def truth_for(self, config_key: str) -> dict:
        """{"beta": {...}, "alpha": {...}} true coefficients of a configuration key."""
        c = self._config_truth(config_key)
        return {"beta": dict(c["beta"]), "alpha": dict(c["alpha"])}

    def true_draws(self, config_key: str, n: int = 10):
        """`n` copies of a configuration's true coefficients and noise as simulator `Draws`
        (each draw then simulates its own noise)."""
        from bayesblis.simulate.results import Draws

        c = self._config_truth(config_key)
        return Draws(np.tile([c["beta"][f] for f in BETA_FEATURES], (n, 1)),
                     np.tile([c["alpha"][f] for f in ALPHA_FEATURES], (n, 1)),
                     c["noise_sigma"], c["noise_nu"], source="truth (bayesblis.synth)")

    def run_spec(self, name: str) -> RunSpec:
        for r in self.spec.runs:
            if r.name == name:
                return r
        raise KeyError(name)

    def scenario(self, name: str, *, duration_s: float | None = None):
        """The `Scenario` a run was simulated from (same workload seed and rates)."""
        spec = self.spec if duration_s is None else replace(self.spec, duration_s=duration_s)
        run = self.run_spec(name)
        rows = self.configs[self.configs["name"] == name]
        if len(rows):
            row = rows.iloc[0]
            return run_scenario_spec(run, spec, seed=int(row["seed"]),
                                     rate_rps=list(row["stage_rates_rps"]))
        # a run without traces (heldout_traces=False): rates from the truth, as generated
        seed = self.seed * 1000 + list(self.spec.runs).index(run)
        cap = burst_capacity_rps(run, spec, Truth(int(self.truth["truth_seed"])), seed=seed)
        return run_scenario_spec(run, spec, seed=seed,
                                 rate_rps=[round(f * cap, 3) for f in spec.load_levels])

    @classmethod
    def load(cls, root) -> "Fleet":
        """Read a fleet folder written by `generate_fleet`."""
        root = Path(root)
        meta = json.loads((root / "fleet.json").read_text(encoding="utf-8"))
        truth = json.loads((root / "truth.json").read_text(encoding="utf-8"))
        runs = tuple(RunSpec(**r) for r in meta["spec"]["runs_specs"])
        spec_kw = {k: v for k, v in meta["spec"].items() if k not in ("runs", "runs_specs")}
        spec_kw["load_levels"] = tuple(spec_kw["load_levels"])
        spec = FleetSpec(runs=runs, **spec_kw)
        configs = pd.DataFrame(meta["runs"])
        return cls(root=root, spec=spec, configs=configs, truth=truth, seed=int(meta["seed"]),
                   runs_dir=root / "runs")


def generate_fleet(spec, out_dir, *, seed: int = 0, truth: Truth | None = None,
                   progress: bool | None = None) -> Fleet:
    """Simulate every run of `spec` (a FleetSpec or preset name) into `out_dir`.

    Layout: ``out_dir/runs/<run>/`` (training runs: ingest ``out_dir/runs``),
    ``out_dir/heldout/<run>/`` (held-out runs, when `spec.heldout_traces`),
    ``out_dir/truth.json`` and ``out_dir/fleet.json`` (spec + per-run summary).
    `truth` defaults to `Truth(seed)`; run `i` is simulated with seed `seed * 1000 + i`.
    `progress`: draw a bar of the runs (None: `console.show_progress()`).
    """
    from bayesblis.console import progress_bar

    from bayesblis import __version__

    if isinstance(spec, str):
        spec = FleetSpec.preset(spec)
    truth = truth or Truth(seed=seed)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    todo = []
    for i, r in enumerate(spec.runs):
        if r.heldout and not spec.heldout_traces:
            continue
        blocks = _kv_blocks(r, r.deployment())
        if blocks < MIN_KV_BLOCKS:
            warnings.warn(f"{r.name}: only {blocks} KV blocks (< {MIN_KV_BLOCKS}): the model does "
                          f"not fit this GPU x TP; run skipped", stacklevel=2)
            continue
        todo.append((i, r))
    rows, configs = [], {}
    bar = progress_bar(todo, shown=progress, desc="fleet", unit="run")
    for i, run in bar:
        bar.set_postfix_str(run.name[:40])
        run_seed = seed * 1000 + i
        folder = out_dir / ("heldout" if run.heldout else "runs") / run.name
        row = simulate_run(run, spec, folder, truth=truth, seed=run_seed)
        row["seed"] = run_seed
        rows.append(row)
    kept = {r.name for _, r in todo} | {r.name for r in spec.heldout}
    for run in (r for r in spec.runs if r.name in kept):   # truth, even without traces
        coef = truth.coefficients(run.deployment())
        entry = configs.setdefault(coef["config"], {
            "levels": coef["levels"], "beta": coef["beta"], "alpha": coef["alpha"],
            "log_effects": {lv: coef["log_effects"][lv] for lv in ("config",)},
            "noise_sigma": coef["noise_sigma"], "noise_nu": coef["noise_nu"],
            "heldout": True, "runs": []})
        entry["heldout"] = entry["heldout"] and run.heldout
        entry["runs"].append(run.name)
    levels = {"arch": {}, "hardware": {}, "model_family": {}}
    for c in configs.values():
        for lv, col in (("arch", "arch"), ("hardware", "hardware"), ("family", "model_family")):
            v = c["levels"][col]
            levels[col][v] = truth.effect(lv, v)
    doc = {"truth_version": TRUTH_VERSION, "package_version": __version__, "seed": int(seed),
           "truth_seed": int(truth.seed), "beta_features": list(BETA_FEATURES),
           "alpha_features": list(ALPHA_FEATURES), "population": truth.population(),
           "level_effects": levels, "configs": configs}
    write_json(out_dir / "truth.json", doc)
    spec_doc = spec.describe()
    spec_doc["runs_specs"] = [asdict(r) for r in spec.runs]
    write_json(out_dir / "fleet.json", {"spec": spec_doc, "seed": int(seed), "runs": rows,
                                        "package_version": __version__})
    return Fleet(root=out_dir, spec=spec, configs=pd.DataFrame(rows), truth=doc, seed=seed,
                 runs_dir=out_dir / "runs")


__all__ = ["TRUTH", "Truth", "RunSpec", "FleetSpec", "Fleet", "generate_fleet", "simulate_run",
           "inject_outliers", "burst_capacity_rps", "run_scenario_spec", "WORKLOADS", "PRESETS",
           "POPULATION_MEDIANS", "STRUCTURED_EFFECTS", "LEVEL_SCALES", "MIN_KV_BLOCKS"]
