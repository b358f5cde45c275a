"""Helpers shared by the simulator tests (imported by name: tests/simulate is on sys.path)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO.parent / "shared" / "data"
REAL = SHARED_DATA / "real" / "h100-inference-perf"

# Prior-median-like coefficients (BETA_FEATURES order) and alpha in µs.
BETA_PRIOR = {"prefill_compute_s": 2.2, "decode_compute_s": 1.0, "weight_traffic_s": 1.15,
              "kv_traffic_s": 1.4, "kv_token_layer_s": 0.2, "tp_comm_s": 1.1, "tp_sync_s": 8.0, "ep_comm_s": 1.0, "offload_s": 1.0,
              "layer_overhead_s": 30.0, "request_overhead_s": 4.0, "step_overhead_s": 100.0,
              "sampling_s": 1.0, "gemm_fixed_s": 1.0}
ALPHA_PRIOR = {"alpha_const_s": 2000.0, "alpha_prompt_s": 0.5, "alpha_output_s": 20.0,
               "alpha_frontend_s": 20.0}


def beta_vector(values: dict) -> np.ndarray:
    from bayesblis.features.beta import BETA_FEATURES

    return np.array([float(values.get(n, 0.0)) for n in BETA_FEATURES])


def unit_step_beta(step_ms: float = 1.0) -> np.ndarray:
    """Every step lasts exactly `step_ms` (only the per-step overhead, in µs)."""
    return beta_vector({"step_overhead_s": step_ms * 1000.0})


def coefficients_json(path: Path) -> Path:
    import json

    path.write_text(json.dumps({"alpha": ALPHA_PRIOR, "beta": BETA_PRIOR}))
    return path
