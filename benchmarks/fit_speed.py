"""Fit speed: NUTS on a synthetic fleet of 24 configurations (issue #7, part 2).

Data: `bayesblis.model.synthetic_steps.synthetic_fleet` (3 GPUs x 4 families, dense and
MoE, x TP 1/2 = 24 configurations of single-step observations, 5% Student-t step noise).
One table of the largest size is generated; smaller sizes are its first n / 24 steps of
every configuration, so every size shares the same true coefficients.

Sections (each prints a table; medians of ``--reps`` repetitions where repeated):

1. Gradient cost: one log-density + gradient evaluation of the model nutpie samples
   (pytensor -> numba, the function nutpie calls), for 1e4 ... 1e6 observations (one
   compiled model, the data swapped in), and for the same tables reduced to windows.
2. Reduction check: NUTS on full data and on windows of k similar summed steps
   (`bayesblis.model.reduce.sum_similar_steps`) of the same table: per configuration
   and coefficient, |difference of posterior means| in full-data posterior sds and the
   ratio of 90% interval widths.
3. Fits: nutpie wall time per size and data form, compile time (pytensor -> numba, or
   JAX with ``--nuts-backend jax``) reported apart from sampling, diagnostics against
   `bayesblis.model.diagnostics`.
4. Backends: nutpie (numba) vs PyMC's JAX/numpyro NUTS on one table: gradient time,
   compile (JIT) time, sampling wall, min bulk ESS per second.

Targets (issue): 200k observations in <= 5 min wall on 2 cores with clean diagnostics
(r_hat <= 1.01, bulk/tail ESS >= 100 per chain, 0 divergences, E-BFMI >= 0.3); growth at
most linear in the observations.

Usage (from the repository root)::

    python3 benchmarks/fit_speed.py --quick     # 1e4..1e5, check on 5k steps, 100k as windows
    python3 benchmarks/fit_speed.py --check-n 5000 --cache /tmp/fit_cache
                                                # the recorded run: ~50 min at load 4-8 on 2 cores
    python3 benchmarks/fit_speed.py --full-200k # also NUTS on all 200k single steps
    python3 benchmarks/fit_speed.py --target-only --tune 300 --draws 1000 --max-treedepth 6 --nuts-backend jax
                                                # only NUTS on the 200k single steps (the recorded run)
    python3 benchmarks/fit_speed.py --backends-only   # only nutpie vs numpyro (section 4)
    python3 benchmarks/fit_speed.py --gradients-only  # only section 1, numba and JAX

``--cache DIR`` keeps every fit's result and reuses it when the run is started again.

Needs the ``bench`` extra for the numpyro comparison (``pip install -e .[bench]``; jax itself
is a dependency of the package, for ``--nuts-backend jax``).
Writes benchmarks/results/fit_speed.json (or --out).
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")  # 2 JAX chains

import argparse  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bayesblis.model.data import ModelData  # noqa: E402
from bayesblis.model.laplace import CHOICES as LAPLACE_CHOICES  # noqa: E402

SAMPLER = {"draws": 500, "tune": 500, "chains": 2, "store_obs_means": False, "seed": 1}
"""NUTS settings of every fit (the package defaults, without the per-observation means)."""

TARGET_WALL_S = 300.0
TARGET_N_OBS = 200_000
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "fit_speed.json"


# ----------------------------------------------------------------------------- data
def fleet(n_obs_max: int, seed: int = 0) -> ModelData:
    """The 24-configuration fleet with `n_obs_max` step observations."""
    from bayesblis.model.synthetic_steps import synthetic_fleet

    return synthetic_fleet(n_obs_max, seed=seed)[0]


def head_per_config(data: ModelData, n_obs: int) -> ModelData:
    """The first n_obs / n_configs observations of every configuration."""
    per = max(1, n_obs // len(data.configs))
    obs = data.obs.groupby("config", sort=False).head(per)
    return ModelData(data.configs, obs)


SIMILARITY = "seconds"
"""--similarity: how `sum_similar_steps` compares steps ("seconds" or "spread")."""


def reduce(data: ModelData, k: int) -> tuple[ModelData, float]:
    """(windows of k similar steps, seconds it took)."""
    from bayesblis.model.reduce import sum_similar_steps

    t0 = time.perf_counter()
    out = sum_similar_steps(data, k, similarity=SIMILARITY)
    return out, time.perf_counter() - t0


# ----------------------------------------------------------------------------- nutpie
def build(data: ModelData):
    """(LatencyModel built on `data`, build seconds)."""
    from bayesblis.model.hierarchy import LatencyModel

    t0 = time.perf_counter()
    lm = LatencyModel(sampler_config=SAMPLER)
    lm.build_model(data)
    return lm, time.perf_counter() - t0


def compile_nutpie(lm) -> float:
    """Compile the model for nutpie (pytensor -> numba, or jax with --nuts-backend jax);
    returns seconds."""
    t0 = time.perf_counter()
    lm.compile_nuts()
    return time.perf_counter() - t0


def time_calls(fn, reps: int, min_batch_s: float = 0.2) -> float:
    """Median seconds per call of `fn` over `reps` batches of calls (batch >= min_batch_s)."""
    fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-6)
    per_batch = max(1, int(min_batch_s / once))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(per_batch):
            fn()
        times.append((time.perf_counter() - t0) / per_batch)
    return statistics.median(times)


def data_arrays(lm, data: ModelData) -> dict:
    """The model's data variables for another table of the same configurations."""
    from bayesblis.model.hierarchy import EXACT_KINDS

    obs = data.obs
    # every kind here is exact (no error of its own): any exact kind's slot is equivalent
    assert set(obs["kind"]) <= EXACT_KINDS and set(lm.model.coords["kind"]) <= EXACT_KINDS
    xa = np.zeros((len(obs), len(lm.alpha_features)))
    X = np.ascontiguousarray(obs[[f"f_{f}" for f in lm.beta_features]].to_numpy(float))
    return {"X": X, "XA": xa,
            "n_steps": obs["n_steps"].to_numpy(float), "config_idx": data.index_of(obs),
            "config_bounds": data.config_bounds(),
            "kind_idx": np.zeros(len(obs), np.int64), "y_s": obs["y_s"].to_numpy(float)}


def gradient_curve(tables: dict, reps: int) -> list[dict]:
    """Seconds per log-density + gradient evaluation for each table (name -> ModelData).

    One model is built and compiled on the first table; the others are swapped into its
    shared data (same configurations and kinds, any number of rows).
    """
    first = next(iter(tables.values()))
    lm, _ = build(first)
    lm.sampler_config["nuts_backend"] = "numba"  # the data are swapped into its shared variables
    compile_s = compile_nutpie(lm)
    fn = lm._compiled.logp_func
    shared = {v.name: v for v in fn.get_shared()}
    point = np.zeros(lm._compiled.n_dim)
    rows = []
    for name, data in tables.items():
        for var, values in data_arrays(lm, data).items():
            if var in shared:  # (XA is not in a step-only model's log density)
                shared[var].set_value(values.astype(shared[var].get_value().dtype))
        logp, grad = fn(point)
        assert np.isfinite(logp) and np.all(np.isfinite(grad)), name
        per_call_s = time_calls(lambda: fn(point), reps)
        rows.append({"table": name, "n_rows": len(data.obs),
                     "n_steps": int(data.obs["n_steps"].sum()),
                     "grad_eval_ms": round(per_call_s * 1e3, 3),
                     "ns_per_row": round(per_call_s * 1e9 / len(data.obs), 1)})
        print(f"  {name:<22}{len(data.obs):>10,}{rows[-1]['n_steps']:>11,}"
              f"{per_call_s * 1e3:>12.3f}{rows[-1]['ns_per_row']:>11.1f}", flush=True)
    return [{"compile_s": round(compile_s, 1)}, *rows]


CACHE_DIR: Path | None = None
"""--cache: fit results are kept there by label and reused by a later run (resume)."""


def cached(fn):
    """Reuse a fit's result row from CACHE_DIR (same label and number of rows)."""
    import json

    def wrapper(data: ModelData, label: str, *args):
        if CACHE_DIR is None:
            return fn(data, label, *args)
        path = CACHE_DIR / f"{fn.__name__}-{label}-{len(data.obs)}.json".replace(" ", "_").replace(",", "")
        if path.is_file():
            print(f"  (cached: {path.name})")
            return json.loads(path.read_text())
        row = fn(data, label, *args)
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(row, default=float))
        return row

    return wrapper


@cached
def fit_nutpie(data: ModelData, label: str) -> dict:
    """Build, compile and sample with nutpie; timings, diagnostics and beta summary."""
    lm, build_s = build(data)
    compile_s = compile_nutpie(lm)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = lm.fit(method="nuts", progressbar=False)
    diag = lm.fit_info["diagnostics"]
    sample_s = lm.fit_info["wall_s"]
    stats = idata.sample_stats
    backend = "nutpie" if SAMPLER.get("nuts_backend", "numba") == "numba" else "nutpie-jax"
    out = {"label": label, "backend": backend, "n_rows": len(data.obs),
           "n_steps": int(data.obs["n_steps"].sum()), "build_s": round(build_s, 2),
           "compile_s": round(compile_s, 1), "sample_s": round(sample_s, 1),
           "grad_evals_draws": int(stats["n_steps"].sum()),
           "mean_tree_size": round(float(stats["n_steps"].mean()), 1),
           "share_draws_at_max_depth": round(float(stats["maxdepth_reached"].mean()), 4),
           "diagnostics": _diag_row(diag), "beta": beta_summary(idata),
           "laplace": lm.fit_info.get("laplace"),
           "sigma_step_mean": float(idata.posterior["sigma_step"].mean()),
           "nu_mean": float(idata.posterior["nu"].mean())}
    out["ess_bulk_per_s"] = round(diag["ess_bulk_min"] / sample_s, 2)
    return out


def _diag_row(diag: dict) -> dict:
    keys = ("r_hat_max", "ess_bulk_min", "ess_tail_min", "divergences", "e_bfmi_min", "passed",
            "problems")
    return {k: diag.get(k) for k in keys}


def beta_summary(idata, prob: float = 0.9) -> dict:
    """Posterior mean, sd and central `prob` interval of beta [config, feature]."""
    beta = idata.posterior["beta"].stack(sample=("chain", "draw")).transpose("config", "feature", "sample")
    draws = beta.values
    lo, hi = np.quantile(draws, [(1 - prob) / 2, (1 + prob) / 2], axis=-1)
    return {"config": [str(c) for c in beta["config"].values],
            "feature": [str(f) for f in beta["feature"].values],
            "mean": draws.mean(axis=-1).tolist(), "sd": draws.std(axis=-1).tolist(),
            "lo": lo.tolist(), "hi": hi.tolist()}


def compare_beta(reference: dict, other: dict) -> dict:
    """How far `other`'s beta posterior is from `reference`'s (same configs, features)."""
    mean_r, mean_o = np.array(reference["mean"]), np.array(other["mean"])
    sd_r = np.array(reference["sd"])
    width_r = np.array(reference["hi"]) - np.array(reference["lo"])
    width_o = np.array(other["hi"]) - np.array(other["lo"])
    shift = np.abs(mean_o - mean_r) / sd_r
    ratio = width_o / width_r
    inside = (np.array(other["lo"]) <= mean_r) & (mean_r <= np.array(other["hi"]))
    return {"mean_shift_sd_max": round(float(shift.max()), 3),
            "mean_shift_sd_median": round(float(np.median(shift)), 3),
            "width_ratio_median": round(float(np.median(ratio)), 3),
            "width_ratio_min": round(float(ratio.min()), 3),
            "width_ratio_max": round(float(ratio.max()), 3),
            "reference_means_inside_share": round(float(inside.mean()), 3)}


# ----------------------------------------------------------------------------- numpyro
def numpyro_trace_names(model) -> list[str]:
    """Variables the numpyro trace keeps: the same as nutpie's (`LatencyModel._trace_names`
    with ``store_obs_means=False``): free variables and deterministics but the
    per-observation ``mean_s``. Constant deterministics (the fixed level scales, e.g.
    ``beta_tau_arch``) are fine: PyMC's post-processing vmaps over chain and draw and so
    broadcasts them to (chain, draw, ...)."""
    return [v.name for v in model.free_RVs + model.deterministics if v.name != "mean_s"]


def numpyro_idata_kwargs(model) -> dict:
    """`idata_kwargs` for `sample_numpyro_nuts` on a model with a variable named like a
    sample stat.

    PyMC converts the numpyro trace with one ``az.from_dict(..., dims=<model dims>)`` for
    every group, so a model variable's dims also apply to a sample stat of the same name.
    `LatencyModel` has the data ``n_steps`` (dims ``obs``) and numpyro's ``num_steps`` is
    renamed to the stat ``n_steps`` (chain, draw): arviz then expects (chain, draw, obs) and
    fails with "different number of dimensions on data and dims: 2 vs 3". Clearing those
    names' dims keeps the stat (chain, draw); the constant data ``n_steps`` gets arviz's
    default dim name ``n_steps_dim_0`` instead of ``obs``.
    """
    stats = ("lp", "n_steps", "tree_depth", "energy", "step_size", "acceptance_rate",
             "diverging")  # PyMC's numpyro stats (pymc.sampling.jax._numpyro_stats_to_dict)
    clash = [n for n in stats if n in model.named_vars_to_dims]
    return {"log_likelihood": False, "dims": {n: [] for n in clash}}


def jax_gradient_time(model, reps: int) -> tuple[float, float]:
    """(JIT seconds, median seconds per call) of the model's log density + gradient
    compiled by JAX (PyMC's jaxified log density: the data are constants of the program)."""
    import jax
    from pymc.sampling.jax import get_jaxified_logp

    logp_fn = get_jaxified_logp(model, negative_logp=False)
    point = model.initial_point()
    x = [np.asarray(point[v.name]) for v in model.value_vars]
    grad = jax.jit(jax.value_and_grad(lambda xs: logp_fn(xs)))
    t0 = time.perf_counter()
    jax.block_until_ready(grad(x))
    jit_s = time.perf_counter() - t0
    return jit_s, time_calls(lambda: jax.block_until_ready(grad(x)), reps)


def gradients_only(args) -> int:
    """Section 1 alone on single steps, numba and JAX side by side (one run, same data)."""
    load0 = os.getloadavg()
    sizes = plan(args)["curve"]
    full = fleet(sizes[-1])
    tables = {f"steps {n:,}": head_per_config(full, n) for n in sizes}
    print(f"fit_speed --gradients-only: log-density + gradient per call, median of {args.reps}; "
          f"load average at start {load0[0]:.2f}")
    print(f"  {'table':<22}{'rows':>10}{'steps':>11}{'ms / eval':>12}{'ns / row':>11}   (numba)")
    curve = gradient_curve(tables, args.reps)
    print(f"  (numba compile, once: {curve[0]['compile_s']} s)")
    print(f"\n  {'table':<22}{'rows':>10}{'JIT s':>8}{'ms / eval':>12}{'ns / row':>11}"
          f"{'numba / JAX':>13}   (JAX)")
    for row, (name, data) in zip(curve[1:], tables.items()):
        lm, _ = build(data)
        jit_s, grad_s = jax_gradient_time(lm.model, args.reps)
        row.update(jax_jit_s=round(jit_s, 1), jax_grad_eval_ms=round(grad_s * 1e3, 3),
                   jax_ns_per_row=round(grad_s * 1e9 / len(data.obs), 1))
        ratio = row["grad_eval_ms"] / row["jax_grad_eval_ms"]
        print(f"  {name:<22}{len(data.obs):>10,}{jit_s:>8.1f}{grad_s * 1e3:>12.3f}"
              f"{row['jax_ns_per_row']:>11.1f}{ratio:>13.2f}", flush=True)
    slopes = {}
    for backend, key in (("numba", "grad_eval_ms"), ("jax", "jax_grad_eval_ms")):
        slopes[backend] = round(float(np.polyfit(np.log([r["n_rows"] for r in curve[1:]]),
                                                 np.log([r[key] for r in curve[1:]]), 1)[0]), 3)
    print(f"  growth exponent d log(time) / d log(rows): numba {slopes['numba']:.2f}, "
          f"JAX {slopes['jax']:.2f} (<= 1: at most linear)")
    finish({"benchmark": "fit_speed --gradients-only",
            "gradient_curve": {"numba_compile_s": curve[0]["compile_s"], "rows": curve[1:],
                               "loglog_slope": slopes}},
           args, load0, "fit_speed_gradients.json")
    return 0


@cached
def fit_numpyro(data: ModelData, label: str, reps: int) -> dict:
    """PyMC's JAX/numpyro NUTS on `data`: JAX gradient time, JIT compile, sampling wall."""
    from pymc.sampling.jax import sample_numpyro_nuts

    from bayesblis.model.diagnostics import diagnose

    lm, build_s = build(data)
    model = lm.model
    jit_s, grad_s = jax_gradient_time(model, reps)
    names = numpyro_trace_names(model)
    t0 = time.perf_counter()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = sample_numpyro_nuts(draws=SAMPLER["draws"], tune=SAMPLER["tune"],
                                    chains=SAMPLER["chains"], target_accept=0.9,
                                    random_seed=SAMPLER["seed"], chain_method="parallel",
                                    progressbar=False, var_names=names,
                                    idata_kwargs=numpyro_idata_kwargs(model),
                                    compute_convergence_checks=False)
    wall_s = time.perf_counter() - t0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        diag = diagnose(idata, "numpyro")
    stats = idata.sample_stats
    tree = stats["n_steps"] if "n_steps" in stats else stats.get("tree_size")
    out = {"label": label, "backend": "numpyro", "n_rows": len(data.obs),
           "n_steps": int(data.obs["n_steps"].sum()), "build_s": round(build_s, 2),
           "grad_jit_s": round(jit_s, 2), "grad_eval_ms": round(grad_s * 1e3, 3),
           "sample_s": round(wall_s, 1),
           "sampling_time_attr_s": round(float(idata.posterior.attrs.get("sampling_time", np.nan)), 1),
           "mean_tree_size": None if tree is None else round(float(tree.mean()), 1),
           "diagnostics": _diag_row(diag), "beta": beta_summary(idata)}
    out["ess_bulk_per_s"] = round(diag["ess_bulk_min"] / wall_s, 2)
    return out


# ----------------------------------------------------------------------------- printing
def print_fit(row: dict) -> None:
    d = row["diagnostics"]
    total_s = row.get("reduce_s", 0.0) + row["build_s"] + row.get("compile_s", 0.0) + row["sample_s"]
    row["total_wall_s"] = round(total_s, 1)
    compile_txt = f"{row['compile_s']:>9.1f}" if "compile_s" in row else f"{'in samp.':>9}"
    print(f"  {row['label']:<24}{row['backend']:<8}{row['n_steps']:>10,}{row['n_rows']:>9,}"
          f"{compile_txt}{row['sample_s']:>9.1f}{total_s:>9.1f}"
          f"{d['r_hat_max']:>7.3f}{d['ess_bulk_min']:>7.0f}{d['ess_tail_min']:>7.0f}"
          f"{d['divergences']:>5}{'  PASS' if d['passed'] else '  FAIL'}", flush=True)


FIT_HEADER = (f"  {'fit':<24}{'backend':<8}{'steps':>10}{'rows':>9}{'compile':>9}"
              f"{'sample':>9}{'total':>9}{'r_hat':>7}{'ESSb':>7}{'ESSt':>7}{'div':>5}  diag")


def print_compare(name: str, c: dict) -> None:
    print(f"  {name:<34}{c['mean_shift_sd_max']:>9.2f}{c['mean_shift_sd_median']:>9.2f}"
          f"{c['width_ratio_median']:>9.3f}{c['width_ratio_min']:>9.3f}{c['width_ratio_max']:>9.3f}"
          f"{c['reference_means_inside_share']:>9.3f}", flush=True)


# ----------------------------------------------------------------------------- main
def plan(args) -> dict:
    """Sizes and fits of a quick or full run."""
    if args.quick:
        return {"n_max": 100_000, "curve": [10_000, 30_000, 100_000], "check_n": 5_000,
                "check_k": [10], "target_k": 50, "big_k": None}
    return {"n_max": 1_000_000, "curve": [10_000, 30_000, 100_000, 200_000, 300_000, 1_000_000],
            "check_n": args.check_n, "check_k": [10, 50], "target_k": 50,
            "big_k": 250 if args.fit_1e6 else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="small sizes (smoke test; 21 min measured with another job on the 2 cores)")
    ap.add_argument("--reps", type=int, default=5, help="repetitions per timing (median)")
    ap.add_argument("--full-200k", action="store_true",
                    help="also fit all 200k single steps with NUTS (slow)")
    ap.add_argument("--check-n", type=int, default=20_000,
                    help="steps of the full-data fit the windows are checked against (full run)")
    ap.add_argument("--fit-1e6", action="store_true",
                    help="also fit all 1e6 steps as windows of 250 (full run only)")
    ap.add_argument("--no-numpyro", action="store_true", help="skip the JAX/numpyro comparison")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--cache", type=Path, default=None,
                    help="keep fit results in this folder and reuse them (resume a run)")
    ap.add_argument("--similarity", choices=("seconds", "spread"), default="seconds",
                    help="how steps are grouped into windows (bayesblis.model.reduce)")
    ap.add_argument("--draws", type=int, default=SAMPLER["draws"],
                    help="NUTS draws per chain after tuning")
    ap.add_argument("--tune", type=int, default=SAMPLER["tune"],
                    help="NUTS tuning iterations per chain (most gradient evaluations of a "
                         "fit are spent early in tuning)")
    ap.add_argument("--max-treedepth", type=int, default=None,
                    help="NUTS tree-depth cap (package default 10); 6 caps the long trees of "
                         "early tuning, the draws' share at the cap is recorded")
    ap.add_argument("--nuts-backend", choices=("numba", "jax"), default="numba",
                    help="how nutpie evaluates the log density in the fits (sections 3, target)")
    ap.add_argument("--laplace", choices=tuple(LAPLACE_CHOICES), default="auto",
                    help="Laplace preconditioning of NUTS (JAX backend; auto: from 20k rows)")
    ap.add_argument("--reference", action="store_true",
                    help="with --target-only: first fit without Laplace preconditioning and "
                         "compare (time ratio, beta posterior)")
    ap.add_argument("--reference-tune", type=int, default=300)
    ap.add_argument("--reference-draws", type=int, default=1000)
    ap.add_argument("--target-only", action="store_true",
                    help="only the target: NUTS on all 200k single steps (writes "
                         "fit_speed_200k.json unless --out)")
    ap.add_argument("--gradients-only", action="store_true",
                    help="only section 1 on single steps, numba and JAX side by side (writes "
                         "fit_speed_gradients.json unless --out)")
    ap.add_argument("--backends-only", action="store_true",
                    help="only section 4 on the --quick run's table (100k steps as windows of "
                         "50; writes fit_speed_backends.json unless --out)")
    args = ap.parse_args(argv)
    global CACHE_DIR, SIMILARITY
    CACHE_DIR, SIMILARITY = args.cache, args.similarity
    SAMPLER["tune"], SAMPLER["draws"] = args.tune, args.draws
    if args.max_treedepth is not None:
        SAMPLER["max_treedepth"] = args.max_treedepth
    SAMPLER["nuts_backend"] = args.nuts_backend
    SAMPLER["laplace"] = LAPLACE_CHOICES[args.laplace]
    if args.target_only:
        return target_only(args)
    if args.gradients_only:
        return gradients_only(args)
    if args.backends_only:
        return backends_only(args)
    p = plan(args)
    p["similarity"] = SIMILARITY
    load0 = os.getloadavg()
    print(f"fit_speed: {os.cpu_count()} CPUs, load average at start {load0[0]:.2f}; "
          f"NUTS {SAMPLER['chains']} chains x ({SAMPLER['tune']} tune + {SAMPLER['draws']} draws)")
    t0 = time.perf_counter()
    full = fleet(p["n_max"])
    print(f"generated {len(full.obs):,} steps of {len(full.configs)} configurations "
          f"in {time.perf_counter() - t0:.1f} s", flush=True)
    doc = {"benchmark": "fit_speed", "plan": p, "sampler": SAMPLER}

    # 1) gradient cost vs size
    print("\n1) log-density + gradient evaluation (nutpie's numba function), median of reps")
    print(f"  {'table':<22}{'rows':>10}{'steps':>11}{'ms / eval':>12}{'ns / row':>11}")
    tables = {f"steps {n:,}": head_per_config(full, n) for n in p["curve"]}
    for n in p["curve"]:
        for k in sorted({p["target_k"], *(p["check_k"])}):
            tables[f"windows k={k} of {n:,}"] = reduce(tables[f"steps {n:,}"], k)[0]
    curve = gradient_curve(tables, args.reps)
    print(f"  (compile of that model: {curve[0]['compile_s']} s)")
    steps_rows = [r for r in curve[1:] if r["table"].startswith("steps")]
    slope = np.polyfit(np.log([r["n_rows"] for r in steps_rows]),
                       np.log([r["grad_eval_ms"] for r in steps_rows]), 1)[0]
    print(f"  growth exponent d log(time) / d log(rows), single steps: {slope:.2f} (<= 1: at most linear)")
    doc["gradient_curve"] = {"compile_s": curve[0]["compile_s"], "rows": curve[1:],
                             "loglog_slope_steps": round(float(slope), 3)}

    # 2) + 3) fits: full data vs windows at the check size, then the targets
    print("\n2-3) NUTS fits (seconds; compile = pytensor -> numba, apart from sampling)")
    print(FIT_HEADER)
    fits = []
    check = head_per_config(full, p["check_n"])
    reference = fit_nutpie(check, f"steps {p['check_n']:,}")
    print_fit(reference)
    fits.append(reference)
    for k in p["check_k"]:
        windows, reduce_s = reduce(check, k)
        row = fit_nutpie(windows, f"k={k} of {p['check_n']:,}")
        row["reduce_s"] = round(reduce_s, 2)
        print_fit(row)
        fits.append(row)
    target_n = min(TARGET_N_OBS, p["n_max"])
    target_data = head_per_config(full, target_n)
    windows, reduce_s = reduce(target_data, p["target_k"])
    row = fit_nutpie(windows, f"k={p['target_k']} of {target_n:,}")
    row["reduce_s"] = round(reduce_s, 2)
    print_fit(row)
    fits.append(row)
    if p["big_k"]:
        windows, reduce_s = reduce(full, p["big_k"])
        row = fit_nutpie(windows, f"k={p['big_k']} of {len(full.obs):,}")
        row["reduce_s"] = round(reduce_s, 2)
        print_fit(row)
        fits.append(row)
    if args.full_200k:
        row = fit_nutpie(target_data, f"steps {target_n:,}")
        print_fit(row)
        fits.append(row)
    doc["fits"] = fits

    print(f"\n2) windows vs single steps, {p['check_n']:,} steps: beta[config, feature] "
          f"({len(reference['beta']['config'])} x {len(reference['beta']['feature'])})")
    print(f"  {'fit':<34}{'|dmean|/sd':>9}{'median':>9}{'w ratio':>9}{'min':>9}{'max':>9}{'in 90%':>9}")
    comparisons = {}
    for row in fits[1:1 + len(p["check_k"])]:
        comparisons[row["label"]] = compare_beta(reference["beta"], row["beta"])
        comparisons[row["label"]].update(
            sigma_step_ratio=round(row["sigma_step_mean"] / reference["sigma_step_mean"], 3),
            nu_mean=round(row["nu_mean"], 1), nu_mean_reference=round(reference["nu_mean"], 1))
        print_compare(row["label"], comparisons[row["label"]])
    print("  (|dmean|/sd: |mean(windows) - mean(steps)| / sd(steps); w ratio: 90% width "
          "windows / steps;\n   in 90%: share of step-fit means inside the windows' 90% interval)")
    for name, c in comparisons.items():
        print(f"  {name}: sigma_step mean ratio windows/steps {c['sigma_step_ratio']}, "
              f"nu mean {c['nu_mean']} vs {c['nu_mean_reference']} (tail shape is not kept)")
    doc["reduction_check"] = comparisons

    # 4) backends
    if not args.no_numpyro:
        label = f"k={p['target_k']} of {target_n:,}"
        nut = next(f for f in fits if f["label"] == label)
        grad = next(r for r in curve[1:] if r["table"] == f"windows {label}")
        doc["backends"] = compare_backends(reduce(target_data, p["target_k"])[0], label, nut,
                                           grad["grad_eval_ms"], args.reps)

    doc.update(targets(fits, target_n, p, slope))
    finish(doc, args, load0)
    return 0


def compare_backends(data: ModelData, label: str, nut: dict, nut_grad_ms: float,
                     reps: int) -> dict:
    """numpyro vs nutpie on the same table (the target fit's windows)."""
    print(f"\n4) backends on {label} ({len(data.obs):,} windows)")
    try:
        npy = fit_numpyro(data, label, reps)
    except Exception as exc:  # report why numpyro cannot fit the model
        print(f"  numpyro failed: {type(exc).__name__}: {exc}")
        return {"numpyro_error": f"{type(exc).__name__}: {exc}"}
    print(FIT_HEADER)
    print_fit(nut)
    print_fit(npy)
    print(f"  gradient: nutpie/numba {nut_grad_ms:.3f} ms, JAX {npy['grad_eval_ms']:.3f} ms "
          f"(JAX jit of logp+grad {npy['grad_jit_s']} s; numpyro's 'sample' includes its JIT)")
    print(f"  min bulk ESS per second of sampling: nutpie {nut['ess_bulk_per_s']}, "
          f"numpyro {npy['ess_bulk_per_s']}")
    print(f"  mean tree size (gradient evals per draw): nutpie {nut.get('mean_tree_size')}, "
          f"numpyro {npy.get('mean_tree_size')}; numpyro run without post-processing "
          f"{npy.get('sampling_time_attr_s')} s (its JIT included)")
    agree = compare_beta(nut["beta"], npy["beta"])
    print(f"  numpyro vs nutpie beta: max |dmean|/sd {agree['mean_shift_sd_max']}, width ratio "
          f"median {agree['width_ratio_median']}")
    npy.pop("beta")
    return {"table": label, "nutpie_grad_eval_ms": nut_grad_ms, "numpyro": npy,
            "numpyro_vs_nutpie_beta": agree}


def targets(fits: list, target_n: int, p: dict, slope: float) -> dict:
    """The issue's targets, met or not."""
    best = next(f for f in fits if f["label"] == f"k={p['target_k']} of {target_n:,}")
    met = best["total_wall_s"] <= TARGET_WALL_S and bool(best["diagnostics"]["passed"])
    print(f"\ntargets: {target_n:,} steps as windows of {p['target_k']}: total {best['total_wall_s']} s "
          f"(compile {best['compile_s']} s + sampling {best['sample_s']} s), diagnostics "
          f"{'PASS' if best['diagnostics']['passed'] else 'FAIL'} -> "
          f"{'met' if met else 'MISSED'} (<= {TARGET_WALL_S:.0f} s, clean diagnostics)")
    print(f"         gradient growth exponent {slope:.2f} -> {'met' if slope <= 1.05 else 'MISSED'} (at most linear)")
    return {"targets": {"n_obs": target_n, "wall_s": best["total_wall_s"], "wall_target_s": TARGET_WALL_S,
                        "diagnostics_passed": best["diagnostics"]["passed"], "met": met,
                        "growth_exponent": round(float(slope), 3), "growth_met": bool(slope <= 1.05)}}


def laplace_txt(row: dict) -> str:
    """', of which Laplace preconditioning N s (M gradients)' when the fit used it."""
    lap = row.get("laplace")
    return f", of which Laplace preconditioning {lap['wall_s']} s ({lap['n_evals']} gradients)" if lap else ""


def target_only(args) -> int:
    """NUTS on the 200k single steps of the fleet, nothing else (the issue's target); with
    --reference, first the same fit without Laplace preconditioning (--reference-tune /
    --reference-draws) in the same run: the wall-time ratio and how far the two beta
    posteriors are apart."""
    load0 = os.getloadavg()
    data = fleet(TARGET_N_OBS)
    print(f"fit_speed --target-only: {len(data.obs):,} steps of {len(data.configs)} configurations; "
          f"NUTS {SAMPLER['chains']} chains x ({SAMPLER['tune']} tune + {SAMPLER['draws']} draws); "
          f"load average at start {load0[0]:.2f}", flush=True)
    print(FIT_HEADER)
    fits, reference = [], None
    if args.reference:
        settings = dict(SAMPLER)
        SAMPLER.update(laplace=False, tune=args.reference_tune, draws=args.reference_draws)
        reference = fit_nutpie(data, f"no Laplace {args.reference_tune}+{args.reference_draws}")
        SAMPLER.clear()
        SAMPLER.update(settings)
        print_fit(reference)
        fits.append(reference)
    row = fit_nutpie(data, f"steps {len(data.obs):,}")
    print_fit(row)
    fits.append(row)
    met = row["total_wall_s"] <= TARGET_WALL_S and bool(row["diagnostics"]["passed"])
    print(f"\ntarget: {len(data.obs):,} single steps: total {row['total_wall_s']} s (compile "
          f"{row['compile_s']} s + sampling {row['sample_s']} s{laplace_txt(row)}), diagnostics "
          f"{'PASS' if row['diagnostics']['passed'] else 'FAIL'} -> "
          f"{'met' if met else 'MISSED'} (<= {TARGET_WALL_S:.0f} s, clean diagnostics); "
          f"{row['mean_tree_size']} gradients per draw, {100 * row['share_draws_at_max_depth']:.1f}% "
          f"of draws at the tree-depth cap {SAMPLER.get('max_treedepth', 10)}")
    doc = {"benchmark": "fit_speed --target-only", "sampler": SAMPLER, "fits": fits,
           "targets": {"n_obs": len(data.obs), "wall_s": row["total_wall_s"],
                       "wall_target_s": TARGET_WALL_S,
                       "diagnostics_passed": row["diagnostics"]["passed"], "met": met}}
    if reference is not None:
        same = compare_beta(reference["beta"], row["beta"])
        ratio = round(reference["total_wall_s"] / row["total_wall_s"], 2)
        print(f"against the unpreconditioned fit: {ratio}x faster in total; beta means moved by "
              f"a median {same['mean_shift_sd_median']} (max {same['mean_shift_sd_max']}) "
              f"posterior sd, 90% widths {same['width_ratio_min']}-{same['width_ratio_max']}x "
              f"(median {same['width_ratio_median']})")
        doc["versus_reference"] = {"wall_ratio": ratio, "beta": same}
    finish(doc, args, load0, "fit_speed_200k.json")
    return 0


def backends_only(args) -> int:
    """Section 4 alone: nutpie vs numpyro on 100k steps summed into windows of 50."""
    load0 = os.getloadavg()
    n, k = 100_000, 50
    label = f"k={k} of {n:,}"
    windows = reduce(fleet(n), k)[0]
    print(f"fit_speed --backends-only: {label} ({len(windows.obs):,} windows); NUTS "
          f"{SAMPLER['chains']} chains x ({SAMPLER['tune']} tune + {SAMPLER['draws']} draws); "
          f"load average at start {load0[0]:.2f}", flush=True)
    grad_ms = gradient_curve({f"windows {label}": windows}, args.reps)[1]["grad_eval_ms"]
    nut = fit_nutpie(windows, label)
    doc = {"benchmark": "fit_speed --backends-only", "sampler": SAMPLER,
           "backends": compare_backends(windows, label, nut, grad_ms, args.reps)}
    doc["fits"] = [nut]
    finish(doc, args, load0, "fit_speed_backends.json")
    return 0


def finish(doc: dict, args, load0, default_name: str = DEFAULT_OUT.name) -> None:
    """Write `doc` with the run's context to --out (default: results/`default_name`)."""
    from bayesblis import __version__
    from bayesblis.atomic import write_json

    for row in doc.get("fits", []):
        row.pop("beta", None)
    doc.update(package_version=__version__,
               created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               machine={"cpus": os.cpu_count(), "python": platform.python_version(),
                        "platform": platform.platform(), "load_average_start": load0,
                        "load_average_end": os.getloadavg()},
               command="python3 benchmarks/fit_speed.py" + " ".join(
                   [""] + [a for a in sys.argv[1:]]))
    out = args.out if args.out != DEFAULT_OUT else DEFAULT_OUT.with_name(default_name)
    write_json(out, doc)
    print(f"wrote {out}")


if __name__ == "__main__":
    raise SystemExit(main())
