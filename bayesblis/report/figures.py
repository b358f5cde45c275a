"""Matplotlib figures (Agg backend) of the checks and the report.

Every function returns a `matplotlib.figure.Figure` built without pyplot's global state,
so figures can be made in worker threads and tests; `png_bytes` / `png_base64` encode
one and close nothing global.
"""

from __future__ import annotations

import base64
import io
import warnings

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from bayesblis.constants import CI_PROB, DIM_ALPHA_FEATURE, DIM_CONFIG, DIM_FEATURE  # noqa: E402

DPI = 100


def png_bytes(fig: Figure, dpi: int = DPI) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return buf.getvalue()


def png_base64(fig: Figure, dpi: int = DPI) -> str:
    return base64.b64encode(png_bytes(fig, dpi)).decode("ascii")


def save_png(fig: Figure, path, dpi: int = DPI) -> None:
    from bayesblis.atomic import atomic_path

    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(png_bytes(fig, dpi))


def _short(config: str, width: int = 34) -> str:
    return config if len(config) <= width else config[: width - 1] + "…"


# ---------------------------------------------------------------------- PPC
def _ecdf(values):
    v = np.sort(np.asarray(values, float))
    return v, np.arange(1, len(v) + 1) / len(v)


def fig_ppc_config(draws, config: str, n_lines: int = 40, seed: int = 0) -> Figure:
    """One configuration: per observation kind, the ECDF of the observed durations against
    `n_lines` replicated data sets (left) and the PIT ECDF minus the uniform CDF with its
    pointwise 95% band (ArviZ `plot_ecdf`, right; the simultaneous band costs
    seconds of numba compilation per process)."""
    import arviz as az
    from scipy.stats import uniform

    from bayesblis.ppc import pit_values

    obs = draws.data.obs
    in_cfg = obs["config"].astype(str).to_numpy() == config
    kinds = sorted(set(obs.loc[in_cfg, "kind"].astype(str)))
    fig = Figure(figsize=(9.5, 2.3 * max(1, len(kinds)) + 0.4))
    axes = fig.subplots(max(1, len(kinds)), 2, squeeze=False)
    rng = np.random.default_rng(seed)
    y_all, rep_all = draws.y, draws.y_rep
    for row, kind in enumerate(kinds):
        idx = np.flatnonzero(in_cfg & (obs["kind"].astype(str).to_numpy() == kind))
        y, rep = y_all[idx], rep_all[:, idx]
        ax = axes[row, 0]
        pick = rng.choice(rep.shape[0], min(n_lines, rep.shape[0]), replace=False)
        for j, s in enumerate(pick):
            xs, ps = _ecdf(rep[s])
            ax.step(xs, ps, where="post", color="C0", alpha=0.15, lw=0.8,
                    label="replicated" if j == 0 else None)
        xs, ps = _ecdf(y)
        ax.step(xs, ps, where="post", color="k", lw=1.6, label="observed")
        lo = min(np.quantile(y, 0.005), np.quantile(rep, 0.01))
        hi = max(np.quantile(y, 0.995), np.quantile(rep, 0.99))
        if lo > 0 and hi / lo > 20:
            ax.set_xscale("log")
        elif lo <= 0:
            lo = min(0.0, lo)
        pad = 0.0 if ax.get_xscale() == "log" else 0.03 * (hi - lo)
        ax.set_xlim(lo - pad, hi + pad)
        ax.set_ylabel("ECDF")
        ax.set_title(f"{kind} (n={len(idx)})", fontsize=9)
        if row == len(kinds) - 1:
            ax.set_xlabel("duration y_s [s]")
        if row == 0:
            ax.legend(fontsize=7, loc="lower right")
        pit = pit_values(y, rep)
        ax2 = axes[row, 1]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            az.plot_ecdf(pit, cdf=uniform(0, 1).cdf, difference=True,
                         confidence_bands="pointwise", ci_prob=0.95, ax=ax2)
        ax2.set_title(f"PIT ECDF - uniform, {kind}", fontsize=9)
        if row == len(kinds) - 1:
            ax2.set_xlabel("PIT")
    fig.suptitle(_short(config, 70), fontsize=10)
    fig.tight_layout()
    return fig


def fig_coverage(doc: dict) -> Figure:
    """Coverage of the 50% and 90% predictive intervals per configuration x kind, with the
    flagging range of the 90% coverage shaded."""
    from bayesblis.ppc import COVERAGE90_RANGE

    rows = doc["rows"]
    labels = [(_short(r["config"], 28) + " · " + r["kind"]) for r in rows]
    fig = Figure(figsize=(9.5, 0.28 * len(rows) + 1.2))
    ax = fig.subplots()
    yy = np.arange(len(rows))[::-1]
    ax.axvspan(*COVERAGE90_RANGE, color="C2", alpha=0.12, label="accepted 90% coverage")
    ax.axvline(0.9, color="C2", lw=0.8)
    ax.axvline(0.5, color="C1", lw=0.8)
    ax.scatter([r["coverage_90"] for r in rows], yy, color=["C3" if r["flagged"] else "C2"
                                                            for r in rows],
               marker="o", label="90% interval", zorder=3)
    ax.scatter([r["coverage_50"] for r in rows], yy, color="C1", marker="s", s=14,
               label="50% interval", zorder=3)
    ax.set_yticks(yy)
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_xlim(0, 1.02)
    ax.set_xlabel("fraction of observations inside the predictive interval (red: flagged row)")
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    return fig


def fig_pareto_k(draws) -> Figure:
    """Pareto k of every observation (PSIS-LOO), coloured by configuration."""
    from bayesblis.ppc import PARETO_K_BAD

    k = draws.pareto_k
    fig = Figure(figsize=(9.5, 2.8))
    ax = fig.subplots()
    configs = draws.data.obs["config"].astype(str).to_numpy()
    for i, cfg in enumerate(dict.fromkeys(configs)):
        idx = np.flatnonzero(configs == cfg)
        ax.scatter(idx, k[idx], s=5, color=f"C{i % 10}", label=_short(cfg, 40))
    ax.axhline(PARETO_K_BAD, color="C3", ls="--", lw=1)
    ax.set_xlabel("observation")
    ax.set_ylabel("Pareto k")
    ax.set_title("PSIS-LOO Pareto k (dashed: 0.7)", fontsize=9)
    ax.legend(fontsize=6, loc="upper right", ncol=2)
    fig.tight_layout()
    return fig


def fig_load_response(entries: list[dict], max_cols: int = 3) -> Figure:
    """`ppc.load_response`, one panel per configuration: observed / replicated median time
    per step against the requests in flight (bar: the replicated 90% interval, red: a bin
    `outside` it); dotted: the configuration's fitted load."""
    n = max(len(entries), 1)
    cols = min(n, max_cols)
    rows = int(np.ceil(n / cols))
    fig = Figure(figsize=(3.4 * cols, 2.5 * rows + 0.3))
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    for ax, e in zip(axes, entries):
        b = e["bins"]
        x = np.array([v["in_flight"] for v in b])
        obs = np.array([v["observed_step_s"] for v in b])
        ratio = np.array([v["ratio"] for v in b])
        lo = obs / np.array([v["replicated_hi_s"] for v in b])
        hi = obs / np.array([v["replicated_lo_s"] for v in b])
        out = np.array([v["outside"] for v in b], bool)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.errorbar(x, ratio, yerr=[ratio - lo, hi - ratio], fmt="none", ecolor="0.6", capsize=2)
        ax.scatter(x[~out], ratio[~out], color="C0", s=16, zorder=3)
        ax.scatter(x[out], ratio[out], color="C3", s=16, zorder=3)
        if e["fitted_load"]:
            ax.axvline(e["fitted_load"], color="C1", ls=":", lw=1.2)
        if len(b):  # at least +-3% shown, so that a fraction of a percent does not look steep
            ax.set_ylim(min(0.97, float(lo.min()) - 0.005), max(1.03, float(hi.max()) + 0.005))
        ax.set_title(_short(e["config"], 40), fontsize=8)
        ax.set_xlabel("requests in flight (window mean)", fontsize=7)
        ax.set_ylabel("observed / replicated step", fontsize=7)
        ax.tick_params(labelsize=7)
    for ax in axes[len(entries):]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------- shrinkage
def _flat(da):
    return da.stack(sample=("chain", "draw")).transpose("sample", ...)


def _level_effects(post, name: str, dim: str):
    """(level column, columns of `dim`, {level value: [S, k] effect draws}) of every fitted
    pooling level above the configuration."""
    from bayesblis.coefficients import level_effects

    for short, column, cols, _, effects in level_effects(post, name, dim):
        if effects:
            yield column, cols, effects


def coefficient_floors(posterior, name: str, dim: str) -> np.ndarray:
    """Floors [feature] of one coefficient group (``coef = floor + exp(theta)``,
    model/priors.py); zeros when the file records no priors."""
    from bayesblis.model.priors import floors

    features = [str(f) for f in posterior.idata.posterior[dim].values]
    section = (getattr(posterior, "priors", None) or {}).get(name) or {}
    return floors(section, features)


def _tied(name: str, coef: np.ndarray, features) -> np.ndarray:
    """Beta draws with tied coefficients equal to their source (`TIED_BETA`), as every
    configuration's and `coefficients._population_draws` are."""
    from bayesblis.model.priors import tie_columns

    return tie_columns(coef, [str(f) for f in features]) if name == "beta" else coef


def pooled_draws(post, name: str, dim: str, configs, floor=0.0) -> np.ndarray:
    """[S, config, feature]: floor + exp(mu + the configuration's level effects), i.e. what
    the hierarchy predicts for the configuration without its own configuration effect."""
    mu = _flat(post[f"{name}_mu"]).values  # [S, K]
    theta = np.repeat(mu[:, None, :], len(configs), axis=1)
    for column, cols, effects in _level_effects(post, name, dim):
        for c, value in enumerate(configs[column].astype(str)):
            if value in effects:
                theta[:, c, cols] += effects[value]
    return _tied(name, floor + np.exp(theta), post[dim].values)


def level_draws(post, name: str, dim: str, floor=0.0) -> dict:
    """{(level column, value): [S, feature] draws of floor + exp(mu + that level's effect)}:
    the pooled coefficient of one level with the other levels at their (zero) mean, on the
    coefficient's own scale (`floor`: `coefficient_floors`; tied beta columns tied)."""
    mu = _flat(post[f"{name}_mu"]).values
    features = post[dim].values
    out = {("population", "all"): _tied(name, floor + np.exp(mu), features)}
    for column, cols, effects in _level_effects(post, name, dim):
        for value, effect in effects.items():
            theta = mu.copy()
            theta[:, cols] += effect
            out[(column, value)] = _tied(name, floor + np.exp(theta), features)
    return out


def _log_axis(ax):
    """Log y axis with plain tick labels (1, 2, 5 x 10^k written as numbers)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _log_x(ax):
    """Log x axis with plain tick labels (1, 2, 5 x 10^k written as numbers)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def fig_shrinkage(posterior, prob: float = CI_PROB, max_cols: int = 4) -> Figure:
    """Per coefficient: each configuration's posterior mean and `prob` interval (its own
    data plus pooling) next to the pooled prediction for its levels without its own effect
    (floor + exp(mu + level effects)); the dashed line is the population value
    floor + exp(mu); floored coefficients (model/priors.py) on their own scale."""
    post = posterior.idata.posterior
    configs = posterior.configs
    panels = []
    for name, dim in (("beta", DIM_FEATURE), ("alpha", DIM_ALPHA_FEATURE)):
        own = _flat(post[name]).transpose("sample", DIM_CONFIG, dim).values
        floor = coefficient_floors(posterior, name, dim)
        pooled = pooled_draws(post, name, dim, configs, floor)
        pop = level_draws(post, name, dim, floor)[("population", "all")]
        for j, feat in enumerate(str(f) for f in post[dim].values):
            panels.append((feat, own[:, :, j], pooled[:, :, j], pop[:, j]))
    n_cols = min(max_cols, len(panels))
    n_rows = int(np.ceil(len(panels) / n_cols))
    fig = Figure(figsize=(3.1 * n_cols, 2.5 * n_rows + 0.6))
    axes = np.atleast_1d(fig.subplots(n_rows, n_cols, squeeze=False)).ravel()
    q = [(1 - prob) / 2, (1 + prob) / 2]
    x = np.arange(len(configs))
    for ax, (feat, own, pooled, pop) in zip(axes, panels):
        for vals, dx, color, label in ((own, -0.12, "C0", "configuration"),
                                       (pooled, 0.12, "C1", "pooled (levels)")):
            mean = vals.mean(axis=0)
            lo, hi = np.quantile(vals, q, axis=0)
            ax.errorbar(x + dx, mean, yerr=[mean - lo, hi - mean], fmt="o", ms=3.5,
                        color=color, capsize=2, lw=1, label=label)
        ax.axhline(float(np.mean(pop)), color="0.4", ls="--", lw=0.9, label="population")
        _log_axis(ax)
        ax.set_title(feat, fontsize=8)
        ax.set_xticks(x)
        ax.set_xticklabels([str(i + 1) for i in x], fontsize=7)
        ax.tick_params(axis="y", labelsize=7)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    axes[0].legend(fontsize=6, loc="best")
    fig.suptitle(f"Shrinkage: per-configuration vs pooled coefficients ({prob:.0%} intervals; "
                 "x = configuration number in the data table)", fontsize=9)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------- plan
def fig_plan(plan: dict) -> Figure:
    """Per option: probability that all SLOs hold vs arrival rate (solid), each SLO apart
    (dotted), the share of draws that saturate (black dash-dot, when the plan has it), the
    required probability (grey) and the capacity (vertical line)."""
    options = plan.get("options") or []
    n = max(1, len(options))
    n_cols = min(3, n)
    n_rows = int(np.ceil(n / n_cols))
    fig = Figure(figsize=(3.6 * n_cols, 2.8 * n_rows + 0.4))
    axes = np.atleast_1d(fig.subplots(n_rows, n_cols, squeeze=False)).ravel()
    prob = plan.get("prob")
    for ax, opt in zip(axes, options):
        evals = sorted(opt.get("evaluations") or [], key=lambda e: e.get("rate_per_s", 0))
        rates = [e.get("rate_per_s") for e in evals]
        ax.plot(rates, [e.get("p_all") for e in evals], "o-", color="C0", ms=3.5, label="all SLOs")
        names = sorted({k for e in evals for k in (e.get("p_slo") or {})})
        for i, name in enumerate(names):
            ax.plot(rates, [(e.get("p_slo") or {}).get(name, np.nan) for e in evals], ":",
                    color=f"C{i + 1}", lw=1.2, label=name)
        sat = [e.get("saturated_share") for e in evals]
        if any(v is not None for v in sat):
            ax.plot(rates, [np.nan if v is None else v for v in sat], "s-.", color="k", ms=3,
                    lw=1.1, label="P(saturated)")
        if prob is not None:
            ax.axhline(prob, color="0.5", lw=0.8)
        cap = opt.get("capacity_rate_per_s")
        if cap is not None:
            ax.axvline(cap, color="C3", lw=1, ls="--", label=f"capacity {cap:.3g}/s")
        if rates and min(rates) > 0 and max(rates) / min(rates) > 8:
            _log_x(ax)
        ax.set_ylim(-0.03, 1.03)
        ax.set_title(f"{opt.get('label', '?')} ({opt.get('gpus', '?')} GPUs)", fontsize=8)
        ax.set_xlabel("arrival rate [req/s]", fontsize=8)
        ax.set_ylabel("probability", fontsize=8)
        ax.legend(fontsize=6, loc="center left")
    for ax in axes[len(options):]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig


LATENCY_KINDS = (("ttft", "TTFT"), ("itl", "ITL"), ("e2e", "E2E"))
"""(metric prefix, label) of the latency panels of `fig_latency`."""


def latency_metrics(plan: dict) -> list[tuple[str, str, float | None]]:
    """(RESULT metric, label, SLO threshold or None) per latency kind the plan holds: the
    SLO's own metric where one is set on that kind, else the kind's mean."""
    slos = {}
    for s in plan.get("slos") or []:
        metric = s.get("result_metric") or f"{s.get('metric')}_s"
        slos.setdefault(str(metric).split("_")[0], (metric, s.get("threshold_s")))
    present = {m for opt in plan.get("options") or [] for e in opt.get("evaluations") or []
               for m in (e.get("metrics") or {})}
    out = []
    for kind, label in LATENCY_KINDS:
        metric, threshold = slos.get(kind, (f"{kind}_mean_s", None))
        if metric in present:
            out.append((metric, label, threshold))
    return out


def fig_latency(plan: dict, ci_prob: float = CI_PROB) -> Figure:
    """Per latency kind (TTFT, ITL, E2E): each option's predicted median and interval
    against the arrival rate, the SLO threshold as a horizontal line, capacity marked."""
    metrics = latency_metrics(plan)
    options = plan.get("options") or []
    n = max(1, len(metrics))
    fig = Figure(figsize=(3.7 * n, 2.9))
    axes = np.atleast_1d(fig.subplots(1, n, squeeze=False)).ravel()
    for ax, (metric, label, threshold) in zip(axes, metrics):
        for i, opt in enumerate(options):
            evals = sorted(opt.get("evaluations") or [], key=lambda e: e.get("rate_per_s", 0))
            rows = [(e["rate_per_s"], (e.get("metrics") or {}).get(metric) or {}) for e in evals]
            rates = np.array([r for r, _ in rows], float)
            get = lambda k: np.array([np.nan if v.get(k) is None else v[k] for _, v in rows], float)
            med, lo, hi = get("median"), get("lo"), get("hi")
            ax.fill_between(rates, lo, hi, color=f"C{i}", alpha=0.18, lw=0)
            ax.plot(rates, med, "o-", color=f"C{i}", ms=3.5, label=str(opt.get("label", "?")))
            cap = opt.get("capacity_rate_per_s")
            if cap is not None:
                ax.axvline(cap, color=f"C{i}", lw=0.9, ls="--")
        if threshold is not None:
            ax.axhline(threshold, color="C3", lw=1.4, label=f"SLO {threshold:g} s")
        _log_axis(ax)
        ax.set_title(f"{label} ({metric})", fontsize=8)
        ax.set_xlabel("arrival rate [req/s]", fontsize=8)
        ax.set_ylabel("seconds", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6, loc="upper left")
    if not metrics:
        axes[0].text(0.5, 0.5, "no latency metrics in the plan", ha="center", va="center")
        axes[0].set_axis_off()
    fig.suptitle(f"Predicted latency: median over draws, shaded {ci_prob:.0%} interval; "
                 "dashed: capacity", fontsize=9)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------- external check
EXTERNAL_METRICS = (("e2e_mean_s", "E2E mean"), ("ttft_mean_s", "TTFT mean"),
                    ("itl_mean_s", "ITL mean"))
"""Panels of `fig_external_check`: metric key and title."""


def fig_external_check(report: dict, band_pct: float = 5.0) -> Figure:
    """`validate --external` report, one row per scored stage and one panel per metric of
    EXTERNAL_METRICS: predicted / measured - 1 of the predictive median (dot) and of its
    interval (bar), shaded ±`band_pct`; red: the measurement lies outside the interval."""
    records = report["records"]
    labels = [f"{_short(r['run'], 48)} · stage {r['stage']}" for r in records]
    yy = np.arange(len(records))[::-1]
    fig = Figure(figsize=(11, 0.27 * len(records) + 1.4))
    axes = fig.subplots(1, len(EXTERNAL_METRICS), sharey=True)
    for ax, (metric, title) in zip(axes, EXTERNAL_METRICS):
        ax.axvspan(-band_pct, band_pct, color="C2", alpha=0.12)
        ax.axvline(0.0, color="0.3", lw=0.8)
        for y, r in zip(yy, records):
            if f"pred_{metric}" not in r:
                continue
            measured = r[f"measured_{metric}"]
            lo, med, hi = (100 * (r[f"pred_{metric}{s}"] / measured - 1) for s in ("_lo", "", "_hi"))
            color = "C0" if r[f"covered_{metric}"] else "C3"
            ax.plot([lo, hi], [y, y], color=color, lw=1.5, alpha=0.6)
            ax.plot([med], [y], "o", color=color, ms=4)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("predicted / measured − 1 (%)", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].set_yticks(yy)
    axes[0].set_yticklabels(labels, fontsize=7)
    fig.suptitle(f"Configurations never traced: predictive median (dot) and "
                 f"{report.get('ci_prob', CI_PROB):.0%} interval (bar); red: measured outside; "
                 f"shaded ±{band_pct:g}%", fontsize=9)
    fig.tight_layout()
    return fig
