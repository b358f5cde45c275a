"""Data reduction: sum groups of similar steps into window observations.

The model already explains a window of ``n`` summed steps (features ``F = sum f_i``,
duration ``Y = sum y_i``) with mean ``F . beta`` and relative scale
``sigma_step / sqrt(n)`` (see `bayesblis.model.hierarchy`). When the ``n`` steps have
(nearly) the same feature vector, the window carries (nearly) the same information about
``beta`` as its steps do one by one: the mean is exact (linear), and the Fisher
information ``sum f_i f_i' / m_i^2`` of the steps equals ``n F F' / M^2`` of the window
when every ``f_i`` is the same. So a table of N steps becomes N / k windows and every
log-density evaluation costs k times less.

What is *not* kept: the tail shape of single steps. A sum of k Student-t steps is closer
to normal, so ``nu`` (and with it the scale ``sigma_step`` of the Student-t) moves;
posteriors of ``beta`` are what this reduction is for (benchmarks/fit_speed.py measures
how close they stay).

Similar steps are found by a k-d split of each (configuration, run, kind) group: split
on the feature with the widest range at a multiple of k, until every cell holds k steps;
each cell is one window (one cell per group may hold fewer). Ranges are compared in
seconds (``similarity="seconds"``: features times the prior-median coefficients) or in
units of each feature's spread in the group (``"spread"``: every varying feature gets
split, also those that add little time but carry their own coefficient).

Measured (benchmarks/fit_speed.py, 5,000 synthetic steps, k = 10): beta posterior means
moved by a median 0.24-0.26 and at most 3.7 ("seconds") / 2.1 ("spread") full-data
posterior sds, 90% intervals were a median 1.20 / 1.13 times wider, and every full-data
mean stayed inside the windows' 90% interval: close, not identical; the loss is on
coefficients of features that vary inside a window (decode compute, per-request overhead).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bayesblis.model.data import ModelData
from bayesblis.model.hierarchy import EXACT_KINDS
from bayesblis.model.priors import merge_priors

WINDOW_KIND = "window"
"""Kind of the summed observations (an exact kind: its only error is step noise)."""


def sum_similar_steps(data: ModelData, k: int, priors: dict | None = None,
                      similarity: str = "seconds") -> ModelData:
    """A ModelData where the exact-kind observations of every (config, run, kind) group
    are summed k at a time into windows of similar steps; other kinds pass unchanged.

    `similarity`: "seconds" (features times the prior-median coefficients of `priors`,
    default the model's) or "spread" (each feature over its spread in the group).
    """
    if k < 1:
        raise ValueError("k must be >= 1")
    if similarity not in ("seconds", "spread"):
        raise ValueError("similarity must be 'seconds' or 'spread'")
    obs = data.obs
    exact = obs["kind"].astype(str).isin(EXACT_KINDS).to_numpy()
    if k == 1 or not exact.any():
        return data
    f_cols = data.feature_columns(obs, "f_")
    a_cols = data.feature_columns(obs, "a_")
    scale = _feature_scale(f_cols, priors) if similarity == "seconds" else None
    sums = [_sum_group(group, k, f_cols, a_cols, scale)
            for _, group in obs[exact].groupby(["config", "run", "kind"], sort=False)]
    reduced = pd.concat([*sums, obs[~exact][sums[0].columns.intersection(obs.columns)]],
                        ignore_index=True)
    return ModelData(data.configs, reduced)


def _feature_scale(f_cols: list[str], priors: dict | None) -> np.ndarray:
    """Prior-median coefficient of each beta feature column (features -> seconds)."""
    beta = merge_priors(priors)["beta"]
    return np.array([beta[c[2:]]["median"] if c[2:] in beta else 1.0 for c in f_cols])


def _sum_group(group: pd.DataFrame, k: int, f_cols, a_cols, scale) -> pd.DataFrame:
    """Windows of k similar rows of one (config, run, kind) group (`scale` None: each
    feature over its standard deviation in the group)."""
    features = group[f_cols].to_numpy(float)
    if scale is None:
        sd = features.std(axis=0)
        scale = np.where(sd > 0, 1.0 / np.where(sd > 0, sd, 1.0), 0.0)
    order = similarity_order(features * scale, k)
    starts = np.arange(0, len(order), k)
    summed = {}
    for col in [*f_cols, *a_cols, "y_s", "n_steps"]:
        values = group[col].to_numpy(float)[order]
        summed[col] = np.add.reduceat(values, starts)
    out = pd.DataFrame(summed)
    first = group.iloc[0]
    out["config"] = first["config"]
    out["run"] = first["run"]
    out["kind"] = WINDOW_KIND
    return out


def similarity_order(points: np.ndarray, k: int) -> np.ndarray:
    """A permutation of the rows of `points` [n, d] whose consecutive runs of k rows are
    close together: cells of a k-d split at multiples of k along the widest dimension."""
    order = []
    stack = [np.arange(len(points))]
    while stack:
        idx = stack.pop()
        if len(idx) <= k:
            order.append(idx)
            continue
        sub = points[idx]
        spread = np.ptp(sub, axis=0)
        dim = int(np.argmax(spread))
        if spread[dim] == 0:  # identical points: any grouping is exact
            order.append(idx)
            continue
        left = k * int(np.ceil(len(idx) / (2 * k)))
        part = np.argpartition(sub[:, dim], left - 1)
        stack.append(idx[part[left:]])
        stack.append(idx[part[:left]])
    return np.concatenate(order)
