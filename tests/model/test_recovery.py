"""Parameter recovery on synthetic data drawn from a known hierarchy.

Fast tier: the shared tiny fit (tens of draws) must cover most true coefficients.
Slow tier (`pytest -m slow`): 3 GPUs x 4 families (dense and MoE) x TP 1/2/4 with one
configuration held out; 90% intervals cover the truth near the nominal rate and the
held-out configuration's truth falls inside its population-level intervals.
"""

import numpy as np
import pytest

from bayesblis.coefficients import coefficient_draws
from bayesblis.model.data import ModelData
from bayesblis.model.hierarchy import LatencyModel
from bayesblis.model.store import load_posterior
from bayesblis.model.synthetic_steps import truth_coverage
from model_helpers import FEATURES, synthetic_data


def test_tiny_fit_covers_most_true_coefficients(tiny_fit):
    _, path, truth = tiny_fit
    assert truth_coverage(load_posterior(path).idata.posterior, truth) >= 0.75


@pytest.mark.slow
def test_recovery_with_a_held_out_configuration():
    families = (("llama", "dense"), ("qwen3", "dense"), ("mixtral", "moe"), ("qwen3_moe", "moe"))
    from model_helpers import LAYERS
    LAYERS.setdefault("qwen3_moe", 48)
    data, truth = synthetic_data(hardware=("H100-SXM", "A100-SXM-80GB", "L40S"), families=families,
                                 tps=(1, 2, 4), n_obs=60, seed=5)
    held = data.configs["config"].iloc[7]
    train = ModelData(data.configs[data.configs["config"] != held], data.obs[data.obs["config"] != held])
    model = LatencyModel(sampler_config={"draws": 400, "tune": 400, "chains": 2, "seed": 2})
    model.build_model(train)
    model.fit(progressbar=False)
    from bayesblis.validate import _posterior_view
    post = _posterior_view(model)
    seen_truth = {k: v for k, v in truth.items() if k != held}
    coverage = truth_coverage(post.idata.posterior, seen_truth)
    assert 0.75 <= coverage <= 1.0, coverage
    row = data.configs[data.configs["config"] == held].iloc[0]
    draws = coefficient_draws(post, model=row["model"], model_family=row["model_family"], arch=row["arch"],
                              hardware=row["hardware"], tp=int(row["tp"]))
    lo, hi = np.quantile(draws.beta, [0.05, 0.95], axis=0)
    inside = (lo <= truth[held]) & (truth[held] <= hi)
    assert inside.mean() >= 0.8, dict(zip(FEATURES, inside))
