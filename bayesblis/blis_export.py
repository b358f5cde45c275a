"""Coefficient files for BLIS: the bayesblis backend's (`bayesblis-go`) and, per draw,
BLIS's own trained-physics YAML.

`bayesblis-go` (read by `integrations/blis/bayesblis_model.go`, `blis run|replay
--latency-model bayesblis --bayesblis-coeffs FILE`) holds one deployment's whole step and
request model, so the Go side needs no physics of its own: the affine map from a step's
batch aggregates to the step features (`features.beta.FeatureMap`: weights, bias, the MoE
expert-traffic term, the routed experts' FLOP time per token and attention's per
aggregate), where the rooflines bend, one draw of beta (BETA_FEATURES order) and alpha (µs, ALPHA_FEATURES order), the
per-step noise (sigma, nu, seed), the KV block size (prefix-cache hits are priced as
cached context) and whether the engine schedules asynchronously. Layout:
data_specs/blis-coefficients.md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bayesblis import __version__, atomic
from bayesblis.features.alpha import ALPHA_FEATURES

GO_FORMAT = "bayesblis-go"
GO_FORMAT_VERSION = 4


def go_record(deployment, beta, alpha_us, *, noise_sigma: float = 0.0, noise_nu: float = 30.0,
              noise_seed: int = 0, async_scheduling: bool = True, api_return_delay: bool = True,
              max_num_batched_tokens: int = 0, max_num_seqs: int = 0,
              draw: int | None = None, context: dict | None = None) -> dict:
    """The `bayesblis-go` document of one coefficient draw for `deployment`
    (`features.physics.Deployment`). `beta` in BETA_FEATURES order, `alpha_us` in
    ALPHA_FEATURES order (µs). `async_scheduling` and `api_return_delay` switch the Go
    side's emulation of what BLIS's interface lacks (off: BLIS's plain reading);
    `max_num_batched_tokens` and `max_num_seqs` (0: unknown) let it predict the next step's
    length for the async emulation (`with_engine` sets them from a scenario)."""
    from bayesblis.features.beta import (AGGREGATES, BETA_FEATURES, COMPUTE_INDICES,
                                         MEMORY_INDICES, ROOFLINE_MFU, TP_COMM_INDEX,
                                         WEIGHT_TRAFFIC_INDEX, feature_weights)

    beta = np.asarray(beta, float).ravel()
    alpha = np.asarray(alpha_us, float).ravel()
    if beta.shape != (len(BETA_FEATURES),):
        raise ValueError(f"beta must have {len(BETA_FEATURES)} entries, got {beta.shape}")
    if alpha.shape != (len(ALPHA_FEATURES),):
        raise ValueError(f"alpha_us must have {len(ALPHA_FEATURES)} entries, got {alpha.shape}")
    for name, v in (("beta", beta), ("alpha_us", alpha)):
        if not np.all(np.isfinite(v)) or np.any(v < 0):
            raise ValueError(f"{name} must be finite and non-negative")
    fm = feature_weights(deployment)
    return {
        "format": GO_FORMAT, "format_version": GO_FORMAT_VERSION,
        "config": deployment.config_key,
        "aggregates": list(AGGREGATES), "beta_features": list(BETA_FEATURES),
        "alpha_features": list(ALPHA_FEATURES),
        "weights": np.asarray(fm.weights, float).tolist(),
        "bias": np.asarray(fm.bias, float).tolist(),
        "moe_coeff_s": float(fm.moe_coeff_s), "n_experts": int(fm.n_experts),
        "experts_per_tok": int(fm.experts_per_tok),
        "routed_compute_s_per_token": float(fm.routed_compute_s_per_token),
        "cuda_graph_max_tokens": int(fm.cuda_graph_max_tokens),
        "attention_compute_s": np.asarray(fm.attention_compute, float).tolist(),
        "weight_traffic_index": int(WEIGHT_TRAFFIC_INDEX), "tp_comm_index": int(TP_COMM_INDEX),
        "allreduce_tokens": np.asarray(fm.allreduce_tokens, float).tolist(),
        "allreduce_step_s": np.asarray(fm.allreduce_step_s, float).tolist(),
        "compute_indices": [int(i) for i in COMPUTE_INDICES],
        "memory_indices": [int(i) for i in MEMORY_INDICES],
        "roofline_mfu": float(ROOFLINE_MFU),
        "block_size": int(deployment.block_size),
        "async_scheduling": bool(async_scheduling),
        "api_return_delay": bool(api_return_delay),
        "max_num_batched_tokens": int(max_num_batched_tokens), "max_num_seqs": int(max_num_seqs),
        "beta": beta.tolist(), "alpha_us": alpha.tolist(),
        "noise_sigma": float(noise_sigma), "noise_nu": float(noise_nu),
        "noise_seed": int(noise_seed),
        "draw": draw,
        "bayesblis_version": __version__,
        **({"context": context} if context else {}),
    }


def with_engine(record: dict, engine_config) -> dict:
    """A copy of a `bayesblis-go` record with the engine settings of an
    `simulate.engine.EngineConfig` (async scheduling, token budget, max_num_seqs, block size)."""
    return {**record, "async_scheduling": bool(engine_config.async_scheduling),
            "max_num_batched_tokens": int(engine_config.max_num_batched_tokens),
            "max_num_seqs": int(engine_config.max_num_seqs),
            "block_size": int(engine_config.block_size)}


def draw_sets(draws, n: int | None, *, seed: int = 0, mean: bool = False):
    """(beta [N, K], alpha [N, 4], sigma [N], nu [N]) of a `CoefficientDraws`: `n` draws
    picked without replacement (all when None or more than it holds), or the posterior
    mean as one set."""
    if mean:
        m = draws.mean()
        return _full(m.beta, m.beta_features), m.alpha, m.noise_sigma, m.noise_nu
    total = draws.n_draws
    if n is None or n >= total:
        pick = np.arange(total)
    else:
        pick = np.sort(np.random.default_rng(seed).choice(total, n, replace=False))
    return (_full(draws.beta[pick], draws.beta_features), draws.alpha[pick],
            draws.noise_sigma[pick], draws.noise_nu[pick])


def _full(beta, names) -> np.ndarray:
    """Beta columns in BETA_FEATURES order; a feature the posterior does not hold (fitted
    without it) gets 0."""
    from bayesblis.features.beta import BETA_FEATURES

    beta = np.atleast_2d(np.asarray(beta, float))
    names = list(names)
    if names == list(BETA_FEATURES):
        return beta
    out = np.zeros((beta.shape[0], len(BETA_FEATURES)))
    for j, f in enumerate(BETA_FEATURES):
        if f in names:
            out[:, j] = beta[:, names.index(f)]
    return out


def write_go_files(out: Path, deployment, beta, alpha, sigma, nu, *, async_scheduling=True,
                   api_return_delay: bool = True, engine_config=None, seed: int = 0,
                   max_num_batched_tokens: int = 0, max_num_seqs: int = 0,
                   context: dict | None = None) -> list[Path]:
    """One `bayesblis-go` file per row of `beta`/`alpha`: `out` itself for one row, else
    `<stem>.draw000.json`, ... beside it. Returns the paths written."""
    beta, alpha = np.atleast_2d(beta), np.atleast_2d(alpha)
    n = beta.shape[0]
    paths = draw_paths(out, n, ".json")
    seeds = np.random.SeedSequence(seed).generate_state(n)
    for d, path in enumerate(paths):
        rec = go_record(deployment, beta[d], alpha[d], noise_sigma=float(np.ravel(sigma)[d]),
                        noise_nu=float(np.ravel(nu)[d]), noise_seed=int(seeds[d]),
                        async_scheduling=async_scheduling, api_return_delay=api_return_delay,
                        max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                        draw=None if n == 1 else d,
                        context=context)
        if engine_config is not None:
            rec = with_engine(rec, engine_config)
        atomic.write_json(path, rec)
    return paths


def draw_paths(out, n: int, suffix: str) -> list[Path]:
    """`out` for one set, else `<stem>.draw000<suffix>`, ... beside it."""
    out = Path(out)
    if n == 1:
        return [out]
    return [out.with_name(f"{out.stem}.draw{d:03d}{out.suffix or suffix}") for d in range(n)]


def trained_physics_yaml(alpha_coeffs, beta_coeffs, *, config: str, comments=()) -> str:
    """BLIS `trained_physics_coefficients` YAML of one coefficient set (BLIS orders)."""
    from bayesblis.coefficients import BLIS_ALPHA_ORDER
    from bayesblis.features.beta import BLIS_BETA_ORDER

    lines = [f"# bayesblis coefficients for {config}", *(f"# {c}" for c in comments),
             "trained_physics_coefficients:", "  alpha_coeffs:"]
    lines += [f"    - {float(v)!r}  # {n}" for n, v in zip(BLIS_ALPHA_ORDER, alpha_coeffs)]
    lines.append("  beta_coeffs:")
    lines += [f"    - {float(v)!r}  # {n}" for n, v in zip(BLIS_BETA_ORDER, beta_coeffs)]
    return "\n".join(lines) + "\n"


def slot_mapping(deployment, beta, alpha_us, async_scheduling: bool = True) -> tuple[list, list]:
    """bayesblis coefficients copied into BLIS's slots (`coefficients.blis_slots`): same
    names, different bases (docs/blis.md)."""
    from bayesblis.coefficients import blis_slots
    from bayesblis.features.beta import BETA_FEATURES, blis_async_step_features, blis_tp_slot

    return blis_slots(dict(zip(BETA_FEATURES, np.asarray(beta, float))),
                      dict(zip(ALPHA_FEATURES, np.asarray(alpha_us, float))),
                      tp=deployment.tp, factors=deployment.feature_factors,
                      tp_slot=blis_tp_slot(deployment),
                      async_step=blis_async_step_features(deployment) if async_scheduling else None)


def write_trained_physics_files(out, deployment, beta, alpha, *, context=None,
                                mapping=None) -> list[Path]:
    """One BLIS trained-physics YAML per row of `beta`/`alpha` (`draw_paths`).
    `mapping(deployment, beta_row, alpha_row) -> (alpha_coeffs, beta_coeffs, comments)`
    turns a bayesblis set into BLIS's (default: `slot_mapping`)."""
    beta, alpha = np.atleast_2d(beta), np.atleast_2d(alpha)
    paths = draw_paths(out, beta.shape[0], ".yaml")
    for d, path in enumerate(paths):
        if mapping is None:
            a, b = slot_mapping(deployment, beta[d], alpha[d])
            comments = ["slot mapping: bayesblis coefficients in BLIS's slots (bases differ)"]
        else:
            a, b, comments = mapping(deployment, beta[d], alpha[d])
        if len(paths) > 1:
            comments = [f"draw {d} of {len(paths)}", *comments]
        if context:
            comments = [*comments, *(f"{k}: {v}" for k, v in context.items())]
        atomic.write_text(path, trained_physics_yaml(a, b, config=deployment.config_key,
                                                     comments=comments))
    return paths


def read_go_file(path) -> dict:
    """A `bayesblis-go` file, checked as the Go side checks it (InputError naming the
    field otherwise)."""
    from bayesblis.errors import InputError
    from bayesblis.io.text import parse_json_text, read_text_checked

    path = Path(path)
    data = parse_json_text(read_text_checked(path, expected=GO_FORMAT), path, expected=GO_FORMAT)
    if not isinstance(data, dict) or data.get("format") != GO_FORMAT:
        raise InputError(path, "not a bayesblis-go coefficient file", field="format",
                         expected=f'"{GO_FORMAT}" (bayesblis coefficients ... --format bayesblis-go)')
    if data.get("format_version") != GO_FORMAT_VERSION:
        raise InputError(path, f"format_version {data.get('format_version')!r}",
                         field="format_version", expected=str(GO_FORMAT_VERSION))
    return data


def step_seconds(record: dict, aggregates) -> np.ndarray:
    """Noise-free step times (s) a `bayesblis-go` record gives aggregate rows [n, 7]: the
    Go backend's StepSeconds in numpy (tests compare both with the simulator's)."""
    from bayesblis.features.beta import FeatureMap

    fm = FeatureMap(np.asarray(record["weights"], float), np.asarray(record["bias"], float),
                    float(record["moe_coeff_s"]), int(record["n_experts"]),
                    int(record["experts_per_tok"]),
                    routed_compute_s_per_token=float(record["routed_compute_s_per_token"]),
                    attention_compute=np.asarray(record["attention_compute_s"], float),
                    allreduce_tokens=np.asarray(record["allreduce_tokens"], float),
                    allreduce_step_s=np.asarray(record["allreduce_step_s"], float),
                    cuda_graph_max_tokens=int(record["cuda_graph_max_tokens"]))
    return fm.apply(np.atleast_2d(np.asarray(aggregates, float))) @ np.asarray(record["beta"], float)
