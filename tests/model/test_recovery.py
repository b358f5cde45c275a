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
from bayesblis.model.store import Posterior, load_posterior
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
    post = Posterior.of_fit(model)
    seen_truth = {k: v for k, v in truth.items() if k != held}
    coverage = truth_coverage(post.idata.posterior, seen_truth)
    assert 0.75 <= coverage <= 1.0, coverage
    row = data.configs[data.configs["config"] == held].iloc[0]
    draws = coefficient_draws(post, model=row["model"], model_family=row["model_family"], arch=row["arch"],
                              hardware=row["hardware"], tp=int(row["tp"]))
    lo, hi = np.quantile(draws.beta, [0.05, 0.95], axis=0)
    inside = (lo <= truth[held]) & (truth[held] <= hi)
    assert inside.mean() >= 0.8, dict(zip(FEATURES, inside))


@pytest.mark.slow
def test_long_prompt_fleet_recovers_the_load_response(tmp_path):
    """Issue #19: 1-4k-token prompts at 20-80% of capacity (synth preset `long_prompt`). The fit
    covers the true coefficients, and replayed stage by stage its ITL tracks what the runs'
    own traces measured, including how steeply ITL rises with the rate."""
    from bayesblis.load_response import curve_errors, fit_fleet, stage_curve
    from bayesblis.synth import generate_fleet

    fleet = generate_fleet("long_prompt", tmp_path / "fleet", seed=0, progress=False)
    model, md = fit_fleet(fleet, draws=300, seed=0)
    truth = {k: [fleet.truth["configs"][k]["beta"][f] for f in FEATURES] for k in fleet.train_configs}
    assert truth_coverage(model.idata.posterior, truth, identified_in=md) >= 0.75
    post = Posterior.of_fit(model)
    curves = [stage_curve(fleet, name, post, n_draws=30, seed=0) for name in fleet.configs["name"]]
    seen = curve_errors([c for c in curves if c["seen"]], "itl_mean_s", "measured")
    assert seen["median_abs_error"] <= 0.05 and seen["coverage"] >= 0.75, seen
    assert seen["median_rise_measured"] > 0.5        # the load response is there to track
    assert seen["median_rise_pred"] == pytest.approx(seen["median_rise_measured"], rel=0.2), seen
    held = curve_errors([c for c in curves if not c["seen"]], "itl_mean_s", "measured")
    assert held["coverage"] >= 0.75 and held["median_abs_error"] <= 0.15, held
