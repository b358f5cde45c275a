"""Physical limits of efficiency coefficients, and where a fit presses against them.

A coefficient that multiplies FLOPs / peak FLOP/s or bytes / peak bandwidth is 1 / achieved
efficiency: below 1 it claims a GPU (or link) faster than its datasheet. A fitted value far
below 1 is the model telling that the feature's cost is hidden (overlapped with another
term of a linear sum, e.g. decode compute under weight streaming) or not identified by the
data (prefill cost absorbed by a per-request constant when prompts barely vary). Every fit
reports such coefficients (`physical_bound_report`, kept in ``fit_info``) so that nobody
reads "prefill at 0.01" as an efficiency.

Where the prior sets a floor (model/priors.py: the compute coefficients, whose features are
the FLOP time beyond the memory roofline, and TP all-reduce), the posterior cannot go below it; the report
then says where a coefficient sits *at* its floor (``PRESS_MARGIN``): the data would take
it faster than the datasheet if they could.

The other side: a coefficient far *above* 1 claims a GPU that reaches only a small share of
its datasheet (``PLAUSIBLE_MAX``: below 20% of peak bandwidth, 10% of peak FLOP/s or link
speed). No operator profile comes near that (H100/A100/A40 weight streaming 1.0-1.7x the
bytes-over-peak time, linear-layer compute about 2x, NCCL all-reduce 1.2-1.8x), and the
default priors put little mass there (KV traffic 6%, the others 2% or less); a fit or
calibration that lands there is absorbing a cost the features miss (a calibration on 1,000
requests of one workload moves Mixtral's KV coefficient to 7.6x). Such coefficients are
reported too (``side`` "above").
"""

from __future__ import annotations

import numpy as np

EFFICIENCY_LIMITS = {
    "prefill_compute_s": 1.0, "decode_compute_s": 1.0, "weight_traffic_s": 1.0,
    "kv_traffic_s": 1.0, "tp_comm_s": 1.0, "ep_comm_s": 1.0, "offload_s": 1.0,
}
"""Beta features in seconds at datasheet peak: their coefficients cannot physically be
below these values (efficiency <= 100%). Overheads (µs per count) have no such limit."""

PLAUSIBLE_MAX = {
    "prefill_compute_s": 10.0, "decode_compute_s": 10.0, "weight_traffic_s": 5.0,
    "kv_traffic_s": 5.0, "tp_comm_s": 10.0, "ep_comm_s": 10.0, "offload_s": 5.0,
}
"""Above these a coefficient claims under 20% of the datasheet bandwidth (traffic) or 10% of
the peak FLOP/s or link speed: implausible for vLLM's kernels (module docstring)."""

PRESS_PROB = 0.9
"""A coefficient presses against its limit when its posterior puts at least this much
mass below the limit (or, for a floored coefficient, below ``PRESS_MARGIN`` x its floor)."""

PRESS_MARGIN = 1.1
"""A floored coefficient presses against its floor below this multiple of it."""


def physical_bound_report(posterior, obs=None, *, prob: float = PRESS_PROB,
                          floors: dict | None = None) -> list[dict]:
    """One row per (configuration, efficiency coefficient) whose posterior puts >= `prob`
    below its physical limit (``side`` "below"): median, P(below), and the implied efficiency
    (limit / median); ``at_floor`` is True for a coefficient of `floors` ({feature: floor >
    0}, the fit's priors), judged below ``PRESS_MARGIN`` x floor since it cannot go below the
    floor. Also one row (``side`` "above", ``prob_above``) per coefficient with >= `prob`
    above ``PLAUSIBLE_MAX``.

    `obs` (the fitted observation table, `f_<feature>` columns): only coefficients whose
    feature is non-zero in some observation of the configuration are reported; the others
    (TP all-reduce at TP 1, offload without offloading) are the prior, not a fit."""
    if "beta" not in posterior:
        return []
    beta = posterior["beta"]
    used = None
    if obs is not None:
        cols = [c for c in obs.columns if c.startswith("f_")]
        used = (obs[cols].abs() > 0).groupby(obs["config"].astype(str)).any()
    rows = []
    floors = {f: v for f, v in (floors or {}).items() if v > 0}
    for feature, limit in EFFICIENCY_LIMITS.items():
        if feature not in beta.coords["feature"].values:
            continue
        at_floor = feature in floors
        threshold = floors[feature] * PRESS_MARGIN if at_floor else limit
        draws = beta.sel(feature=feature)
        below = (draws < threshold).mean(("chain", "draw")).values
        median = draws.median(("chain", "draw")).values
        high = PLAUSIBLE_MAX[feature]
        above = (draws > high).mean(("chain", "draw")).values
        for config, p, p_high, med in zip(beta.coords["config"].values, below, above, median):
            if used is not None and not (str(config) in used.index
                                         and used.at[str(config), f"f_{feature}"]):
                continue
            efficiency = float(limit / med) if med > 0 else np.inf
            if p >= prob:
                rows.append({"config": str(config), "feature": feature, "limit": limit,
                             "side": "below", "at_floor": at_floor, "threshold": float(threshold),
                             "median": float(med), "prob_below": float(p),
                             "implied_efficiency": efficiency})
            if p_high >= prob:
                rows.append({"config": str(config), "feature": feature, "limit": limit,
                             "side": "above", "at_floor": False, "threshold": high,
                             "median": float(med), "prob_above": float(p_high),
                             "implied_efficiency": efficiency})
    return rows


def format_bound_report(rows: list[dict]) -> str:
    """Readable lines for the terminal (one line saying so when no coefficient presses)."""
    low = [r for r in rows if r.get("side", "below") == "below"]
    high = [r for r in rows if r.get("side") == "above"]
    if not low:
        lines = ["physical limits: no efficiency coefficient is below its datasheet limit "
                 f"with probability >= {PRESS_PROB}"]
    else:
        lines = [f"physical limits: {len(low)} coefficient(s) at or below the datasheet limit "
                 f"with probability >= {PRESS_PROB} (below: faster than peak, a cost hidden by "
                 "overlap or not identified by these data; at its floor: the data push it "
                 "there; see bayesblis/model/bounds.py):"]
    for r in sorted(low, key=lambda r: r["median"]):
        where = (f"at its floor {r['limit']:g}" if r.get("at_floor")
                 else f"{_times(r['implied_efficiency'])} peak")
        lines.append(f"  {r['feature']:<18} median {r['median']:<8.3g} "
                     f"({where}, P(< {r.get('threshold', r['limit']):.3g}) "
                     f"{r['prob_below']:.2f})  {r['config']}")
    if high:
        lines.append(f"implausibly slow: {len(high)} coefficient(s) above the plausible maximum "
                     f"with probability >= {PRESS_PROB} (a share of the datasheet no kernel "
                     "profile shows: the coefficient absorbs a cost the features miss; read "
                     "its predictions with care):")
    for r in sorted(high, key=lambda r: -r["median"]):
        lines.append(f"  {r['feature']:<18} median {r['median']:<8.3g} "
                     f"({r['implied_efficiency']:.0%} of peak, P(> {r['threshold']:g}) "
                     f"{r['prob_above']:.2f})  {r['config']}")
    return "\n".join(lines)


def _times(ratio: float) -> str:
    return f"{ratio:.0f}x" if ratio >= 10 else f"{ratio:.1f}x"
