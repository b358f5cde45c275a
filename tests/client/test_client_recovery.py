"""Slow: coefficients learnt from client-side windows alone, on simulated runs whose truth is
known (bayesblis.synth.TRUTH), land inside their 90% intervals at about the nominal rate."""

import numpy as np
import pandas as pd
import pytest

from bayesblis.client_windows import client_windows
from bayesblis.features.alpha import ALPHA_FEATURES
from bayesblis.features.beta import BETA_FEATURES
from bayesblis.features.physics import Deployment
from bayesblis.model.data import ModelData, config_row
from bayesblis.model.hierarchy import LatencyModel
from bayesblis.simulate.engine import EngineConfig, deployment_constants, run_engine
from bayesblis.simulate.workload import generate
from bayesblis.synth import TRUTH

DEPLOYMENTS = (("llama-2-7b", 1), ("llama-2-70b", 4), ("codellama-34b", 2), ("mixtral-8x7b", 2))
RATES_RPS = (4.0, 8.0, 12.0)


def _client_run(dep, rate_rps, seed):
    """Simulate one run with the true coefficients and step noise; keep what a client sees."""
    truth = TRUTH.coefficients(dep)
    w = generate([{"rate": rate_rps, "duration": 150.0}],
                 {"dist": "normal", "mean": 600, "std": 150},
                 {"dist": "normal", "mean": 220, "std": 60}, seed=seed)
    cfg = EngineConfig(max_num_batched_tokens=2048, max_num_seqs=128, max_model_len=4096,
                       kv_blocks_total=20000, enable_prefix_caching=False)
    run = run_engine(w, cfg, deployment_constants(dep), TRUTH.beta_vector(dep),
                     TRUTH.alpha_vector(dep), noise_sigma=truth["noise_sigma"],
                     noise_nu=truth["noise_nu"], seed=seed)
    return pd.DataFrame({"arrival_s": w.arrival_s, "ttft_s": run.ttft_s, "e2e_s": run.e2e_s,
                         "prompt_tokens": w.prompt_tokens, "output_tokens": w.output_tokens,
                         "has_error": False, "stage": 0})


@pytest.mark.slow
def test_client_windows_recover_true_coefficients():
    configs, parts, truth = [], [], {}
    for i, (model, tp) in enumerate(DEPLOYMENTS):
        dep = Deployment(model, "H100", tp=tp)
        row = config_row(dep)
        configs.append(row)
        truth[row["config"]] = np.r_[TRUTH.beta_vector(dep), TRUTH.alpha_vector(dep)]
        for j, rate in enumerate(RATES_RPS):
            req = _client_run(dep, rate, seed=10 * i + j)
            obs = client_windows(req, dep, max_num_batched_tokens=2048, config=row["config"],
                                 source=f"{model}-{rate:g}rps")
            parts.append(obs.sample(min(len(obs), 150), random_state=0))
    data = ModelData(pd.DataFrame(configs), pd.concat(parts, ignore_index=True))
    model = LatencyModel(sampler_config={"draws": 300, "tune": 300, "chains": 2, "seed": 3})
    model.build_model(data)
    model.fit(progressbar=False)
    post = model.idata.posterior
    covered = []
    for key, true in truth.items():
        draws = np.concatenate([
            post["beta"].sel(config=key).stack(s=("chain", "draw")).transpose("s", ...).values,
            post["alpha"].sel(config=key).stack(s=("chain", "draw")).transpose("s", ...).values],
            axis=1)
        lo, hi = np.quantile(draws, [0.05, 0.95], axis=0)
        covered.append((lo <= true) & (true <= hi))
    covered = np.array(covered)
    names = list(BETA_FEATURES) + list(ALPHA_FEATURES)
    per_feature = dict(zip(names, covered.mean(axis=0).round(2)))
    print("coverage of the truth per coefficient:", per_feature, "overall", covered.mean())
    # nominal 0.90; measured 0.98 (51 of 52) on 2 x 300 draws whose r_hat was 1.06: the
    # intervals of coefficients the windows barely inform (EP, offload) are their priors'
    assert covered.mean() >= 0.75, per_feature
