"""Simulator discrepancy: how far measured stage metrics fall from simulated ones beyond what
the posterior predictive already allows, calibrated on out-of-sample errors, and used to
widen the predictive intervals of a new run.

The posterior says how uncertain the coefficients (and a new run's effect) are; it does not
say how well the simulator, driven by the right coefficients, reproduces a run's stage
means (the batch timeline behind the client windows is an approximation, request-level
effects the features lack). So held-out predictions (`bayesblis.validate`: each fold's
held-out runs, predicted by a fit that never saw them) are compared with what was measured,
per normal-load stage::

    d[stage, metric] = log(measured / predicted median)
    sd_obs  = quantile(|d|, 0.9) / 1.645      (the 90% interval's own quantile, about zero:
                                                an offset counts too; stages at a queueing
                                                cliff are left out before, as overloaded)
    sd_post = median over stages of log(hi / lo) / (2 * 1.645)   (the predictive's own spread)
    sd      = sqrt(max(0, sd_obs^2 - sd_post^2))

(for an interval of probability p, the p quantile and its normal z). The 90% quantile rather
than a normal sd from the median |d| (1.4826 median(|d|), used up to session 20): the stage
errors have heavier tails than a normal (the `general` 20 req/s stages), so the MAD-based
intervals covered 70-80% of TTFT and E2E p90 stage means held out by experiment on seed 2;
scaled from the quantile at the interval's level they cover what that level promises
(docs/measurements.md, session 20).

A fold's discrepancy comes from the *other* folds' held-out errors (cross-validation
residuals, as in CV+ intervals): errors of runs a fit has seen understate a new run's
(calibrated on them, 90% intervals covered 85% and 79% of the real stage means in the two
recorded leave-one-experiment-out runs; calibrated across folds, 86% and 81%; both measured
with d about the predictive mean, before the median below, and with the MAD-based sd).
A prediction's draws ``x`` are then widened to ``x * exp(sd * z)``, ``z ~ Normal(0, 1)``,
``WIDEN_SAMPLES`` per draw: intervals come from that mixture; the point prediction (mean,
median of the draws) is left as the model gives it.

The same widening reaches users: `bayesblis validate` also reports the discrepancy pooled over
every held-out stage (`simulator_discrepancy`), the package ships the one measured on the 16
shared H100 runs held out by experiment (``catalog/discrepancy.json``, `load_discrepancy`), and
`simulate` and `plan` apply it by default (`--discrepancy REPORT.json` or `none`): RESULT.json
intervals become prediction intervals (the posterior-only ones are kept beside them), and a
plan's SLO probability per draw becomes ``Phi((log threshold - log value) / sd)`` instead of
0 or 1 (`pass_probability`). Metrics no validation scores (TTFT and E2E p99, TPOT, throughput)
stay posterior-only.

**A configuration never fitted** (a new model on traced hardware: what leave-one-model-out
validation predicts) is the other way round: its posterior predictive is far wider than its
errors (held out by model, 90% intervals about 70% wide covered every stage, with errors
of 4-5%), because the unseen configuration's coefficients are drawn with independent
per-coefficient effects while the step time they add up to varies much less across
configurations. Adding a discrepancy cannot narrow it; so for such a prediction the
posterior's own log spread about its median is scaled instead (`spread_scale`): each held-out
stage's error in units of its own predictive spread on the side it falls (`spread_score`),

    u[stage, metric] = log(median / measured) / log(median / lo)   (measured below the median)
                       log(measured / median) / log(hi / median)   (above),

and the scale is the k-th smallest of the n scores, ``k = ceil((n + 1) * ci_prob)`` (the
largest when k > n): the split-conformal quantile of normalised scores, so the interval of
the draws ``median * (x / median) ** scale``, i.e. ``[median (lo / median)^scale, median
(hi / median)^scale]``, covers at least `ci_prob` of exchangeable new stages (scores
symmetric in log(hi / lo) under-covered the skewed TTFT draws: 70-75% of held-out TTFT
means). Cross-fold as above (a fold's scale from the other folds' held-out models). It
applies only where it was measured: a configuration never fitted, on hardware the fit has
seen (`Discrepancy.for_configuration`); a new run of a fitted configuration, and anything on
unseen hardware, get the additive discrepancy. The stages of one model are not independent
(4 models held out here), which the quantile's guarantee assumes: docs/accuracy.md reports
what it gives held out.

The predicted point is the predictive **median** over draws, the point `bayesblis.validate`
scores (`validate.POINT_PREDICTION`): the discrepancy is then the spread of exactly the
errors reported, and it is multiplicative about the median, as the widening is (the median
of ``x * exp(sd * z)`` is about the median of ``x``). The mean would fold the few draws that
saturate a stage near capacity into the offset ``d``, and widen every run's interval for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

WIDEN_SAMPLES = 50
"""Discrepancy samples per posterior draw (interval quantiles of the mixture)."""


def quantile_sd(log_ratios, ci_prob: float = 0.9) -> float:
    """quantile(|d|, ci_prob) / z: the normal sd whose equal-tailed `ci_prob` interval about
    zero is as wide as the one the errors d = log(measured / predicted) need."""
    from scipy.stats import norm

    d = np.abs(np.asarray(log_ratios, float))
    d = d[np.isfinite(d)]
    if not len(d):
        return 0.0
    return float(np.quantile(d, ci_prob) / norm.ppf((1 + ci_prob) / 2))


def discrepancy_sd(records: list[dict], metrics, ci_prob: float = 0.9) -> dict:
    """{metric: {"sd", "sd_observed", "sd_posterior", "n_stages"}} from validation-style
    records of held-out predictions (normal-load stages only): ``measured_<m>``, ``pred_<m>`` (the
    predictive median) and ``pred_<m>_lo/hi`` (its `ci_prob` interval)."""
    from scipy.stats import norm

    z = norm.ppf((1 + ci_prob) / 2)
    out = {}
    for metric in metrics:
        rows = [r for r in records if not r["overloaded"] and r.get(f"pred_{metric}", 0) > 0
                and r[f"measured_{metric}"] > 0 and r.get(f"pred_{metric}_lo", 0) > 0]
        d = [np.log(r[f"measured_{metric}"] / r[f"pred_{metric}"]) for r in rows]
        spread = [np.log(r[f"pred_{metric}_hi"] / r[f"pred_{metric}_lo"]) / (2 * z) for r in rows]
        sd_obs = quantile_sd(d, ci_prob)
        sd_post = float(np.median(spread)) if spread else 0.0
        out[metric] = {"sd": float(np.sqrt(max(0.0, sd_obs ** 2 - sd_post ** 2))),
                       "sd_observed": sd_obs, "sd_posterior": sd_post, "n_stages": len(rows)}
    return out


def spread_scale(records: list[dict], metrics, ci_prob: float = 0.9) -> dict:
    """{metric: {"scale", "n_stages"}} for predictions of configurations never fitted, from
    validation-style records (see `discrepancy_sd`; posterior-only intervals) of such
    predictions on seen hardware (``seen_config`` False, no 'hardware' in ``unseen_levels``):
    the conformal quantile of `spread_score` (module docstring). Metrics without such a
    stage are left out."""
    out = {}
    for metric in metrics:
        rows = [r for r in records if not r["overloaded"] and not r.get("seen_config", True)
                and "hardware" not in (r.get("unseen_levels") or {})
                and r[f"measured_{metric}"] > 0
                and 0 < r.get(f"pred_{metric}_lo", 0) < r.get(f"pred_{metric}", 0)
                < r.get(f"pred_{metric}_hi", 0)]
        if not rows:
            continue
        scores = np.sort([spread_score(r[f"measured_{metric}"], r[f"pred_{metric}"],
                                       r[f"pred_{metric}_lo"], r[f"pred_{metric}_hi"])
                          for r in rows])
        k = min(len(scores), int(np.ceil((len(scores) + 1) * ci_prob)))
        out[metric] = {"scale": float(scores[k - 1]), "n_stages": len(rows)}
    return out


def spread_score(measured: float, median: float, lo: float, hi: float) -> float:
    """The factor the predictive's log spread about its `median` must be scaled by for its
    interval [lo, hi] to reach `measured`: log(median / measured) / log(median / lo) below the
    median, log(measured / median) / log(hi / median) above (each side its own spread:
    latency draws are skewed)."""
    if measured < median:
        return float(np.log(median / measured) / np.log(median / lo))
    return float(np.log(measured / median) / np.log(hi / median))


def scaled_spread(draws, scale: float) -> np.ndarray:
    """``median * (x / median) ** scale`` of the finite positive draws (the others as they
    are): the predictive's log spread about its median times `scale`."""
    x = np.asarray(draws, float)
    if scale == 1.0:
        return x
    ok = np.isfinite(x) & (x > 0)
    if not ok.any():
        return x
    median = np.median(x[ok])
    out = x.copy()
    out[ok] = median * (x[ok] / median) ** scale
    return out


def widened_interval(draws, sd: float, ci_prob: float, seed: int = 0,
                     scale: float = 1.0) -> tuple[float, float]:
    """Equal-tailed `ci_prob` interval of ``scaled_spread(draws, scale) * exp(sd * z)`` (z
    standard normal)."""
    x = scaled_spread(draws, scale)
    x = x[np.isfinite(x)]
    z = np.random.default_rng(seed).standard_normal((len(x), WIDEN_SAMPLES))
    mixed = (x[:, None] * np.exp(sd * z)).ravel()
    lo, hi = np.quantile(mixed, [(1 - ci_prob) / 2, (1 + ci_prob) / 2])
    return float(lo), float(hi)


CATALOG_FILE = Path(__file__).with_name("catalog") / "discrepancy.json"
"""The packaged discrepancy: `bayesblis validate` on the 16 shared H100 runs, held out by
experiment (rebuild: ``python3 benchmarks/build_discrepancy.py REPORT.json``)."""


@dataclass(frozen=True)
class Discrepancy:
    """How a prediction's intervals allow for the simulator discrepancy, per RESULT.json
    metric: the log-scale sd added to a new run of a fitted configuration (`sd`, measured
    held out by experiment), and the scale of the posterior's own spread for a configuration
    never fitted on seen hardware (`scale`, measured held out by model; empty if unknown).
    `source`, `holdout`: where `sd` was measured; `scale_source`: where `scale` was;
    `applies`: after `for_configuration`, which rule this deployment gets."""

    sd: dict = field(default_factory=dict)
    source: str = ""
    holdout: str = ""
    scale: dict = field(default_factory=dict)
    scale_source: str = ""
    applies: str = ""

    def for_metric(self, metric: str) -> float:
        """The metric's sd; 0 for a metric no validation calibrated (posterior-only)."""
        return float(self.sd.get(metric, 0.0))

    def widening(self, metric: str) -> tuple[float, float]:
        """(sd, scale) of `metric`: (0, 1) leaves its draws as they are. The scale only once
        `for_configuration` has found a configuration never fitted."""
        scale = self.scale.get(metric, 1.0) if self.applies == NEW_CONFIGURATION else 1.0
        return self.for_metric(metric), float(scale)

    def for_configuration(self, seen_config: bool, unseen_levels: dict | None = None) \
            -> "Discrepancy":
        """The rule for one deployment's draws (`coefficients.CoefficientDraws`' fields): a
        configuration never fitted, on hardware the fit has seen, gets the scale of its
        posterior spread (and the sd only for metrics without a scale); any other the sd."""
        if seen_config or "hardware" in (unseen_levels or {}) or not self.scale:
            return replace(self, scale={}, applies=NEW_RUN)
        return replace(self, sd={m: v for m, v in self.sd.items() if m not in self.scale},
                       applies=NEW_CONFIGURATION)

    def to_dict(self) -> dict:
        out = {"source": self.source, "holdout": self.holdout,
               "sd": {m: round(v, 6) for m, v in self.sd.items()}}
        if self.scale:
            out["scale"] = {m: round(v, 6) for m, v in self.scale.items()}
            out["scale_source"] = self.scale_source
        if self.applies:
            out["applies"] = self.applies
        return out


NEW_RUN = "new run of a fitted configuration: posterior draws x exp(sd z)"
NEW_CONFIGURATION = ("configuration never fitted, on fitted hardware: the posterior's log "
                     "spread about its median x scale")


def metric_widening(discrepancy: Discrepancy | None, metric: str) -> tuple[float, float]:
    """(sd, scale) that `discrepancy` gives `metric`; (0, 1) without a discrepancy."""
    return discrepancy.widening(metric) if discrepancy is not None else (0.0, 1.0)


def load_discrepancy(path=None) -> Discrepancy:
    """The discrepancy in `path`: a `bayesblis validate` REPORT.json (its pooled
    `simulator_discrepancy`) or a file like ``catalog/discrepancy.json``; None: the packaged one.
    A missing or malformed entry is an InputError naming the file and field."""
    from bayesblis.errors import InputError
    from bayesblis.io.text import load_json_checked

    path = Path(path) if path is not None else CATALOG_FILE
    expected = "a `bayesblis validate` REPORT.json or a discrepancy JSON with 'metrics'"
    doc = load_json_checked(path, expected=expected)
    if isinstance(doc, dict) and "simulator_discrepancy" in doc:
        doc = doc["simulator_discrepancy"]
    if not isinstance(doc, dict) or not isinstance(doc.get("metrics"), dict) or not doc["metrics"]:
        raise InputError(path, "no per-metric discrepancy", field="metrics", expected=expected)
    sd, scale = {}, {}
    for metric, entry in doc["metrics"].items():
        value = entry.get("sd") if isinstance(entry, dict) else None
        if not _is_number(value) or value < 0:
            raise InputError(path, f"sd is {value!r}", field=f"metrics.{metric}.sd",
                             expected="a finite number >= 0 (log-scale sd)")
        sd[metric] = float(value)
        if "scale" in entry:
            if not _is_number(entry["scale"]) or entry["scale"] <= 0:
                raise InputError(path, f"scale is {entry['scale']!r}",
                                 field=f"metrics.{metric}.scale",
                                 expected="a finite number > 0 (posterior spread multiplier)")
            scale[metric] = float(entry["scale"])
    return Discrepancy(sd=sd, source=str(doc.get("source") or path),
                       holdout=str(doc.get("holdout", "")), scale=scale,
                       scale_source=str(doc.get("scale_source") or (path if scale else "")))


def _is_number(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and np.isfinite(value)


def pass_probability(values, threshold: float, sd: float, inclusive: bool = False,
                     scale: float = 1.0) -> np.ndarray:
    """Per draw, P(value x exp(sd z) < threshold), z standard normal: Phi((log threshold -
    log value) / sd); with sd = 0 the indicator (<= when `inclusive`). A missing or
    non-positive value (no completed request) fails. `scale`: the values' log spread about
    their median is first scaled (`scaled_spread`)."""
    from scipy.stats import norm

    v = scaled_spread(values, scale)
    out = np.zeros(v.shape)
    if sd <= 0:
        ok = np.isfinite(v)
        out[ok] = (v[ok] <= threshold) if inclusive else (v[ok] < threshold)
        return out
    ok = np.isfinite(v) & (v > 0)
    out[ok] = norm.cdf((np.log(threshold) - np.log(v[ok])) / sd)
    return out
