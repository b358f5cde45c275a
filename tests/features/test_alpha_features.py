"""Alpha and queue-wait features."""

import numpy as np
import pytest

from bayesblis.features.alpha import ALPHA_FEATURES, QUEUE_FEATURES, alpha_features, queue_wait_features


def test_alpha_features_in_microseconds():
    f = alpha_features([100, 2000], [10, 0])
    assert f.shape == (2, len(ALPHA_FEATURES))
    # alpha (µs) = (15000, 0.5, 40): 15000 + 0.5*100 + 40*10 = 15450 µs
    assert f[0] @ np.array([15000, 0.5, 40]) == pytest.approx(15450e-6)
    assert np.allclose(f[:, 0], 1e-6)
    assert np.allclose(alpha_features(5, 7), [[1e-6, 5e-6, 7e-6]], rtol=1e-12, atol=0)


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
