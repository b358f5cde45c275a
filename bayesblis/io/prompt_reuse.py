"""Which requests of a client trace repeat an earlier prompt (and so hit the prefix cache).

inference-perf's shared-prefix generator builds a fixed set of prompts and sends them in
turn: request i carries prompt ``i mod P``. With prefix caching on, every prompt after its
first occurrence is served from the cache except its last partial block, so its prefill
computes a few tokens, not hundreds. The 16 shared H100 runs do this with P = 100: each
run's input lengths repeat at lag 100 in 98-99.7% of requests, and each length occurs a
multiple of n / 100 times. Priced as fresh prompts, their prefill came out 75-110x faster
than the GPU's datasheet peak (docs/accuracy.md, "What shapes the model on these runs").

The period is found from the input lengths alone (`prompt_period`): the smallest lag at
which at least `MIN_MATCH` of the requests have the length of the request `lag` earlier,
when lengths vary enough that this cannot be chance (a workload of one fixed prompt length
matches at every lag and is never taken for a cycle).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

MIN_MATCH = 0.9
"""Share of requests whose input length equals that of the request one period earlier."""

MAX_CHANCE_MATCH = 0.3
"""Largest chance of two random requests having equal input lengths (sum of squared length
frequencies) for which a match rate of MIN_MATCH counts as evidence of a cycle."""

MIN_PAIRS = 20
"""Fewest (request, request one period earlier) pairs a period is judged on."""


def prompt_period(input_tokens, *, max_period: int = 2000) -> int | None:
    """The cycle length of a request sequence's prompts (requests in send order), or None."""
    x = np.asarray(input_tokens)
    n = len(x)
    if n < 2 + MIN_PAIRS:
        return None
    _, counts = np.unique(x, return_counts=True)
    if float(np.sum((counts / n) ** 2)) > MAX_CHANCE_MATCH:
        return None
    for lag in range(1, min(max_period, n - MIN_PAIRS) + 1):
        if np.mean(x[lag:] == x[:-lag]) >= MIN_MATCH:
            return lag
    return None


def repeated_prompts(requests: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(prompt id, repeat flag) per row of a request table (`request_index` gives the send
    order, `prompt_tokens` the lengths): id = send position mod the period and repeat =
    an earlier request carried the same prompt. Without a cycle: ids -1, no repeats."""
    order = (requests["request_index"].to_numpy() if "request_index" in requests
             else np.arange(len(requests)))
    sent = np.argsort(order, kind="stable")     # row numbers in send order
    ranks = np.empty(len(order), np.int64)
    ranks[sent] = np.arange(len(order))
    lengths = requests["prompt_tokens"].to_numpy()[sent]
    period = prompt_period(lengths)
    if period is None:
        return np.full(len(order), -1, np.int64), np.zeros(len(order), bool)
    return ranks % period, ranks >= period
