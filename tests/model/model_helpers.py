"""Helpers shared by the model tests (imported by name: tests/model is on sys.path)."""

import numpy as np
import pandas as pd
import pytest

from bayesblis.model.data import ModelData, config_key
from bayesblis.model.priors import BETA_PRIORS

FEATURES = list(BETA_PRIORS)
LAYERS = {"llama": 32, "qwen3": 40, "mixtral": 32}


def synthetic_data(hardware=("H100-SXM", "A100-SXM-80GB"),
                   families=(("llama", "dense"), ("qwen3", "dense"), ("mixtral", "moe")),
                   tps=(1, 2), n_obs=40, noise=0.05, seed=0):
    """(ModelData, true beta per config) from mu = log prior medians + level effects."""
    rng = np.random.default_rng(seed)
    mu = np.log([BETA_PRIORS[f]["median"] for f in FEATURES])
    u_hw = {h: rng.normal(0, 0.15, len(FEATURES)) for h in hardware}
    u_fam = {f: rng.normal(0, 0.15, len(FEATURES)) for f, _ in families}
    rows, obs, truth = [], [], {}
    for h in hardware:
        for fam, arch in families:
            for tp in tps:
                key = config_key(f"{fam}-m", h, tp)
                rows.append(dict(config=key, model=f"{fam}-m", model_family=fam, arch=arch,
                                 hardware=h, tp=tp, ep=1, dtype="bf16"))
                beta = np.exp(mu + u_hw[h] + u_fam[fam] + rng.normal(0, 0.05, len(FEATURES)))
                truth[key] = beta
                X = np.zeros((n_obs, len(FEATURES)))
                X[:, 0] = rng.exponential(5e-3, n_obs) * (rng.random(n_obs) < 0.5)
                X[:, 1] = rng.uniform(1e-4, 1e-3, n_obs)
                X[:, 2] = rng.uniform(2e-3, 4e-3) / tp
                X[:, 3] = rng.uniform(1e-4, 3e-3, n_obs)
                X[:, 4] = (tp > 1) * rng.uniform(1e-4, 1e-3, n_obs)
                X[:, 7] = LAYERS[fam] * 1e-6
                X[:, 8] = rng.integers(1, 64, n_obs) * 1e-6
                X[:, 9] = 1e-6
                y = X @ beta * (1 + noise * rng.standard_t(5, n_obs))
                frame = pd.DataFrame(X, columns=[f"f_{f}" for f in FEATURES])
                frame["y_s"] = np.abs(y)
                frame["n_steps"] = 1
                frame["kind"] = "step"
                frame["config"] = key
                obs.append(frame)
    return ModelData(pd.DataFrame(rows), pd.concat(obs, ignore_index=True)), truth


