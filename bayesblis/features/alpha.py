"""Request-level (alpha) features and the optional queue-wait regression features.

All features are counts x 1e-6 s, so every coefficient reads in microseconds:
seconds = features @ alpha_us. See data_specs/features.md.
"""

from __future__ import annotations

import numpy as np

from bayesblis.constants import US

ALPHA_FEATURES = ("alpha_const_s", "alpha_prompt_s", "alpha_output_s", "alpha_frontend_s")
"""µs per request (API/tokenize/post-process), µs per prompt token, µs per output token,
µs per request decoding when a request's first (or last) token is returned.

The last is the API server's share of a busy engine: every step's outputs (one per
running request) are detokenized and streamed by one process, so a request's token waits
behind the others' (`decoding_at`). It is paid twice per request, by its first and its
last token, so it moves TTFT and E2E, not the per-token ITL in between. On the 16 shared
H100 runs the TTFT the step model left unexplained grew by 0.4-1.1 ms per 1,000 output
tokens/s of the server across all four models (docs/model.md, model version 6). BLIS's
alpha has no such term: a slot-mapped export prices it at a typical request
(`coefficients.BLIS_TYPICAL_REQUEST`, `coefficients.to_blis_alpha`)."""

QUEUE_FEATURES = ("queue_const_s", "queue_waiting_s", "queue_running_s",
                  "queue_kv_usage_s", "queue_prompt_chunks_s")
"""Queued -> scheduled wait as a regression (alternative to the emergent DES wait):
µs per wait, µs per request waiting ahead, µs per running request, µs per unit of
KV usage ratio, µs per token-budget chunk of the prompt."""


def _columns(names, *values) -> np.ndarray:
    cols = []
    for name, value in zip(names, values):
        arr = np.atleast_1d(np.asarray(value, dtype=float))
        if arr.ndim != 1:
            raise ValueError(f"'{name}' must be a scalar or 1-D, got shape {arr.shape}")
        if not np.all(np.isfinite(arr)) or np.any(arr < 0):
            raise ValueError(f"'{name}' must be finite and non-negative")
        cols.append(arr)
    try:
        return np.stack(np.broadcast_arrays(*cols), axis=1)
    except ValueError:
        raise ValueError(f"inputs have incompatible lengths: "
                         f"{ {n: c.shape for n, c in zip(names, cols)} }") from None


def alpha_features(prompt_tokens, output_tokens, decoding=0) -> np.ndarray:
    """[n_requests, 4]: (1, prompt_tokens, output_tokens, requests decoding) x 1e-6 s."""
    x = _columns(("prompt_tokens", "output_tokens", "decoding"), prompt_tokens, output_tokens,
                 decoding)
    out = np.empty((x.shape[0], len(ALPHA_FEATURES)))
    out[:, 0] = US
    out[:, 1:] = x * US
    return out


def decoding_at(first_token_s, finish_s, t) -> np.ndarray:
    """Requests decoding at each time `t`: first token < t <= finish (requests without a
    first token never count; without a finish, from their first token on)."""
    first = np.asarray(first_token_s, float)
    fin = np.asarray(finish_s, float)
    first_sorted = np.sort(first[np.isfinite(first)])
    fin_sorted = np.sort(fin[np.isfinite(first) & np.isfinite(fin)])
    t = np.nan_to_num(np.asarray(t, float), nan=-np.inf)
    return (np.searchsorted(first_sorted, t, side="left")
            - np.searchsorted(fin_sorted, t, side="left")).astype(float)


def queue_wait_features(waiting_depth, running_depth, kv_usage_ratio, prompt_tokens,
                        max_num_batched_tokens) -> np.ndarray:
    """[n_requests, 5] queue-wait features at the request's arrival in the queue:
    (1, waiting_depth, running_depth, kv_usage_ratio, ceil(prompt/budget)) x 1e-6 s.

    `kv_usage_ratio` is in [0, 1]; `prompt_tokens / max_num_batched_tokens` rounded up
    is the number of steps the prompt needs under chunked prefill.
    """
    x = _columns(("waiting_depth", "running_depth", "kv_usage_ratio", "prompt_tokens",
                  "max_num_batched_tokens"),
                 waiting_depth, running_depth, kv_usage_ratio, prompt_tokens, max_num_batched_tokens)
    if np.any(x[:, 2] > 1.0 + 1e-9):
        raise ValueError("'kv_usage_ratio' must be in [0, 1]")
    if np.any(x[:, 4] <= 0):
        raise ValueError("'max_num_batched_tokens' must be positive")
    out = np.empty((x.shape[0], len(QUEUE_FEATURES)))
    out[:, 0] = US
    out[:, 1:4] = x[:, 0:3] * US
    out[:, 4] = np.ceil(x[:, 3] / x[:, 4]) * US
    return out
