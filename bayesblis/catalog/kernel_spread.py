"""How far one GPU's kernels stray from another's: kernel-db's times as evidence.

The step features price each operator at its datasheet time, and `catalog.kernel_prices`
corrects that by the GPU's measured kernels where kernel-db has them. For a GPU kernel-db
lacks, what is left is the spread of the achieved fraction of the datasheet across GPUs.
This module measures it with a hierarchy fitted to kernel-db's ratios (measured time over
datasheet time, log scale), one block per operator group (`GROUP_FEATURES`):

    log ratio[gpu, point] = mu + pcie * link_offset + gpu_effect + point_effect + error
    gpu_effect ~ Normal(0, tau),  tau ~ HalfNormal(PRIOR_TAU),  error ~ StudentT(nu, 0, sigma)

fitted on the balanced layout's parts (`decompose`): each GPU's mean over the points, with
the GPU effect integrated out (Normal(mu, sqrt(tau^2 + sigma^2 / points))), and the
residuals for the error's scale and tails.

``tau`` is the spread of a GPU's achieved fraction about the population's, per operator
group; its prior is the 0.3 that every GPU effect of the trace fit takes (model/priors.py),
so what kernel-db adds is the evidence of four GPUs. ``point_effect`` (the point's mean over
the GPUs, about the grand mean) is the shape: every GPU's GEMM at 4096 x 4096 is slower
over its bytes than at 8192 x 8192.
``link_offset`` separates collectives over PCIe (NCCL, L40S) from NVLink (vLLM's custom
all-reduce) in the all-reduce groups only. A group with one point per GPU (decode
attention) has no point effect and no error term: its GPU effects are the ratios (to 1%).

What uses it: `new_gpu_sd` (sqrt(E[tau^2]), the predictive sd of a GPU never measured)
sets, with `HARDWARE_SCALE` (how far serving strays from its kernels), the GPU effect of the
coefficients each group covers for a GPU the trace fit never saw (`hardware_scales`), and
the sd every simulated metric of such a GPU takes (`gpu_metric_sd`).
`benchmarks/kernel_db_logo.py` fits it with each GPU left out and scores the interval.

The fitted summary lives in ``kernel_spread.json`` beside this module, built from the
packaged kernel prices by ``python3 -m bayesblis.catalog.kernel_spread`` (30 s).
"""

from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

SPREAD_FILE = Path(__file__).with_name("kernel_spread.json")
PRIOR_TAU = 0.3
"""Prior scale (HalfNormal) of a GPU's effect: the trace fit's prior for the hardware level."""
HARDWARE_SCALE = 0.1
"""Log-scale sd of how far serving strays from its kernels on a GPU the fit never saw, on
the coefficients whose features carry the GPU's kernel-db prices. On the traced H100 the
fitted weight and KV coefficients (1.21, 1.17, quick-tour posterior of model version 8) were
0.97 and 0.93 of kernel-db's times there (`kernel_prices.reference_ratios` then: 1.25 and
1.25 of the datasheet); two A100 runs measured elsewhere, with weights and KV rescaled by kernel-db,
were +2% and +14% E2E."""
GROUP_FEATURES = {
    "gemm_decode": ("weight_traffic_s",),
    "gemm_prefill": ("prefill_compute_s", "decode_compute_s"),
    "decode_attention": ("kv_traffic_s",),
    "allreduce_per_byte": ("tp_comm_s",),
    "allreduce_latency": ("tp_sync_s",),
}
"""Operator group -> the step coefficients whose GPU effect its spread bounds."""
PRICED_GROUPS = {"gemm": ("gemm_decode",), "decode_attention": ("decode_attention",),
                 "allreduce": ("allreduce_per_byte", "allreduce_latency")}
"""kernel_prices catalog table -> the groups whose price a deployment on a GPU it has
carries whole (`kernel_prices.factor`, `kv_factor`, `allreduce_curve`). Compute is priced
only in part (`gpu_compute_rate`: the GPU's median GEMM rate, not each deployment's shapes,
and no traced run has measured prefill), so its spread stays kernel-db's across GPUs with
`HARDWARE_SCALE`."""
LINK_GROUPS = ("allreduce_per_byte", "allreduce_latency")
"""Groups whose ratios depend on the link (NVLink custom all-reduce against NCCL over PCIe)."""
LINK_OFFSET_SD = 1.0
"""Prior sd (log scale) of the PCIe GPUs' offset in `LINK_GROUPS`: a fit without a PCIe GPU
predicts one with this much more spread."""
WEIGHT_STREAMING_GROUP = "gemm_decode"
"""The group whose spread widens every metric of a GPU kernel-db lacks (`gpu_metric_sd`):
weight streaming is most of a decode step on every configuration here."""
SHAPE_RANGE = (1024, 16384)
"""GEMM shapes read (n and k), as `benchmarks/kernel_db_logo.py` scores them."""


def log_ratios(catalog: dict | None = None) -> pd.DataFrame:
    """One row per (group, gpu, point): log(measured / datasheet time) of kernel-db's
    vLLM 0.14.0 tables as `catalog.kernel_prices` stores them, with ``pcie`` (no NVLink).

    gemm_decode: bf16 GEMMs with n, k in `SHAPE_RANGE` and weights larger than every GPU's
    L2 (a decode step streams its weights; a benchmark repeating one small GEMM reads it
    from L2) at the decode token counts (mean of the logs) over weight bytes at datasheet
    bandwidth; gemm_prefill: the same shapes at
    the prefill token counts (median) over FLOPs at the bf16 peak; decode_attention: KV
    streaming past L2 (one ratio per GPU); allreduce_per_byte / allreduce_latency: the
    all-reduce vLLM runs at TP 2, 4, 8, per byte over the ring formula at the GPU's link,
    and a small message's time."""
    from bayesblis.catalog import kernel_prices
    from bayesblis.catalog.gpus import load_gpu

    catalog = catalog if catalog is not None else kernel_prices.catalog()
    rows = []

    def add(group, gpu, points, values):
        for point, value in zip(points, np.asarray(values, float)):
            rows.append((group, gpu, str(point), float(value), not load_gpu(gpu).has_nvlink))

    for gpu_name, grids in catalog.get("gemm", {}).items():
        grid = grids.get("bf16")
        if grid is None:
            continue
        gpu = load_gpu(gpu_name)
        n = np.asarray(grid["n"], float)[:, None]
        k = np.asarray(grid["k"], float)[None, :]
        keep = (n >= SHAPE_RANGE[0]) & (n <= SHAPE_RANGE[1]) & (k >= SHAPE_RANGE[0]) & (k <= SHAPE_RANGE[1])
        log_us = {m: np.asarray(g, float) for m, g in zip(grid["m"], grid["log_us"])}
        weight_bytes = n * k * kernel_prices.TABLE_BYTES["bf16"]
        decode = np.mean([log_us[m] - np.log(weight_bytes / gpu.hbm_bandwidth_bytes_per_s * 1e6)
                          for m in kernel_prices.DECODE_TOKENS], axis=0)
        prefill = np.median([log_us[m] - np.log(2 * m * n * k / gpu.peak_flops("bf16") * 1e6)
                             for m in kernel_prices.PREFILL_TOKENS], axis=0)
        names = np.array([[f"{int(a)}x{int(b)}" for b in k[0]] for a in n[:, 0]])
        past_l2 = keep & (weight_bytes >= max(kernel_prices.L2_BYTES.values()))
        add("gemm_decode", gpu_name, names[past_l2], decode[past_l2])
        add("gemm_prefill", gpu_name, names[keep], prefill[keep])
    for gpu_name, value in catalog.get("decode_attention", {}).items():
        add("decode_attention", gpu_name, ["kv"], np.log([value]))
    for gpu_name, by_tp in catalog.get("allreduce", {}).items():
        tps = [tp for tp in ("2", "4", "8") if tp in by_tp]
        add("allreduce_per_byte", gpu_name, [f"tp{tp}" for tp in tps],
            np.log([by_tp[tp]["per_byte_ratio"] for tp in tps]))
        add("allreduce_latency", gpu_name, [f"tp{tp}" for tp in tps],
            np.log([by_tp[tp]["latency_us"] for tp in tps]))
    frame = pd.DataFrame(rows, columns=["group", "gpu", "point", "log_ratio", "pcie"])
    # a shape counts only where every GPU of its group has it (the grids are shared)
    gpus = frame.groupby("group")["gpu"].transform("nunique")
    per_point = frame.groupby(["group", "point"])["gpu"].transform("nunique")
    return frame[per_point == gpus].reset_index(drop=True)


def decompose(rows: pd.DataFrame) -> tuple[pd.Series, pd.Series, pd.DataFrame]:
    """One group's rows, every GPU at every point, split as a two-way layout: (GPU means
    over the points, point effects about the grand mean, residuals [gpu x point])."""
    table = rows.pivot(index="gpu", columns="point", values="log_ratio")
    gpu_mean = table.mean(axis=1)
    point_effect = table.mean(axis=0) - float(table.values.mean())
    return gpu_mean, point_effect, table.sub(gpu_mean, axis=0).sub(point_effect, axis=1)


def build_model(frame: pd.DataFrame):
    """The PyMC model of `log_ratios` rows: one independent block per group (module
    docstring), variables named ``<group>_<name>``. The layout is balanced (every GPU at
    every point), so the point effects are the points' means over the GPUs and each GPU's
    effect is seen through its mean over the points, whose error is the residuals' sigma
    over sqrt(points); the GPU effects are integrated out, so NUTS sees no funnel."""
    import pymc as pm

    with pm.Model() as model:
        for group, rows in frame.groupby("group", sort=True):
            gpu_mean, _, residual = decompose(rows)
            mu = pm.Normal(f"{group}_mu", 0.0, 1.0)
            tau = pm.HalfNormal(f"{group}_tau", PRIOR_TAU)
            level = mu
            pcie = rows.groupby("gpu")["pcie"].first().reindex(gpu_mean.index).to_numpy(float)
            if group in LINK_GROUPS and pcie.any():
                level = level + pm.Normal(f"{group}_link_offset", 0.0, LINK_OFFSET_SD) * pcie
            n_points = residual.shape[1]
            if n_points == 1:  # the ratio is the GPU's effect, measured
                se = 0.01
            else:
                sigma = pm.HalfNormal(f"{group}_sigma", 0.3)
                nu = pm.Gamma(f"{group}_nu", 2.0, 0.1)
                pm.StudentT(f"{group}_residual", nu=nu, mu=0.0, sigma=sigma,
                            observed=residual.to_numpy().ravel())
                se = sigma / np.sqrt(n_points)
            # the GPU effects integrated out: a GPU's mean is Normal(level, tau) plus its error
            pm.Normal(f"{group}_obs", mu=level, sigma=pm.math.sqrt(tau ** 2 + se ** 2),
                      observed=gpu_mean.to_numpy())
    return model


def fit(frame: pd.DataFrame, *, seed: int = 1, draws: int = 1000, tune: int = 1000,
        chains: int = 2, progressbar: bool = False):
    """NUTS draws of `build_model` (PyMC's sampler: the model is small) as InferenceData."""
    import pymc as pm

    from bayesblis.model.fitting import quiet_pymc_info

    with build_model(frame), quiet_pymc_info():
        return pm.sample(draws=draws, tune=tune, chains=chains, cores=1, random_seed=seed,
                         target_accept=0.95, progressbar=progressbar, compute_convergence_checks=False)


def diagnostics(idata) -> dict:
    """Largest r_hat, smallest bulk ESS, divergent transitions of a `fit`."""
    import arviz as az

    summary = az.summary(idata, kind="diagnostics")
    return {"r_hat_max": round(float(summary["r_hat"].max()), 4),
            "ess_bulk_min": int(summary["ess_bulk"].min()),
            "divergences": int(idata.sample_stats["diverging"].sum())}


def summarise(idata, frame: pd.DataFrame) -> dict:
    """{group: tau's mean, 5-95% interval and `new_gpu_sd`, mu, the link offset, GPUs}."""
    post = idata.posterior
    out = {}
    for group in sorted(frame["group"].unique()):
        tau = post[f"{group}_tau"].values.ravel()
        entry = {"gpus": sorted(frame.loc[frame["group"] == group, "gpu"].unique().tolist()),
                 "points_per_gpu": int(frame.loc[frame["group"] == group, "point"].nunique()),
                 "tau_mean": round(float(tau.mean()), 4),
                 "tau_90": [round(float(q), 4) for q in np.quantile(tau, [0.05, 0.95])],
                 "new_gpu_sd": round(float(np.sqrt(np.mean(tau ** 2))), 4),
                 "mu": round(float(post[f"{group}_mu"].values.mean()), 4)}
        if f"{group}_link_offset" in post:
            entry["link_offset"] = round(float(post[f"{group}_link_offset"].values.mean()), 4)
        out[group] = entry
    return out


def predict_new_gpu(idata, frame: pd.DataFrame, group: str, pcie: bool, rng) -> pd.DataFrame:
    """Predictive draws of a GPU the fit (of `frame`) never saw, at each of the group's
    points: [draws, points] log ratios (the points' effects, a fresh GPU effect, the error;
    for a PCIe GPU in a link group, the PCIe offset, from its prior if no PCIe GPU was fitted)."""
    post = idata.posterior.stack(sample=("chain", "draw"))
    _, point_effect, _ = decompose(frame[frame["group"] == group])
    n = post.sizes["sample"]
    level = post[f"{group}_mu"].values + post[f"{group}_tau"].values * rng.standard_normal(n)
    if pcie and f"{group}_link_offset" in post:
        level = level + post[f"{group}_link_offset"].values
    elif pcie and group in LINK_GROUPS:  # no PCIe GPU fitted: the offset's prior
        level = level + LINK_OFFSET_SD * rng.standard_normal(n)
    draws = level[:, None] + point_effect.to_numpy()[None, :]
    if f"{group}_sigma" in post:
        nu, sigma = post[f"{group}_nu"].values, post[f"{group}_sigma"].values
        draws = draws + sigma[:, None] * rng.standard_t(nu[:, None], size=draws.shape)
    return pd.DataFrame(draws, columns=point_effect.index)


def build(out=SPREAD_FILE, *, seed: int = 1, echo=print) -> dict:
    """Fit the packaged kernel prices' ratios and write the summary (atomically)."""
    import time

    from bayesblis.atomic import write_json
    from bayesblis.catalog import kernel_prices

    t0 = time.perf_counter()
    frame = log_ratios()
    idata = fit(frame, seed=seed)
    result = {"source": "bayesblis/catalog/kernel_prices.json: " + kernel_prices.catalog().get("source", ""),
              "model": __doc__.split("\n\n")[2].strip(), "prior_tau": PRIOR_TAU, "seed": seed,
              "diagnostics": diagnostics(idata), "groups": summarise(idata, frame),
              "wall_s": round(time.perf_counter() - t0, 1)}
    write_json(out, result)
    spread.cache_clear()
    echo(format_table(result))
    echo(f"wrote {out}")
    return result


@lru_cache(maxsize=1)
def spread() -> dict:
    """The packaged summary (``kernel_spread.json``)."""
    import json

    from bayesblis.errors import BayesBlisError

    try:
        return json.loads(SPREAD_FILE.read_text())
    except (OSError, ValueError) as exc:
        raise BayesBlisError(f"cannot read {SPREAD_FILE}: {exc} (rebuild it with "
                             f"python3 -m bayesblis.catalog.kernel_spread)") from exc


def new_gpu_sd(group: str) -> float:
    """Predictive log-scale sd of a GPU kernel-db lacks, in `group` (sqrt(E[tau^2]))."""
    return float(spread()["groups"][group]["new_gpu_sd"])


def catalog_name(gpu_name: str) -> str:
    """The GPU catalog's name for `gpu_name` (an alias such as "A100" resolves); the name
    itself for a GPU the catalog lacks."""
    from bayesblis.catalog.gpus import load_gpu
    from bayesblis.errors import BayesBlisError

    try:
        return load_gpu(gpu_name).name
    except BayesBlisError:  # not in the catalog
        return gpu_name


def kernel_measured(gpu_name: str) -> bool:
    """Whether kernel-db's tables (as `catalog.kernel_prices` ships them) measure the GPU."""
    from bayesblis.catalog import kernel_prices

    return kernel_prices.measures(catalog_name(gpu_name))


def hardware_scales(gpu_name: str) -> dict[str, float]:
    """{step coefficient: log-scale sd} of the GPU effect of a GPU the trace fit never saw.

    A coefficient whose feature carries the GPU's kernel-db price whole (`PRICED_GROUPS`):
    `HARDWARE_SCALE` (how far serving strays from the kernels). Compute, and every group on
    a GPU kernel-db lacks: that and the group's spread across GPUs (`new_gpu_sd`) in
    quadrature. Coefficients no group covers (overheads, request delays) keep the fit's own
    hardware scale."""
    from bayesblis.catalog import kernel_prices

    tables, name = kernel_prices.catalog(), catalog_name(gpu_name)
    priced = {group for kind, groups in PRICED_GROUPS.items() if name in tables.get(kind, {})
              for group in groups}
    return {feature: HARDWARE_SCALE if group in priced else float(np.hypot(HARDWARE_SCALE, new_gpu_sd(group)))
            for group, features in GROUP_FEATURES.items() for feature in features}


def gpu_metric_sd(gpu_name: str) -> float:
    """Log-scale sd every simulated metric of a GPU the fit never saw takes: `HARDWARE_SCALE`
    on a GPU kernel-db measures, `unmeasured_metric_sd` on one it lacks."""
    return HARDWARE_SCALE if kernel_measured(gpu_name) else unmeasured_metric_sd()


def unmeasured_metric_sd() -> float:
    """`HARDWARE_SCALE` with the spread of weight streaming across GPUs
    (`WEIGHT_STREAMING_GROUP`) in quadrature: a GPU kernel-db lacks."""
    return float(np.hypot(HARDWARE_SCALE, new_gpu_sd(WEIGHT_STREAMING_GROUP)))


def format_table(result: dict) -> str:
    """The summary as a table: one line per group."""
    lines = [f"{'group':<20}{'GPUs':>5}{'points':>8}{'tau mean':>10}{'tau 90%':>18}{'new GPU sd':>12}"]
    for group, g in result["groups"].items():
        lines.append(f"{group:<20}{len(g['gpus']):>5}{g['points_per_gpu']:>8}{g['tau_mean']:>10.3f}"
                     f"{'[%.3f, %.3f]' % tuple(g['tau_90']):>18}{g['new_gpu_sd']:>12.3f}")
    d = result["diagnostics"]
    lines.append(f"r_hat max {d['r_hat_max']}, ESS bulk min {d['ess_bulk_min']}, "
                 f"divergences {d['divergences']}; {result['wall_s']} s")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        sys.exit("usage: python3 -m bayesblis.catalog.kernel_spread (reads the packaged kernel prices)")
    build()
