"""BLIS against bayesblis's own simulator on the 16 shared runs, first stage.

For every run (inference-perf folder, recorded requests replayed, first stage only), the
same N posterior-predictive draws (`coefficients.posterior_draws`, as `simulate --draws N
--seed S`) go through

- bayesblis's simulator (`simulate.results.run_scenario`),
- BLIS with the bayesblis backend (`--latency-model bayesblis`, bayesblis-go files),
- BLIS with the trained-physics export (`--latency-model trained-physics`; the mapping
  `--mapping`: `slot` copies coefficients into BLIS's slots, `projection` fits BLIS's basis
  to the bayesblis step and request model, `bayesblis.blis_projection`),

and the median over draws of each stage-0 metric is compared (BLIS / bayesblis - 1).

    python3 benchmarks/blis_agreement.py --posterior /tmp/w/posterior.nc \
        --blis-src ../shared/blis/src --work /tmp/blis/agreement --draws 8 \
        --out benchmarks/results/blis_agreement.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

METRICS = ("ttft_mean_s", "itl_mean_s", "e2e_mean_s")
RUNS = Path(__file__).resolve().parents[2] / "shared" / "data" / "real" / "h100-inference-perf"
MODEL_CONFIGS = Path(__file__).resolve().parents[2] / "shared" / "data" / "model_configs"


def one_run(folder: Path, post, binary: Path, work: Path, n_draws: int, seed: int,
            mappings: list[str], all_stages: bool = False, variants=()) -> dict:
    from bayesblis.blis_export import write_go_files, write_trained_physics_files
    from bayesblis.blis_run import blis_model_name, blis_result
    from bayesblis.coefficients import posterior_draws
    from bayesblis.simulate.results import Draws, run_scenario
    from bayesblis.simulate.scenario import load_scenario

    sc = load_scenario(folder, hardware="H100-SXM", replay=True, seed=seed)
    dep = sc.deployment()
    cfg = sc.engine_config(dep)
    stage_end = None if all_stages else sc.build_workload().stage_bounds_s[0][1]
    cd = posterior_draws(post, dep, n_draws, seed=seed)
    draws = Draws.from_coefficient_draws(cd, source="posterior")
    t0 = time.perf_counter()
    own = run_scenario(sc, draws, seed=seed, max_duration_s=stage_end, n_workers=1)
    wall_own = time.perf_counter() - t0
    out = {"run": folder.name, "config": dep.config_key, "n_requests": own["stages"][0]["n_requests"],
           "draws": n_draws, "bayesblis": _medians(own), "bayesblis_wall_s": round(wall_own, 2)}
    rd = work / folder.name
    go_files = write_go_files(rd / "coefficients.json", dep, cd.beta, cd.alpha, cd.noise_sigma,
                              cd.noise_nu, engine_config=cfg, seed=seed)
    t0 = time.perf_counter()
    res = blis_result(binary, sc, go_files, kind="bayesblis", out_dir=rd / "backend",
                      max_duration_s=stage_end)
    out["blis_backend"] = _medians(res)
    out["blis_backend_wall_s"] = round(time.perf_counter() - t0, 2)
    for variant in variants:   # the backend without one of its emulations: the gap it closes
        switch = {"no_async": "async_scheduling", "no_api_return": "api_return_delay"}[variant]
        files = []
        for f in go_files:
            rec = json.loads(f.read_text()) | {switch: False}
            path = rd / variant / f.name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(rec))
            files.append(path)
        res = blis_result(binary, sc, files, kind="bayesblis", out_dir=rd / variant,
                          max_duration_s=stage_end, keep_engine=True)
        out[f"blis_backend_{variant}"] = _medians(res)
    for mapping in mappings:
        fn = None
        if mapping == "projection":
            from bayesblis.blis_projection import BlisShape, projection_mapping

            name = blis_model_name(dep, "trained-physics").split("/")[-1]
            shape = BlisShape.from_hf_config(MODEL_CONFIGS / name / "config.json",
                                             binary.parent / "src" / "hardware_config.json",
                                             "H100", dep.tp)
            fn = projection_mapping(sc, cfg, seed=seed, max_duration_s=stage_end, shape=shape)
        files = write_trained_physics_files(rd / f"tp-{mapping}.yaml", dep, cd.beta, cd.alpha,
                                            mapping=fn)
        name = blis_model_name(dep, "trained-physics").split("/")[-1]
        res = blis_result(binary, sc, files, kind="trained-physics", out_dir=rd / f"tp-{mapping}",
                          max_duration_s=stage_end, model_config_folder=MODEL_CONFIGS / name,
                          hardware_config=binary.parent / "src" / "hardware_config.json")
        out[f"blis_tp_{mapping}"] = _medians(res)
    for key in [k for k in out if k.startswith("blis_") and not k.endswith("_s")]:
        out[f"{key}_rel"] = {m: (out[key][m] / out["bayesblis"][m] - 1
                                 if out[key][m] and out["bayesblis"][m] else None) for m in METRICS}
    return out


def _medians(result: dict) -> dict:
    st = result["stages"][0]
    out = {m: st[m]["median"] for m in METRICS} | {"saturated_share": st.get("saturated_share")}
    for s in result["stages"][1:]:   # --all-stages: later stages, suffixed
        out |= {f"{m}_stage{s['stage']}": s[m]["median"] for m in METRICS}
        out[f"saturated_share_stage{s['stage']}"] = s.get("saturated_share")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--posterior", required=True)
    ap.add_argument("--blis", type=Path, help="BLIS binary with the bayesblis backend")
    ap.add_argument("--blis-src", type=Path, help="or a BLIS checkout to build it from")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--draws", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", nargs="*", default=None, help="run folder names (default: all 16)")
    ap.add_argument("--mapping", nargs="*", default=["slot"], choices=["slot", "projection"])
    ap.add_argument("--variants", nargs="*", default=[], choices=["no_async", "no_api_return"],
                    help="also the backend without that emulation (the gap it closes)")
    ap.add_argument("--all-stages", action="store_true",
                    help="every stage (saturation at the second), not only the first")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    from bayesblis.blis_run import build_blis
    from bayesblis.model.store import load_posterior

    a.work.mkdir(parents=True, exist_ok=True)
    binary = a.blis or build_blis(a.blis_src, a.work)
    post = load_posterior(a.posterior)
    folders = sorted(p for p in RUNS.iterdir() if p.is_dir())
    if a.runs:
        folders = [f for f in folders if f.name in a.runs]
    rows = []
    if a.out.exists():  # resume: keep finished runs
        rows = [r for r in json.loads(a.out.read_text()).get("runs", [])
                if r["run"] in {f.name for f in folders}]
    done = {r["run"] for r in rows}
    for folder in folders:
        if folder.name in done:
            continue
        t0 = time.perf_counter()
        row = one_run(folder, post, binary, a.work, a.draws, a.seed, a.mapping, a.all_stages, a.variants)
        rows.append(row)
        print(f"{folder.name:<52} " + "  ".join(
            f"{k[5:-4]} " + " ".join(f"{m[:-7]} {v:+.2%}" for m, v in row[k].items() if v is not None)
            for k in row if k.endswith("_rel")) + f"  ({time.perf_counter() - t0:.0f} s)", flush=True)
        _write(a.out, rows, a)
    _write(a.out, rows, a)


def _write(path: Path, rows: list, a) -> None:
    summary = {}
    for key in sorted({k for r in rows for k in r if k.endswith("_rel")}):
        summary[key] = {m: float(np.nanmax([abs(r[key][m]) for r in rows if r[key][m] is not None]))
                        for m in METRICS}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"what": "BLIS / bayesblis - 1 of the median over draws, first stage",
                                "posterior": str(a.posterior), "draws": a.draws, "seed": a.seed,
                                "max_abs_rel": summary, "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
