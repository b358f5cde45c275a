"""A tiny real fit of traced runs (the bundled samples) together with operator profiles:
profile configurations pool through the hardware level, get their own error term, and
coefficients and simulation keep working for the traced configuration."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))


@pytest.fixture(scope="module")
def joint_fit(tmp_path_factory):
    from profile_helpers import write_profiles

    from bayesblis.design import build_model_data
    from bayesblis.io.dataset import ingest, sample_paths
    from bayesblis.model.hierarchy import LatencyModel
    from bayesblis.operator_evidence import spread_subsample

    root = tmp_path_factory.mktemp("joint")
    profiles = write_profiles(root / "vidur", gpus=("a40", "h100"),
                              models=("meta-llama/Llama-2-7b-hf",), network=("h100",))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TraceV2 sample gives no windows
        md = build_model_data(ingest([*sample_paths(), profiles]), hardware="H100-SXM",
                              max_obs_per_config=25, seed=0)
    c = md.configs
    # NCCL all-reduce rows stay out of a fit with traced runs (WITH_TRACES_ALL_REDUCE)
    assert not c["model"].str.contains("all-reduce").any()
    md.configs = c[~c["model"].str.startswith("ops:") | (c["tp"] == 1)].reset_index(drop=True)
    md.obs = spread_subsample(md.obs[md.obs["config"].isin(md.configs["config"])], 8, seed=0)
    md.__post_init__()
    model = LatencyModel(sampler_config={"draws": 15, "tune": 25, "chains": 1, "seed": 4,
                                         "nuts_backend": "jax", "max_treedepth": 5})
    model.build_model(md)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tens of draws: ESS warnings
        model.fit(progressbar=False)
    from bayesblis.model.store import load_posterior, save_posterior

    return model, md, load_posterior(save_posterior(model, root / "posterior.nc"))


def test_profile_rows_are_their_own_configurations_and_kind(joint_fit):
    model, md, _ = joint_fit
    assert set(md.configs["config"]) == {
        "llama-2-7b|H100-SXM|tp1|ep1|fp16", "ops:llama-2-7b|A40|tp1|ep1|fp16",
        "ops:llama-2-7b|H100-SXM|tp1|ep1|fp16"}
    assert set(md.levels("hardware")) == {"A40", "H100-SXM"}
    post = model.idata.posterior
    assert "operator_profile" in list(post["sigma_kind"]["approx_kind"].values)
    beta = post["beta"].median(("chain", "draw"))
    # synthetic profiles: prefill 1.4 x FLOP time; the fit recovers it roughly in 15 draws
    for cfg in ("ops:llama-2-7b|A40|tp1|ep1|fp16", "ops:llama-2-7b|H100-SXM|tp1|ep1|fp16"):
        assert 1.0 < float(beta.sel(config=cfg, feature="prefill_compute_s")) < 2.0


def test_coefficients_and_simulation_for_traced_and_profile_informed_gpus(joint_fit):
    from bayesblis.coefficients import deployment_draws
    from bayesblis.errors import UnseenLevelError
    from bayesblis.features.physics import Deployment

    _, _, posterior = joint_fit
    traced = Deployment("llama-2-7b", "H100-SXM", tp=1, dtype="fp16")
    seen = deployment_draws(posterior, traced, n_draws=3, seed=1)
    assert seen.seen_config and seen.beta.shape == (3, len(seen.beta_features))
    assert np.isfinite(seen.beta).all() and (seen.beta > 0).all()
    # A40 was seen only through operator profiles: no unseen level for a traced-style A40 run
    a40 = deployment_draws(posterior, Deployment("llama-2-7b", "A40", tp=1, dtype="fp16"), n_draws=3)
    assert a40.unseen_levels == {} and not a40.seen_config
    with pytest.raises(UnseenLevelError):
        deployment_draws(posterior, Deployment("llama-2-7b", "A100", tp=1, dtype="fp16"), n_draws=3)

    from bayesblis.simulate.results import Draws, run_scenario
    from bayesblis.simulate.scenario import Scenario

    sc = Scenario.from_dict({"model": "llama-2-7b", "hardware": "H100-SXM", "dtype": "fp16",
                             "workload": {"stages": [{"rate": 4, "duration": 2}],
                                          "prompt_tokens": 200, "output_tokens": 20}})
    result = run_scenario(sc, Draws.from_coefficient_draws(seen, source="joint"), seed=0,
                          n_workers=1)
    assert result["counts"]["n_requests"] == 8 and result["counts"]["n_dropped"] == 0
    assert np.isfinite(result["summary"]["ttft_mean_s"]["median"])
