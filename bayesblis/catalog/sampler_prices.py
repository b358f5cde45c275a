"""The time vLLM's sampler takes per engine step, priced from its published kernel timings.

Every engine step samples one token for each request it schedules (a partial prefill's is
discarded). vLLM 0.11-0.15 sample on the PyTorch path unless `VLLM_USE_FLASHINFER_SAMPLER=1`
(vLLM pull request 26859 turned FlashInfer off by default; 40376 back on, after 0.15):

- with top-p or top-k (`SORT`): `logits.sort(dim=-1)` over the whole batch x vocabulary,
  a softmax and cumulative sum, a scatter back, then the sampling below;
- otherwise (`PLAIN`): a softmax over the vocabulary, exponential noise, a divide and an
  argmax; temperature 0 (`GREEDY`): the argmax alone.

The sort is priced from vLLM's H100 timings of its PyTorch top-p sampler (pull request
42191, `H100_SORT_MS`: 1 and 4 rows of 32,768 and 131,072 tokens). Per vocabulary, time
grows as a power of the rows through those two points (rows^0.47 at 32k, rows^0.70 at
131k: the sort's parallelism fills with rows); the price is that curve's chord over
`SERVING_ROWS`, a per-step and a per-request part (`sort_line`), linear in the vocabulary
between and beyond the two measured ones, the same on every GPU
(`SORT_SCALES_WITH_BANDWIDTH`). For 131,072 tokens: 0.29 ms a step and 32 µs a request; for
32,768: 0.19 ms and 7 µs.
(B200's timings of the same sampler at 64-512 rows, pull request 40376, grow about linearly
from 64 to 128 rows at 20 µs a request over 131k tokens; priced as a line through the
origin at that rate, the sort overshot Llama-3.1-8B at 20 req/s by up to 22%:
benchmarks/results/experiments/model-v14-sampler-price.*.) The plain and greedy paths are
priced per request as their passes over float32 logits (`ROW_BYTES_PER_VOCAB`).
"""

from __future__ import annotations

import numpy as np

GREEDY, PLAIN, SORT = "greedy", "plain", "sort"
PATHS = (GREEDY, PLAIN, SORT)

H100_SORT_MS = {32768: (0.094, 0.179), 131072: (0.128, 0.338)}
"""vLLM's PyTorch top-p sampler on H100 (pull request 42191, `topp_whole`): vocabulary ->
ms at (1, 4) rows."""
REFERENCE_GPU = "H100-SXM"
"""The GPU `H100_SORT_MS` was timed on; the plain and greedy paths scale by HBM bandwidth."""
SORT_SCALES_WITH_BANDWIDTH = False
"""Whether the sort's H100 price scales to other GPUs by HBM bandwidth (model versions 15-16).
It does not since version 17: the sort is not bandwidth-bound (a radix sort's passes over
4 rows of 131k tokens move some 50 MB, 15 µs at H100's bandwidth, against 0.34 ms measured;
the rows fit in L2), and scaled it priced L40S's sort 3.9x H100's: the BLIS sim-to-real
study's L40S stages came out +10 to +26% slow (docs/limits.md)."""
SERVING_ROWS = (8, 64)
"""Requests per step over which the sort's power curve is replaced by its chord."""
ROW_BYTES_PER_VOCAB = {GREEDY: 4.0, PLAIN: 48.0}
"""Bytes moved per vocabulary element of one sampled row on the paths without a sort."""


def sampler_path(defaults: dict) -> str:
    """The sampler path requests take under `defaults` (vLLM's sampling fields a request
    inherits, `catalog.generation.sampling_defaults`): GREEDY at temperature 0, SORT with
    top-p below 1 or top-k above 0, else PLAIN."""
    if float(defaults.get("temperature", 1.0)) == 0.0:
        return GREEDY
    top_p = float(defaults.get("top_p", 1.0))
    top_k = float(defaults.get("top_k", 0))
    return SORT if top_p < 1.0 or top_k > 0 else PLAIN


def sort_line(vocab_size: int) -> tuple[float, float]:
    """(seconds per step, seconds per request) of the sort over `vocab_size` tokens on H100:
    the chord over SERVING_ROWS of the power curve through `H100_SORT_MS`, linear in the
    vocabulary (never below 0)."""
    lines = []
    for vocab, (one_ms, four_ms) in sorted(H100_SORT_MS.items()):
        gamma = np.log(four_ms / one_ms) / np.log(4.0)
        lo, hi = SERVING_ROWS
        t_lo, t_hi = one_ms * lo ** gamma, one_ms * hi ** gamma
        per_row = (t_hi - t_lo) / (hi - lo)
        lines.append((vocab, (t_lo - lo * per_row) * 1e-3, per_row * 1e-3))
    (v0, step0, row0), (v1, step1, row1) = lines
    w = (float(vocab_size) - v0) / (v1 - v0)
    return max(step0 + w * (step1 - step0), 0.0), max(row0 + w * (row1 - row0), 0.0)


def step_prices(vocab_size: int, path: str, hbm_bandwidth_bytes_per_s: float) -> tuple[float, float]:
    """(seconds per step, seconds per sampled request) of the sampler on `path` for a
    `vocab_size`-token vocabulary on a GPU of `hbm_bandwidth_bytes_per_s`."""
    if path == SORT:
        step_s, row_s = sort_line(vocab_size)
        scale = (reference_bandwidth() / float(hbm_bandwidth_bytes_per_s)
                 if SORT_SCALES_WITH_BANDWIDTH else 1.0)
        return step_s * scale, row_s * scale
    if path not in ROW_BYTES_PER_VOCAB:
        raise ValueError(f"sampler path must be one of {', '.join(PATHS)}, got {path!r}")
    return 0.0, ROW_BYTES_PER_VOCAB[path] * float(vocab_size) / float(hbm_bandwidth_bytes_per_s)


def reference_bandwidth() -> float:
    """REFERENCE_GPU's datasheet HBM bandwidth (B/s, the GPU catalog's)."""
    from bayesblis.catalog.gpus import load_gpu

    return load_gpu(REFERENCE_GPU).hbm_bandwidth_bytes_per_s
