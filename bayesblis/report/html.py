"""One self-contained HTML report of a posterior (`bayesblis report`).

Sections (ids in `SECTIONS`), the answer first: capacity and predicted latency (when a
PLAN.json is given), whether to trust it (diagnostics verdict, PPC summary, held-out
accuracy), the data, the coefficients on their own scale (per configuration and per pooled
level), shrinkage and the posterior-predictive checks in full. Figures are PNG images inlined as base64 ``data:`` URIs and the
style sheet is inline: the file needs no network and no other file to be viewed, and it
holds no script. Layout: data_specs/report.md.
"""

from __future__ import annotations

import copy
import html
import json
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from bayesblis.constants import CI_PROB, DIM_ALPHA_FEATURE, DIM_CONFIG, DIM_FEATURE
from bayesblis.errors import InputError

SECTIONS = (("plan", "Capacity and latency"), ("diagnostics", "Can it be trusted"),
            ("data", "Data summary"), ("coefficients", "Coefficients"),
            ("shrinkage", "Shrinkage"), ("ppc", "Posterior-predictive checks"))
"""(id, heading) of every section, in order; `plan` only when a plan is given."""

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
margin:0 auto;max-width:1150px;padding:0 1.2em 3em;color:#1d232a;line-height:1.4}
h1{font-size:1.6em;margin:.8em 0 .2em}h2{border-bottom:2px solid #d6dde4;padding-bottom:.2em;
margin-top:1.8em}h3{font-size:1.05em;margin:1.2em 0 .4em}
nav a{margin-right:1em}.meta{color:#58636e;font-size:.9em}
table{border-collapse:collapse;font-size:.82em;margin:.5em 0}
th,td{border:1px solid #d6dde4;padding:.25em .5em;text-align:right;vertical-align:top}
th{background:#f1f4f7}td.l,th.l{text-align:left}
.scroll{overflow-x:auto}.pass{color:#1a7f37;font-weight:600}.fail{color:#c62828;font-weight:600}
tr.flag td{background:#fdecec}figure{margin:.8em 0}figure img{max-width:100%;height:auto;
border:1px solid #e3e8ed}figcaption{font-size:.85em;color:#58636e}
.answer{font-size:1.05em}.note{background:#fff8e1;border-left:4px solid #f2b600;padding:.4em .8em;font-size:.9em}
"""


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _fmt(value, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    try:
        v = float(value)
    except (TypeError, ValueError):
        return _e(value)
    if not np.isfinite(v):
        return "-"
    return f"{v:.{digits}g}"


def _table(header, rows, left=1, row_class=None, left_last=False) -> str:
    """HTML table; the first `left` columns (and the last with `left_last`) are
    left-aligned; cells are pre-escaped."""
    def cls(i):
        return ' class="l"' if i < left or (left_last and i == len(header) - 1) else ""

    out = ['<div class="scroll"><table><thead><tr>']
    out += [f"<th{cls(i)}>{h}</th>" for i, h in enumerate(header)]
    out.append("</tr></thead><tbody>")
    for r, row in enumerate(rows):
        rc = row_class(r) if row_class else ""
        out.append(f'<tr class="{rc}">' if rc else "<tr>")
        out += [f"<td{cls(i)}>{c}</td>" for i, c in enumerate(row)]
        out.append("</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def _figure(fig, caption: str, name: str) -> str:
    from bayesblis.report.figures import png_base64

    data = png_base64(fig)
    return (f'<figure data-figure="{_e(name)}"><img alt="{_e(caption)}" '
            f'src="data:image/png;base64,{data}"><figcaption>{_e(caption)}</figcaption></figure>')


def _section(sid: str, body: str) -> str:
    heading = dict(SECTIONS)[sid]
    return f'<section id="{sid}"><h2>{_e(heading)}</h2>{body}</section>'


# ---------------------------------------------------------------------- plan
def read_plan(path) -> dict:
    """A PLAN.json (data_specs/plan.md), read tolerantly: `options` is required; each
    option's `evaluations` (rate_per_s, p_all, p_slo, saturated_share, metrics) and capacity
    are optional, but an evaluation's rate and probabilities must be numbers and its
    `p_slo` / `metrics` objects."""
    from bayesblis.io.text import parse_json_text, read_text_checked

    path = Path(path)
    expected = "a PLAN.json from `bayesblis plan` (data_specs/plan.md)"
    plan = parse_json_text(read_text_checked(path, expected=expected), path, expected=expected)
    if not isinstance(plan, dict) or not isinstance(plan.get("options"), list):
        raise InputError(path, "not a capacity plan", field="options",
                         expected="a list of options (bayesblis plan output)")
    for i, opt in enumerate(plan["options"]):
        if not isinstance(opt, dict):
            raise InputError(path, "option is not an object", record=i, field="options",
                             expected="an object per option")
        evals = opt.get("evaluations") or []
        if not isinstance(evals, list):
            raise InputError(path, f"invalid value {evals!r}", record=f"option {i}",
                             field="evaluations", expected="a list of {rate_per_s, p_all, p_slo}")
        for j, ev in enumerate(evals):
            if not isinstance(ev, dict) or "rate_per_s" not in ev or "p_all" not in ev:
                raise InputError(path, f"option {i} evaluation {j} lacks rate_per_s/p_all",
                                 record=i, field="evaluations",
                                 expected="{rate_per_s, p_all, p_slo}")
            for key in ("rate_per_s", "p_all"):
                v = ev[key]
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
                    raise InputError(path, f"invalid value {v!r}", record=f"option {i} evaluation {j}",
                                     field=f"evaluations.{key}", expected="a finite number")
            for key in ("p_slo", "metrics"):
                if ev.get(key) is not None and not isinstance(ev[key], dict):
                    raise InputError(path, f"invalid value {ev[key]!r}",
                                     record=f"option {i} evaluation {j}", field=f"evaluations.{key}",
                                     expected="an object (data_specs/plan.md)")
    return plan


NO_PLAN = ("No capacity plan was given. <code>bayesblis plan SCENARIO --posterior "
           "POSTERIOR.nc --slo ... --options ...</code> finds each option's capacity under the "
           "SLOs; <code>bayesblis report POSTERIOR.nc --plan PLAN.json</code> opens with it.")
"""The note a report without a plan opens with: the commands that give one."""


def plan_section(plan: dict) -> str:
    """Capacity per option and the predicted latencies, as figures first, then tables."""
    from bayesblis.catalog.kernel_spread import unmeasured_metric_sd
    from bayesblis.plan import (extrapolated_options, never_fitted_options, new_gpu_options,
                                unmeasured_gpu_options)
    from bayesblis.report.figures import fig_latency, fig_plan

    parts = []
    caps = [f"<b>{_e(o.get('label', '?'))}</b> {_fmt(o.get('capacity_rate_per_s'), 3)} req/s"
            for o in plan["options"]]
    parts.append('<p class="answer">Capacity: ' + "; ".join(caps) + "."
                 + (f" Most tokens/s per GPU: <b>{_e(plan['best_option'])}</b>."
                    if plan.get("best_option") else "") + "</p>")
    if any(opt.get("evaluations") for opt in plan["options"]):
        parts.append(_figure(fig_plan(plan), "Probability that the SLOs hold vs arrival rate, "
                             "per option (solid: all SLOs; dotted: each SLO; black dash-dot: "
                             "P(saturated), the share of draws whose queue keeps growing; "
                             "grey: the required probability; dashed: capacity).", "plan"))
        parts.append(_figure(fig_latency(plan), "Predicted TTFT, ITL and E2E per option against "
                             "the arrival rate: median over posterior draws and its interval; "
                             "red: the SLO threshold.", "latency"))
    slos = plan.get("slos") or []
    if slos:
        text = ", ".join(f"{s.get('metric', s.get('name', '?'))} {s.get('op', '<=')} "
                         f"{_fmt(s.get('threshold_s'))} s" for s in slos)
        prob = plan.get("prob")
        disc = (plan.get("metadata") or {}).get("discrepancy")
        parts.append(f"<p>SLOs: <b>{_e(text)}</b>"
                     + (f", required with probability &ge; {_fmt(prob)}" if prob is not None
                        else "") + " ("
                     + (f"posterior draws and the simulator discrepancy, {_e(disc.get('source', ''))}"
                        if disc else "posterior draws only, without the simulator discrepancy")
                     + ").</p>")
        never_fitted = never_fitted_options(plan)
        if never_fitted:
            parts.append(f"<p>Never fitted ({_e(', '.join(never_fitted))}): each draw's spread "
                         f"about the median is scaled as measured held out by model, not "
                         f"widened.</p>")
        new_gpus = new_gpu_options(plan)
        if new_gpus:
            parts.append(f"<p>GPU never traced ({_e(', '.join(new_gpus))}): each draw's spread "
                         f"is scaled likewise and widened by the GPU's own log-scale sd "
                         f"(its kernels are in the features).</p>")
        unmeasured = unmeasured_gpu_options(plan)
        if unmeasured:
            parts.append(f"<p>GPU neither traced nor in kernel-db ({_e(', '.join(unmeasured))}): "
                         f"each draw's spread is scaled likewise and widened by a log-scale sd of "
                         f"{unmeasured_metric_sd():.2g} (kernel-db's spread across GPUs).</p>")
        beyond = extrapolated_options(plan)
        if beyond:
            parts.append(f"<p>Capacity beyond the traced load ({_e(', '.join(beyond))}): the "
                         f"discrepancy grows with the extrapolation.</p>")
    rows = []
    for opt in plan["options"]:
        search = opt.get("search") or {}
        rows.append([_e(opt.get("label", "?")), _fmt(opt.get("gpus")),
                     _fmt(opt.get("capacity_rate_per_s")), _fmt(opt.get("capacity_per_gpu_rate_per_s")),
                     _fmt(opt.get("tokens_per_s_per_gpu")), _fmt(opt.get("prob_at_capacity")),
                     _fmt((opt.get("at_capacity") or {}).get("saturated_share")),
                     _fmt(len(opt.get("evaluations") or [])), _e(search.get("status", "-"))])
    parts.append(_table(["option", "GPUs", "capacity [req/s]", "per GPU [req/s]",
                         "tokens/s per GPU", "P at capacity", "P saturated at capacity",
                         "rates evaluated", "status"], rows))
    if any(opt.get("evaluations") for opt in plan["options"]):
        parts.append(_curve_tables(plan))
    return "".join(parts)


def _curve_tables(plan: dict) -> str:
    """Per option, one row per evaluated rate: P(all SLOs), P(saturated) and each SLO metric's
    median over draws [interval] and mean."""
    metrics = [s.get("result_metric") or f"{s.get('metric')}_s" for s in plan.get("slos") or []]
    parts = ['<p class="meta">Per evaluated rate: SLO metrics as the median over posterior draws '
             "[interval] and the mean. Near capacity a few saturating draws (queue still growing "
             "at the end of the traffic) inflate the mean; P(saturated) says how many.</p>"]
    for opt in plan["options"]:
        evals = sorted(opt.get("evaluations") or [], key=lambda e: e.get("rate_per_s", 0))
        if not evals:
            continue
        rows = []
        for e in evals:
            cells = [_fmt(e.get("rate_per_s")), _fmt(e.get("n_requests")), _fmt(e.get("p_all"), 3),
                     _fmt(e.get("saturated_share"), 3)]
            for m in metrics:
                v = (e.get("metrics") or {}).get(m) or {}
                cells += [f"{_fmt(v.get('median'), 3)}<br><small>[{_fmt(v.get('lo'), 3)}, "
                          f"{_fmt(v.get('hi'), 3)}]</small>", _fmt(v.get("mean"), 3)]
            rows.append(cells)
        header = ["rate [req/s]", "requests", "P(all SLOs)", "P(saturated)"]
        for m in metrics:
            header += [f"{_e(m)} median [s]", f"{_e(m)} mean [s]"]
        parts.append(f"<h3>{_e(opt.get('label', '?'))}: probability curve</h3>")
        parts.append(_table(header, rows, left=0))
    return "".join(parts)


# ---------------------------------------------------------------------- sections
def data_section(posterior) -> str:
    fit = posterior.fit_info or {}
    data = getattr(posterior, "data", None)
    parts = [f"<p>{len(posterior.configs)} configurations; fit <b>{_e(fit.get('method', '?'))}</b> on "
             f"{_fmt(fit.get('n_obs'))} window observations in {_fmt(fit.get('wall_s'), 3)} s.</p>"]
    kinds = []
    counts = {}
    if data is not None:
        obs = data.obs
        kinds = sorted(obs["kind"].astype(str).unique())
        counts = obs.groupby(["config", "kind"]).size().to_dict()
        med = obs.groupby("config")["y_s"].median().to_dict()
    rows = []
    for i, row in posterior.configs.reset_index(drop=True).iterrows():
        cfg = row["config"]
        cells = [str(i + 1), _e(cfg), _e(row["model"]), _e(row["model_family"]), _e(row["arch"]),
                 _e(row["hardware"]), _fmt(row["tp"]), _fmt(row["ep"]), _e(row["dtype"])]
        if data is not None:
            cells += [_fmt(int(counts.get((cfg, k), 0))) for k in kinds]
            cells.append(_fmt(med.get(cfg)))
        rows.append(cells)
    header = ["#", "configuration", "model", "family", "arch", "hardware", "TP", "EP", "dtype"]
    if data is not None:
        header += [f"n {_e(k)}" for k in kinds] + ["median y_s [s]"]
    parts.append(_table(header, rows, left=6))
    if data is None:
        parts.append('<p class="note">The posterior file holds no observation table; counts '
                     "per kind come from the fit record only.</p>")
        per_kind = fit.get("obs_per_kind") or {}
        if per_kind:
            parts.append(_table(["kind", "observations"],
                                [[_e(k), _fmt(v)] for k, v in sorted(per_kind.items())]))
    versions = posterior.versions or {}
    if versions:
        parts.append('<p class="meta">written with ' + ", ".join(
            f"{_e(k)} {_e(v)}" for k, v in versions.items() if v) + "</p>")
    return _section("data", "".join(parts))


def _trust_summary(doc, plan) -> str:
    """PPC summary and held-out accuracy lines of the trust section."""
    parts = []
    if doc is None:
        parts.append("<p>Posterior-predictive check: not available (see below).</p>")
    else:
        rows = doc.get("rows") or []
        cov = [r["coverage_90"] for r in rows if r.get("coverage_90") is not None]
        flagged = doc.get("flagged_configs") or []
        parts.append("<p>Posterior-predictive check: "
                     + (f'<span class="fail">poor fit flagged for {_e(", ".join(flagged))}</span>'
                        if flagged else '<span class="pass">no configuration flagged</span>')
                     + f" ({len(rows)} configuration &times; kind rows"
                     + (f", 90% interval coverage {_fmt(min(cov), 3)} to {_fmt(max(cov), 3)}"
                        if cov else "") + '; details in <a href="#ppc">the checks</a>).</p>')
    disc = ((plan or {}).get("metadata") or {}).get("discrepancy")
    if disc:
        parts.append(f"<p>Held-out accuracy: the plan's intervals include the simulator "
                     f"discrepancy measured held out by {_e(disc.get('holdout', '?'))} "
                     f"({_e(disc.get('source', ''))}).</p>")
    else:
        parts.append('<p class="meta">Held-out accuracy is not recorded here: <code>bayesblis '
                     "validate</code> measures it, and <code>bayesblis plan</code> applies the "
                     "packaged simulator discrepancy built from it.</p>")
    return "".join(parts)


def diagnostics_section(posterior, doc=None, plan=None) -> str:
    """Whether to trust the answer: the sampler diagnostics verdict and table, the PPC
    summary (`doc`: a CHECK document) and held-out accuracy when the plan records it."""
    from bayesblis.model.diagnostics import THRESHOLDS, diagnose

    diag = (posterior.fit_info or {}).get("diagnostics")
    if not diag:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            diag = diagnose(posterior.idata, (posterior.fit_info or {}).get("method", "nuts"))
    passed = diag.get("passed")
    status = {True: '<span class="pass">PASS</span>', False: '<span class="fail">FAIL</span>',
              None: "n/a"}[passed]
    parts = [f"<p>Sampler diagnostics ({_e(diag.get('method', '?'))}, {_fmt(diag.get('chains'))} "
             f"chains &times; {_fmt(diag.get('draws'))} draws): {status}</p>"]
    trust = _trust_summary(doc, plan)
    if passed is None:
        parts.append(f"<p class=\"note\">{_e(diag.get('note', ''))}</p>")
        return _section("diagnostics", "".join(parts) + trust)
    chains = diag.get("chains") or 1
    rows = [["r_hat max", _fmt(diag.get("r_hat_max")), f"&le; {THRESHOLDS['r_hat_max']}"],
            ["bulk ESS min", _fmt(diag.get("ess_bulk_min"), 3),
             f"&ge; {THRESHOLDS['ess_per_chain_min'] * chains}"],
            ["tail ESS min", _fmt(diag.get("ess_tail_min"), 3),
             f"&ge; {THRESHOLDS['ess_per_chain_min'] * chains}"],
            ["divergences", _fmt(diag.get("divergences")), f"&le; {THRESHOLDS['divergences_max']}"],
            ["E-BFMI min", _fmt(diag.get("e_bfmi_min"), 3), f"&ge; {THRESHOLDS['e_bfmi_min']}"]]
    parts.append(_table(["measure", "value", "threshold"], rows))
    if diag.get("problems"):
        parts.append("<ul>" + "".join(f"<li>{_e(p)}</li>" for p in diag["problems"]) + "</ul>")
    return _section("diagnostics", "".join(parts) + trust)


def _cell(draws, prob) -> str:
    lo, hi = np.quantile(draws, [(1 - prob) / 2, (1 + prob) / 2])
    return f"{_fmt(np.mean(draws))}<br><small>[{_fmt(lo, 3)}, {_fmt(hi, 3)}]</small>"


def coefficients_section(posterior, prob: float = CI_PROB) -> str:
    from bayesblis.report.figures import _flat, coefficient_floors, level_draws

    post = posterior.idata.posterior
    configs = list(posterior.configs["config"].astype(str))
    parts = [f"<p>Posterior mean and {prob:.0%} equal-tailed interval of every coefficient "
             "(beta multiplies features in seconds; alpha the request-level features). "
             "Columns are the configuration numbers of the data table. Every value is on the "
             "coefficient's own scale: a floored coefficient (floor &gt; 0, the datasheet "
             "limit) is floor + exp(theta), so the population column is floor + exp(mu), "
             "comparable with the configurations.</p>"]
    for name, dim, title in (("beta", DIM_FEATURE, "Beta (step time)"),
                             ("alpha", DIM_ALPHA_FEATURE, "Alpha (request-level delays)")):
        own = _flat(post[name]).transpose("sample", DIM_CONFIG, dim).values
        floor = coefficient_floors(posterior, name, dim)
        levels = level_draws(post, name, dim, floor)
        features = [str(f) for f in post[dim].values]
        rows = []
        for j, feat in enumerate(features):
            rows.append([_e(feat), _fmt(floor[j]) if floor[j] > 0 else "-"]
                        + [_cell(own[:, c, j], prob) for c in range(len(configs))]
                        + [_cell(levels[("population", "all")][:, j], prob)])
        parts.append(f"<h3>{_e(title)} per configuration</h3>")
        parts.append(_table(["coefficient", "floor"] + [str(i + 1) for i in range(len(configs))]
                            + ["population"], rows))
        level_keys = [k for k in levels if k[0] != "population"]
        if level_keys:
            rows = [[_e(feat)] + [_cell(levels[k][:, j], prob) for k in level_keys]
                    for j, feat in enumerate(features)]
            parts.append(f"<h3>{_e(title)} per pooled level</h3><p class=\"meta\">floor + exp(mu "
                         "+ the level's effect), other levels at their mean.</p>")
            parts.append(_table(["coefficient"] + [f"{_e(c)}=<br>{_e(v)}" for c, v in level_keys],
                                rows))
    return _section("coefficients", "".join(parts))


def shrinkage_section(posterior, prob: float = CI_PROB) -> str:
    from bayesblis.report.figures import fig_shrinkage

    return _section("shrinkage", _figure(
        fig_shrinkage(posterior, prob),
        "Per-configuration posterior (blue) vs the pooled prediction from its levels alone "
        "(orange, floor + exp(mu + level effects)); dashed: population floor + exp(mu). A "
        "configuration far "
        "from its pooled value is one its own data pull away from the hierarchy.", "shrinkage"))


def ppc_section(posterior, *, n_draws: int, seed: int, loo: bool, dataset=None,
                max_obs_per_config: int | None = None, check=None) -> tuple[str, object]:
    """The PPC section and the `ppc.PredictiveDraws` behind it (None if unavailable).
    `check`: a finished ``check_posterior(..., return_draws=True)`` result to reuse."""
    from bayesblis.ppc import CheckError, check_posterior
    from bayesblis.report.figures import (fig_coverage, fig_load_response, fig_pareto_k,
                                          fig_ppc_config)

    if check is not None:
        doc, draws = check
    else:
        try:
            doc, draws = check_posterior(posterior, n_draws=n_draws, seed=seed, loo=loo,
                                         dataset=dataset, max_obs_per_config=max_obs_per_config,
                                         return_draws=True)
        except CheckError as exc:
            return _section("ppc", f'<p class="note">Not available: {_e(exc)}</p>'), None
    number = {c: i + 1 for i, c in enumerate(posterior.configs["config"].astype(str))}
    flagged = doc["flagged_configs"]
    parts = [f"<p>{doc['n_draws']} posterior draws replicate the {doc['n_obs']} fitted "
             f"observations ({_e(doc['observations'])}). "
             + (f'<span class="fail">Poor fit flagged: {_e(", ".join(flagged))}</span>' if flagged
                else '<span class="pass">No configuration flagged.</span>') + "</p>"]
    if doc["loo"] is not None:
        lo = doc["loo"]
        parts.append(f"<p>PSIS-LOO: elpd {lo['elpd_loo']:.1f} (se {lo['se']:.1f}), p_loo "
                     f"{lo['p_loo']:.1f}; Pareto k &gt; 0.7 for {lo['pareto_k_bad']} of "
                     f"{lo['n_obs']} observations ({lo['pareto_k_bad_share']:.1%}).</p>")
    rows = []
    for r in doc["rows"]:
        rows.append([str(number.get(r["config"], "?")), _e(r["kind"]), _fmt(r["n_obs"]),
                     _fmt(r["observed_mean_s"]), _fmt(r["replicated_mean_s"]),
                     _fmt(r["mean_ratio"], 3), _fmt(r["coverage_50"], 3), _fmt(r["coverage_90"], 3),
                     _fmt(r["pit_ks"], 3), _fmt(r["pareto_k_bad_share"], 2),
                     _e("; ".join(r["reasons"])) if r["flagged"] else "ok"])
    parts.append(_table(["#", "kind", "n", "observed mean [s]", "replicated mean [s]",
                         "obs/rep", "cov 50%", "cov 90%", "PIT KS", "share k&gt;0.7", "flag"],
                        rows, left=2, left_last=True,
                        row_class=lambda i: "flag" if doc["rows"][i]["flagged"] else ""))
    parts.append(_figure(fig_coverage(doc), "Coverage of the 50% and 90% posterior-predictive "
                         "intervals per configuration and kind (shaded: accepted range of "
                         "the 90% coverage).", "coverage"))
    if draws.loo is not None:
        parts.append(_figure(fig_pareto_k(draws), "PSIS-LOO Pareto k per observation.",
                             "pareto-k"))
    if doc.get("load_response"):
        parts.append(_figure(fig_load_response(doc["load_response"]),
                             "Load response: observed / replicated median time per engine step "
                             "of each configuration's windows, by requests in flight (bars: the "
                             "replicated 90% interval; red: outside it by more than 1%; dotted: "
                             "the fitted load, beyond which predictions extrapolate). A pattern "
                             "along the batch means the step features mis-price how the step "
                             "grows with it.", "load-response"))
    parts.append(_prior_predictive_table(doc.get("prior_predictive"), number))
    for cfg in posterior.configs["config"].astype(str):
        if not (draws.data.obs["config"].astype(str) == cfg).any():
            continue
        parts.append(f"<h3>{number[cfg]}. {_e(cfg)}</h3>")
        parts.append(_figure(fig_ppc_config(draws, cfg, seed=seed),
                             f"{cfg}: observed vs replicated durations (ECDF) and PIT "
                             "calibration per observation kind (95% pointwise band).",
                             f"ppc-{number[cfg]}"))
    return _section("ppc", "".join(parts)), draws


def _prior_predictive_table(prior: dict | None, number: dict) -> str:
    """The prior predictive check (`ppc.prior_predictive_rows`) as a paragraph and a table;
    empty when the posterior file holds no prior draws."""
    if not prior:
        return ""
    rows = [[str(number.get(r["config"], "?")), _e(r["kind"]), _fmt(r["observed_median_s"]),
             _fmt(r["prior_median_s"]),
             f"{_fmt(r['prior_median_lo_s'])} - {_fmt(r['prior_median_hi_s'])}",
             _fmt(r["prior_p"], 3), "conflict" if r["conflict"] else "ok"]
            for r in prior["rows"]]
    conflicts = prior["conflicts"]
    return (f'<p data-table="prior-predictive">Prior predictive check: {prior["n_draws"]} prior '
            "draws replicate the same observations; where each observed median falls among the "
            "prior's replicated medians (outside their central 99%: a conflict between the "
            "priors and the data's scale). "
            + (f'<span class="fail">Conflicts: {_e(", ".join(conflicts))}</span>' if conflicts
               else '<span class="pass">No conflict.</span>') + "</p>"
            + _table(["#", "kind", "observed median [s]", "prior median [s]", "prior 90% [s]",
                      "p", "flag"], rows, left=2, left_last=True,
                     row_class=lambda i: "flag" if prior["rows"][i]["conflict"] else ""))


def build_report(posterior, *, plan: dict | None = None, n_draws: int = 200, seed: int = 0,
                 loo: bool = True, dataset=None, max_obs_per_config: int | None = None,
                 prob: float = CI_PROB, check=None) -> str:
    """The report as one HTML string (see module docstring). `check`: a finished
    ``ppc.check_posterior(posterior, return_draws=True)`` to reuse instead of checking."""
    from bayesblis import __version__
    from bayesblis.model.store import load_posterior

    if not hasattr(posterior, "idata"):
        posterior = load_posterior(posterior)
    from bayesblis.ppc import CheckError, check_posterior

    if check is None:
        try:
            check = check_posterior(posterior, n_draws=n_draws, seed=seed, loo=loo,
                                    dataset=dataset, max_obs_per_config=max_obs_per_config,
                                    return_draws=True)
        except CheckError:
            check = None
    ppc_html, draws = ppc_section(posterior, n_draws=n_draws, seed=seed, loo=loo, dataset=dataset,
                                  max_obs_per_config=max_obs_per_config, check=check)
    if posterior.data is None and draws is not None:  # observations rebuilt from a dataset
        posterior = copy.copy(posterior)
        posterior.data = draws.data
    doc = check[0] if check is not None else None
    sections = [] if plan is None else [_section("plan", plan_section(plan))]
    sections += [diagnostics_section(posterior, doc, plan), data_section(posterior),
                 coefficients_section(posterior, prob), shrinkage_section(posterior, prob),
                 ppc_html]
    shown = [(sid, h) for sid, h in SECTIONS if sid != "plan" or plan is not None]
    lead = "" if plan is not None else f'<p class="note">{NO_PLAN}</p>'
    nav = "".join(f'<a href="#{sid}">{_e(h)}</a>' for sid, h in shown)
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    title = f"bayesblis report: {Path(posterior.path).name if posterior.path else 'posterior'}"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_e(title)}</title><style>{CSS}</style></head><body>"
            f"<h1>{_e(title)}</h1><p class=\"meta\">posterior {_e(posterior.path)} &middot; "
            f"bayesblis {_e(__version__)} &middot; {_e(created)}</p><nav>{nav}</nav>"
            + lead + "".join(sections) + "</body></html>\n")


def write_report(posterior, out, *, plan_path=None, **kwargs) -> Path:
    """Build the report and write it atomically to `out`."""
    from bayesblis.atomic import write_text

    plan = read_plan(plan_path) if plan_path is not None else None
    text = build_report(posterior, plan=plan, **kwargs)
    out = Path(out)
    write_text(out, text)
    return out
