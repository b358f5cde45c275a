"""Repeated prompts: the cycle of a shared-prefix workload is found from input lengths."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bayesblis.io.prompt_reuse import prompt_period, repeated_prompts

REAL = Path(__file__).resolve().parents[2].parent / "shared/data/real/h100-inference-perf"


def cycled(n_prompts: int, n: int, seed: int = 0) -> np.ndarray:
    lengths = np.random.default_rng(seed).integers(560, 600, n_prompts)
    return lengths[np.arange(n) % n_prompts]


def test_a_cycle_of_prompts_is_found():
    assert prompt_period(cycled(100, 3000)) == 100
    assert prompt_period(cycled(7, 300)) == 7


def test_tokenisation_noise_in_a_few_requests_still_finds_the_cycle():
    x = cycled(50, 2000)
    x[::40] += 1  # 2.5% of the lengths off by a token
    assert prompt_period(x) == 50


def test_no_cycle_in_fixed_or_random_lengths():
    # one fixed prompt length matches at every lag: that is no evidence of repeated prompts
    assert prompt_period(np.full(1000, 1024)) is None
    assert prompt_period(np.random.default_rng(1).integers(100, 4000, 1000)) is None
    assert prompt_period(cycled(100, 110)) is None  # too few pairs to judge lag 100


def test_repeats_follow_send_order_not_row_order():
    n = 400
    req = pd.DataFrame({"request_index": np.arange(n), "prompt_tokens": cycled(40, n)})
    req = req.sample(frac=1.0, random_state=3)  # rows shuffled
    prompt_id, repeat = repeated_prompts(req)
    idx = req["request_index"].to_numpy()
    np.testing.assert_array_equal(prompt_id, idx % 40)
    np.testing.assert_array_equal(repeat, idx >= 40)


@pytest.mark.skipif(not REAL.exists(), reason="shared real data not present")
def test_the_shared_runs_cycle_through_100_prompts():
    from bayesblis.io.inference_perf import read_inference_perf

    req = read_inference_perf(REAL / "20260217-155451-llama-2-7b-tp1-codegen").requests
    prompt_id, repeat = repeated_prompts(req)
    assert prompt_id.max() + 1 == 100
    assert repeat.sum() == len(req) - 100
