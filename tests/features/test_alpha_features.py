"""Alpha and queue-wait features."""

import numpy as np
import pytest

from bayesblis.features.alpha import (ALPHA_FEATURES, QUEUE_FEATURES, alpha_features, decoding_at,
                                      queue_wait_features)


def test_alpha_features_in_microseconds():
    f = alpha_features([100, 2000], [10, 0])
    assert f.shape == (2, len(ALPHA_FEATURES))
    # alpha (µs) = (15000, 0.5, 40, 20): 15000 + 0.5*100 + 40*10 = 15450 µs, none decoding
    assert f[0] @ np.array([15000, 0.5, 40, 20]) == pytest.approx(15450e-6)
    assert np.allclose(f[:, 0], 1e-6)
    assert np.allclose(alpha_features(5, 7, 3), [[1e-6, 5e-6, 7e-6, 3e-6]], rtol=1e-12, atol=0)


def test_decoding_at_counts_first_token_before_and_finish_at_or_after():
    first = np.array([0.0, 1.0, 2.0, np.nan, 1.5])
    finish = np.array([3.0, 1.5, np.nan, np.nan, 4.0])  # request 2: no finish yet; 3: never started
    # t = 1.0: request 0 only (request 1's first token is at 1.0, not before)
    # t = 1.5: 0, 1 (finishes at 1.5, still counted), not 4 (first token at 1.5)
    # t = 3.0: 0 (finishes now), 2 (unfinished), 4
    np.testing.assert_array_equal(decoding_at(first, finish, [1.0, 1.5, 3.0, 5.0, np.nan]),
                                  [1, 2, 3, 1, 0])


def test_queue_features():
    f = queue_wait_features(waiting_depth=[3, 0], running_depth=[10, 2], kv_usage_ratio=[0.5, 0.0],
                            prompt_tokens=[5000, 100], max_num_batched_tokens=2048)
    assert f.shape == (2, len(QUEUE_FEATURES))
    # ceil(5000 / 2048) = 3 chunks
    assert np.allclose(f[0], [1e-6, 3e-6, 10e-6, 0.5e-6, 3e-6])
    assert np.allclose(f[1], [1e-6, 0, 2e-6, 0, 1e-6])
    with pytest.raises(ValueError, match="kv_usage_ratio"):
        queue_wait_features(0, 0, 1.5, 10, 2048)
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        queue_wait_features(0, 0, 0.1, 10, 0)
    with pytest.raises(ValueError, match="non-negative"):
        alpha_features(-1, 0)
