"""Sampler diagnostics with thresholds: r_hat, bulk/tail ESS, divergences, E-BFMI."""

from __future__ import annotations

import warnings

import arviz as az
import numpy as np

THRESHOLDS = {"r_hat_max": 1.01, "ess_per_chain_min": 100, "divergences_max": 0,
              "e_bfmi_min": 0.3, "pareto_k_max": 0.7}
"""A fit passes when every one of these holds (ArviZ / Stan conventions)."""

SUMMARY_VARS = ("beta_mu", "alpha_mu", "beta", "alpha", "sigma_step", "sigma_kind", "tau_run", "nu")


class DiagnosticsWarning(UserWarning):
    """A fit failed one of the diagnostic thresholds."""


def diagnose(idata, method: str = "nuts", importance: dict | None = None) -> dict:
    """Diagnostics of a fit as a plain dict; warns when a threshold fails. `importance`:
    the PSIS check of an approximate likelihood (``pareto_k``, ``ess``; method 'summary')."""
    post = idata.posterior
    n_chains = int(post.sizes["chain"])
    result = {"method": method, "chains": n_chains, "draws": int(post.sizes["draw"]),
              "thresholds": dict(THRESHOLDS)}
    if method == "advi":
        result.update(passed=None, note="ADVI: no MCMC diagnostics; intervals are "
                      "approximate and usually too narrow")
        return result
    names = [v for v in SUMMARY_VARS if v in post]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rhat = az.rhat(post, var_names=names)
        ess_bulk = az.ess(post, var_names=names, method="bulk")
        ess_tail = az.ess(post, var_names=names, method="tail")
    result["r_hat_max"] = _extreme(rhat, np.nanmax)
    result["ess_bulk_min"] = _extreme(ess_bulk, np.nanmin)
    result["ess_tail_min"] = _extreme(ess_tail, np.nanmin)
    stats = idata.sample_stats
    result["divergences"] = int(stats["diverging"].sum()) if "diverging" in stats else 0
    if "energy" in stats:
        result["e_bfmi_min"] = float(np.min(az.bfmi(idata)))
    else:
        result["e_bfmi_min"] = None
    problems = []
    need_ess = THRESHOLDS["ess_per_chain_min"] * n_chains
    if n_chains > 1 and result["r_hat_max"] > THRESHOLDS["r_hat_max"]:
        problems.append(f"r_hat max {result['r_hat_max']:.3f} > {THRESHOLDS['r_hat_max']}")
    if result["ess_bulk_min"] < need_ess:
        problems.append(f"bulk ESS min {result['ess_bulk_min']:.0f} < {need_ess}")
    if result["ess_tail_min"] < need_ess:
        problems.append(f"tail ESS min {result['ess_tail_min']:.0f} < {need_ess}")
    if result["divergences"] > THRESHOLDS["divergences_max"]:
        problems.append(f"{result['divergences']} divergent transitions")
    if result["e_bfmi_min"] is not None and result["e_bfmi_min"] < THRESHOLDS["e_bfmi_min"]:
        problems.append(f"E-BFMI min {result['e_bfmi_min']:.2f} < {THRESHOLDS['e_bfmi_min']}")
    if importance is not None:
        result["pareto_k"], result["importance_ess"] = importance["pareto_k"], importance["ess"]
        if importance["ess"] < need_ess:
            problems.append(f"importance ESS {importance['ess']:.0f} < {need_ess}")
        if importance["pareto_k"] > THRESHOLDS["pareto_k_max"]:
            problems.append(f"Pareto k {importance['pareto_k']:.2f} > {THRESHOLDS['pareto_k_max']}: "
                            "the likelihood summaries misdescribe the rows (fit with nuts)")
    result["problems"] = problems
    result["passed"] = not problems
    if problems:
        warnings.warn("fit diagnostics failed: " + "; ".join(problems), DiagnosticsWarning,
                      stacklevel=2)
    return result


def _extreme(dataset, reducer) -> float:
    values = [np.asarray(dataset[v]).ravel() for v in dataset.data_vars]
    values = np.concatenate(values) if values else np.array([np.nan])
    return float(reducer(values))


def format_diagnostics(diag: dict) -> str:
    """One readable block for the terminal."""
    if diag.get("passed") is None:
        return f"diagnostics ({diag['method']}): {diag.get('note', 'n/a')}"
    status = "PASS" if diag["passed"] else "FAIL"
    lines = [f"diagnostics ({diag['method']}, {diag['chains']} chains x {diag['draws']} draws): {status}",
             f"  r_hat max      {diag['r_hat_max']:.3f}   (<= {THRESHOLDS['r_hat_max']})",
             f"  ESS bulk min   {diag['ess_bulk_min']:.0f}   (>= {THRESHOLDS['ess_per_chain_min']} per chain)",
             f"  ESS tail min   {diag['ess_tail_min']:.0f}",
             f"  divergences    {diag['divergences']}",
             "  E-BFMI min     " + ("n/a" if diag["e_bfmi_min"] is None else f"{diag['e_bfmi_min']:.2f}")
             + f"   (>= {THRESHOLDS['e_bfmi_min']})"]
    if "pareto_k" in diag:
        lines.append(f"  Pareto k       {diag['pareto_k']:.2f}   (<= {THRESHOLDS['pareto_k_max']}; "
                     f"importance ESS {diag['importance_ess']:.0f})")
    for problem in diag.get("problems", []):
        lines.append(f"  ! {problem}")
    return "\n".join(lines)
