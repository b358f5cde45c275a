"""Saturation: the share of draws whose queue keeps growing through a stage
(`results.stage_lag_growth`), on exact arrival/finish curves and real simulator runs."""

from __future__ import annotations

import numpy as np
import pytest

from bayesblis.simulate.results import (SATURATION_LAG_GROWTH, Draws, run_scenario,
                                        saturated, saturated_share, stage_lag_growth)
from bayesblis.simulate.scenario import Scenario

from sim_helpers import ALPHA_PRIOR, BETA_PRIOR, beta_vector


def test_lag_growth_is_zero_when_the_server_keeps_up_and_rate_ratio_minus_one_when_not():
    arrival = np.arange(400) / 10.0                     # 10 req/s over [0, 40) s
    keeps_up = arrival + 2.0 + 0.5 * np.sin(arrival)     # E2E varies, no trend
    assert stage_lag_growth(arrival, keeps_up, 0.0, 40.0) == pytest.approx(0.0, abs=0.02)
    falls_behind = 1.0 + np.arange(400) / 8.0            # completes 8 req/s
    assert stage_lag_growth(arrival, falls_behind, 0.0, 40.0) == pytest.approx(10 / 8 - 1, rel=0.02)
    # a backlog from before the stage that drains is not saturation
    drains = np.maximum(arrival + 1.0, 30.0 + np.arange(400) / 20.0 - 15.0)
    assert stage_lag_growth(arrival, drains, 20.0, 40.0) < 0
    # no arrival in the second or last quarter: not judged
    assert np.isnan(stage_lag_growth(arrival, keeps_up, 50.0, 60.0))
    flags = saturated([0.0, 0.2, np.nan, SATURATION_LAG_GROWTH])
    assert np.array_equal(flags, [0.0, 1.0, np.nan, 0.0], equal_nan=True)
    assert saturated_share(flags) == pytest.approx(1 / 3) and saturated_share([np.nan]) is None


def test_real_runs_saturate_far_above_capacity_and_not_far_below():
    """Two stages of one tiny scenario (llama-2-7b, H100, about 67 req/s capacity with these
    coefficients and 50 output tokens): 2 req/s (share 0), then 100 req/s (share 1); six
    noise draws."""
    sc = Scenario.from_dict({
        "model": "llama-2-7b", "hardware": "H100-SXM",
        "vllm": {"max_num_batched_tokens": 2048, "max_num_seqs": 64, "max_model_len": 4096},
        "workload": {"seed": 3, "arrival": "poisson",
                     "stages": [{"rate": 2, "duration": 30}, {"rate": 100, "duration": 10}],
                     "prompt_tokens": {"dist": "uniform", "min": 200, "max": 800},
                     "output_tokens": {"dist": "uniform", "min": 20, "max": 80}}})
    draws = Draws(np.tile(beta_vector(BETA_PRIOR), (6, 1)),
                  np.tile(list(ALPHA_PRIOR.values()), (6, 1)), 0.1, 5.0)
    res = run_scenario(sc, draws, seed=0, n_workers=1)
    light, heavy = res["stages"]
    assert light["saturated_share"] == 0.0 and heavy["saturated_share"] == 1.0
    assert light["lag_growth"]["hi"] < SATURATION_LAG_GROWTH < heavy["lag_growth"]["lo"]
    assert heavy["lag_growth"]["median"] > 0.2   # 100 req/s arrive, about 67 complete
    assert res["counts"]["saturated_share_any_stage"] == 1.0
    assert res["metadata"]["saturation_lag_growth"] == SATURATION_LAG_GROWTH
    # the queue grows through the heavy stage: its TTFT is queueing, not prefill
    assert heavy["ttft_mean_s"]["median"] > 20 * light["ttft_mean_s"]["median"]
