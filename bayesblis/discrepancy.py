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
    sd_obs  = quantile(abs(d), 0.9) / 1.645      (the 90% interval's own quantile, about zero:
                                                an offset counts too; stages at a queueing
                                                cliff are left out before, as overloaded)
    sd_post = median over stages of log(hi / lo) / (2 * 1.645)   (the predictive's own spread)
    sd      = sqrt(max(0, sd_obs^2 - sd_post^2))

(for an interval of probability p, the p quantile and its normal z). The 90% quantile rather
than a normal sd from the median abs(d) (1.4826 median(abs(d)), used before model version 5): the stage
errors have heavier tails than a normal (the `general` 20 req/s stages), so the MAD-based
intervals covered 70-80% of TTFT and E2E p90 stage means held out by experiment on seed 2;
scaled from the quantile at the interval's level they cover what that level promises
(docs/history.md, model version 5).

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

**Beyond the load a configuration was fitted at** (a rate whose requests in flight exceed
what its traced windows held) the step features are extrapolated, and held out by
experiment the errors grew with the distance: the `general` 20 req/s stages, 1.9-2.9x the
largest batch of their configuration's other runs, missed by 1-20% where every other stage
was within 5%. So a new run of a fitted configuration also gets an extrapolation term::

    x        = max(0, log(in flight / fitted load))     (`load_excess`; in flight: rate x
                                                         predicted median E2E, Little's law;
                                                         fitted load: `fitted_load`)
    slope    = the k-th smallest abs(d) / x over held-out stages with x > 0   (as `spread_scale`)
    sd(x)    = sqrt(sd^2 + (slope x / z)^2)      (sd: from the stages with x = 0 only)

so the extrapolation alone makes the `ci_prob` interval ``exp(+-slope x)`` wide. Measured
on only four extrapolated stages in the shared runs: docs/accuracy.md states what it gives.

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

from bayesblis.constants import CI_PROB, US

WIDEN_SAMPLES = 50
"""Discrepancy samples per posterior draw (interval quantiles of the mixture)."""


def quantile_sd(log_ratios, ci_prob: float = 0.9) -> float:
    """quantile(abs(d), ci_prob) / z: the normal sd whose equal-tailed `ci_prob` interval about
    zero is as wide as the one the errors d = log(measured / predicted) need."""
    from scipy.stats import norm

    d = np.abs(np.asarray(log_ratios, float))
    d = d[np.isfinite(d)]
    if not len(d):
        return 0.0
    return float(np.quantile(d, ci_prob) / norm.ppf((1 + ci_prob) / 2))


def discrepancy_sd(records: list[dict], metrics, ci_prob: float = 0.9) -> dict:
    """{metric: {"sd", "sd_observed", "sd_posterior", "n_stages"}} from validation-style
    records of held-out predictions (normal-load stages within their fitted load, the others
    set `extrapolation_slope`): ``measured_<m>``, ``pred_<m>`` (the predictive median) and
    ``pred_<m>_lo/hi`` (its `ci_prob` interval)."""
    from scipy.stats import norm

    z = norm.ppf((1 + ci_prob) / 2)
    out = {}
    for metric in metrics:
        rows = [r for r in records if not r["overloaded"] and r.get("load_excess", 0) <= 0
                and r.get(f"pred_{metric}", 0) > 0
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
        rows = [r for r in records if _scorable(r, metric)]
        if not rows:
            continue
        scores = np.sort([_score(r, metric) for r in rows])
        k = min(len(scores), int(np.ceil((len(scores) + 1) * ci_prob)))
        out[metric] = {"scale": float(scores[k - 1]), "n_stages": len(rows)}
    return out


def never_fitted_records(report: dict, source="report") -> list[dict]:
    """Records of predictions of configurations never fitted on seen hardware, with the
    posterior-only interval as ``pred_<metric>_lo/hi`` (what `spread_scale` scores), from a
    `bayesblis validate` REPORT.json (its ``model_pred_*`` when a discrepancy widened the
    others) or a `validate --external` report made without a discrepancy (whose records take
    their ``unseen_levels`` from the report's ``runs``: a GPU never traced is left out); each
    record's ``group`` is its held-out model (the unit `spread_scale_coverage` leaves out).
    An external report with a discrepancy is an InputError: its intervals are scaled."""
    from bayesblis.errors import InputError

    external = report.get("report") == "external_check"
    if external and report.get("discrepancy"):
        raise InputError(source, "the intervals were made with a discrepancy", field="discrepancy",
                         expected="a `validate --external` report with posterior-only intervals "
                                  "(benchmarks/new_models.py --discrepancy none)")
    run_levels = {run.get("run"): run.get("unseen_levels") or {} for run in report.get("runs", [])}
    out = []
    for r in report.get("records", []):
        levels = r.get("unseen_levels") or run_levels.get(r.get("run"), {})
        if r.get("seen_config", True) or "hardware" in levels:
            continue
        rec = dict(r, overloaded=bool(r.get("overloaded", False)), unseen_levels=levels,
                   group=str(r.get("model") if external else r.get("fold")))
        for key in [k for k in r if k.startswith("model_pred_")]:
            rec[key[len("model_"):]] = r[key]
        out.append(rec)
    return out


def spread_scale_coverage(records: list[dict], metrics, ci_prob: float = 0.9) -> dict:
    """{metric: {"coverage", "n_stages"}} when each record's `group` (its held-out model)
    gets the `spread_scale` of the other groups' records: the cross-validated coverage of
    the scale itself."""
    out = {}
    for metric in metrics:
        rows = [r for r in records if _scorable(r, metric)]
        hits = []
        for group in sorted({r["group"] for r in rows}):
            scale = spread_scale([r for r in rows if r["group"] != group], [metric], ci_prob)
            if metric in scale:
                hits += [_score(r, metric) <= scale[metric]["scale"]
                         for r in rows if r["group"] == group]
        if hits:
            out[metric] = {"coverage": float(np.mean(hits)), "n_stages": len(hits)}
    return out


def _scorable(r: dict, metric: str) -> bool:
    """A normal-load stage of a configuration never fitted, on seen hardware, with a
    positive measurement and a posterior interval around its median."""
    return (not r["overloaded"] and not r.get("seen_config", True)
            and "hardware" not in (r.get("unseen_levels") or {})
            and r.get(f"measured_{metric}", 0) > 0
            and 0 < r.get(f"pred_{metric}_lo", 0) < r.get(f"pred_{metric}", 0)
            < r.get(f"pred_{metric}_hi", 0))


def _score(r: dict, metric: str) -> float:
    return spread_score(r[f"measured_{metric}"], r[f"pred_{metric}"], r[f"pred_{metric}_lo"],
                        r[f"pred_{metric}_hi"])


def spread_score(measured: float, median: float, lo: float, hi: float) -> float:
    """The factor the predictive's log spread about its `median` must be scaled by for its
    interval [lo, hi] to reach `measured`: log(median / measured) / log(median / lo) below the
    median, log(measured / median) / log(hi / median) above (each side its own spread:
    latency draws are skewed)."""
    if measured < median:
        return float(np.log(median / measured) / np.log(median / lo))
    return float(np.log(measured / median) / np.log(hi / median))


LOAD_QUANTILE = 0.95
"""`fitted_load` is this quantile of a configuration's per-window mean batch: the load its
busiest traced windows held, robust to a few outliers."""


def window_batch(obs) -> np.ndarray:
    """Mean requests per engine step of each observation row of an observation table
    (`f_request_overhead_s` is 1 us per request per step; NaN for rows without steps and
    for operator profiles, which are no engine steps)."""
    steps = obs["n_steps"].to_numpy(float)
    ok = (steps > 0) & (obs["kind"].astype(str) != "operator_profile").to_numpy()
    batch = np.full(len(obs), np.nan)
    if "f_request_overhead_s" in obs:
        batch[ok] = obs["f_request_overhead_s"].to_numpy(float)[ok] / (steps[ok] * US)
    return batch


def fitted_load(obs, config: str) -> float | None:
    """Requests in flight a fit saw for `config`: the LOAD_QUANTILE quantile of its windows'
    mean batch (`window_batch`); None when the table has no window of it."""
    if obs is None or not len(obs):
        return None
    batch = window_batch(obs)[(obs["config"].astype(str) == config).to_numpy()]
    batch = batch[np.isfinite(batch) & (batch > 0)]
    return float(np.quantile(batch, LOAD_QUANTILE)) if len(batch) else None


def in_flight(rate_rps, e2e_s) -> float | None:
    """Requests in flight at a stage, by Little's law: arrival rate x mean E2E."""
    if rate_rps is None or e2e_s is None or not (rate_rps > 0 and e2e_s > 0):
        return None
    return float(rate_rps * e2e_s)


def load_excess(stage_load: float | None, fitted: float | None) -> float:
    """log(stage load / fitted load) where the stage exceeds it, else 0 (also when either
    is unknown)."""
    if not stage_load or not fitted:
        return 0.0
    return float(max(0.0, np.log(stage_load / fitted)))


def extrapolation_slope(records: list[dict], metrics, ci_prob: float = 0.9) -> dict:
    """{metric: {"slope", "n_stages"}} from validation-style records of held-out predictions
    of fitted configurations (``seen_config``) with a ``load_excess`` x > 0: the conformal
    quantile (as `spread_scale`) of abs(log(measured / median)) / x."""
    out = {}
    for metric in metrics:
        rows = [r for r in records if not r["overloaded"] and r.get("seen_config", True)
                and r.get("load_excess", 0) > 0 and r.get(f"pred_{metric}", 0) > 0
                and r[f"measured_{metric}"] > 0]
        if not rows:
            continue
        scores = np.sort([abs(np.log(r[f"measured_{metric}"] / r[f"pred_{metric}"]))
                          / r["load_excess"] for r in rows])
        k = min(len(scores), int(np.ceil((len(scores) + 1) * ci_prob)))
        out[metric] = {"slope": float(scores[k - 1]), "n_stages": len(rows)}
    return out


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
    `slope`: the extrapolation slope per metric (held out by experiment, beyond the fitted
    load); `applies`, `fitted_load`: after `for_configuration`, which rule this deployment
    gets and the requests in flight its configuration was fitted at (None: unknown)."""

    sd: dict = field(default_factory=dict)
    source: str = ""
    holdout: str = ""
    scale: dict = field(default_factory=dict)
    scale_source: str = ""
    applies: str = ""
    slope: dict = field(default_factory=dict)
    fitted_load: float | None = None

    @classmethod
    def from_entries(cls, metrics: dict, **fields) -> "Discrepancy":
        """From per-metric entries as `validate` writes them ({metric: {"sd", and optional
        "scale", "extrapolation_slope"}}; checked ones: `load_discrepancy`); `fields`: the
        other attributes (source, holdout, ...)."""
        return cls(sd={m: float(e["sd"]) for m, e in metrics.items()},
                   scale={m: float(e["scale"]) for m, e in metrics.items() if "scale" in e},
                   slope={m: float(e["extrapolation_slope"]) for m, e in metrics.items()
                          if "extrapolation_slope" in e}, **fields)

    def for_metric(self, metric: str) -> float:
        """The metric's sd; 0 for a metric no validation calibrated (posterior-only)."""
        return float(self.sd.get(metric, 0.0))

    def widening(self, metric: str, stage_load: float | None = None) -> tuple[float, float]:
        """(sd, scale) of `metric`: (0, 1) leaves its draws as they are. The scale only once
        `for_configuration` has found a configuration never fitted; the extrapolation term
        (module docstring) once it has a fitted configuration's `fitted_load` and the
        caller the stage's requests in flight (`stage_load`)."""
        scale = self.scale.get(metric, 1.0) if self.applies in SCALED_RULES else 1.0
        sd = self.for_metric(metric)
        excess = load_excess(stage_load, self.fitted_load)
        if excess > 0 and metric in self.slope:
            from scipy.stats import norm

            extra = self.slope[metric] * excess / norm.ppf((1 + CI_PROB) / 2)
            sd = float(np.hypot(sd, extra))
        return sd, float(scale)

    def for_configuration(self, seen_config: bool, unseen_levels: dict | None = None,
                          fitted_load: float | None = None) -> "Discrepancy":
        """The rule for one deployment's draws (`coefficients.CoefficientDraws`' fields): a
        configuration never fitted, on hardware the fit has seen, gets the scale of its
        posterior spread (and the sd only for metrics without a scale); on a GPU never
        traced, that scale plus the GPU's own log-scale sd on every metric
        (`catalog.kernel_spread.gpu_metric_sd`: how far serving strays from its kernels,
        and on a GPU kernel-db lacks how far its kernels stray from other GPUs'); a new run
        of a fitted configuration the sd, growing beyond its `fitted_load` (`widening`)."""
        from bayesblis.catalog.kernel_spread import gpu_metric_sd, kernel_measured

        own = {m: v for m, v in self.sd.items() if m not in self.scale}  # metrics left unscaled
        gpu = (unseen_levels or {}).get("hardware")
        if gpu is not None:
            rule = NEW_GPU if kernel_measured(str(gpu)) else UNMEASURED_GPU
            gpu_sd = gpu_metric_sd(str(gpu))
            sd = {m: float(np.hypot(own.get(m, 0.0), gpu_sd)) for m in {*self.sd, *self.scale}}
            return replace(self, sd=sd, applies=rule, fitted_load=None)
        if seen_config or not self.scale:
            return replace(self, scale={}, applies=NEW_RUN,
                           fitted_load=fitted_load if seen_config else None)
        return replace(self, sd=own, applies=NEW_CONFIGURATION, fitted_load=None)

    def to_dict(self) -> dict:
        out = {"source": self.source, "holdout": self.holdout,
               "sd": {m: round(v, 6) for m, v in self.sd.items()}}
        if self.scale:
            out["scale"] = {m: round(v, 6) for m, v in self.scale.items()}
            out["scale_source"] = self.scale_source
        if self.slope:
            out["extrapolation_slope"] = {m: round(v, 6) for m, v in self.slope.items()}
        if self.fitted_load:
            out["fitted_load"] = round(self.fitted_load, 3)
        if self.applies:
            out["applies"] = self.applies
        return out


NEW_RUN = "new run of a fitted configuration: posterior draws x exp(sd z)"
NEW_CONFIGURATION = ("configuration never fitted, on fitted hardware: the posterior's log "
                     "spread about its median x scale")
NEW_GPU = ("configuration on a GPU never traced that kernel-db measured: the posterior's log "
           "spread about its median x scale, and the GPU's own log-scale sd")
UNMEASURED_GPU = ("configuration on a GPU neither traced nor in kernel-db: the posterior's log "
                  "spread about its median x scale, and the GPU's own log-scale sd with "
                  "kernel-db's spread across GPUs")
SCALED_RULES = (NEW_CONFIGURATION, NEW_GPU, UNMEASURED_GPU)
"""Rules under which a metric's posterior spread is scaled (`Discrepancy.widening`)."""


def metric_widening(discrepancy: Discrepancy | None, metric: str,
                    stage_load: float | None = None) -> tuple[float, float]:
    """(sd, scale) that `discrepancy` gives `metric` at `stage_load` requests in flight;
    (0, 1) without a discrepancy."""
    return (discrepancy.widening(metric, stage_load) if discrepancy is not None
            else (0.0, 1.0))


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
    for metric, entry in doc["metrics"].items():
        value = entry.get("sd") if isinstance(entry, dict) else None
        if not _is_number(value) or value < 0:
            raise InputError(path, f"sd is {value!r}", field=f"metrics.{metric}.sd",
                             expected="a finite number >= 0 (log-scale sd)")
        for key, positive, expected in _OPTIONAL_ENTRIES:
            if key in entry and (not _is_number(entry[key])
                                 or (entry[key] <= 0 if positive else entry[key] < 0)):
                raise InputError(path, f"{key} is {entry[key]!r}", field=f"metrics.{metric}.{key}",
                                 expected=expected)
    found = Discrepancy.from_entries(doc["metrics"], source=str(doc.get("source") or path),
                                     holdout=str(doc.get("holdout", "")))
    return replace(found, scale_source=str(doc.get("scale_source")
                                           or (path if found.scale else "")))


_OPTIONAL_ENTRIES = (
    ("scale", True, "a finite number > 0 (posterior spread multiplier)"),
    ("extrapolation_slope", False, "a finite number >= 0 (log error per log load excess)"),
)
"""Optional per-metric entries of a discrepancy file: (key, must be > 0 rather than >= 0,
what the error says is expected)."""


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
