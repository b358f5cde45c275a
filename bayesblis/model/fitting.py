"""One call from model data to a saved, diagnosed posterior (used by the CLI, demo, validate)."""

from __future__ import annotations

import contextlib
import logging
import warnings

from bayesblis.model.data import ModelData


def load_prior_overrides(path) -> dict:
    """Prior overrides from a YAML or JSON file."""
    from bayesblis.io.mapping_file import read_mapping

    return read_mapping(path, expected="{beta: {...}, alpha: {...}, hyper: {...}}")


def describe_data(data: ModelData) -> str:
    counts = data.obs.groupby(["config", "kind"]).size().unstack(fill_value=0)
    return f"{len(data.configs)} configurations, {len(data.obs)} observations\n{counts.to_string()}"


def fit_and_save(data: ModelData, out_path, *, method="nuts", priors=None, sampler_config=None,
                 echo=print, progressbar=None):
    """Build, fit, diagnose and save; return the fitted LatencyModel (``progressbar=None``:
    progress displays only for a person at a terminal, `console.show_progress`).

    The diagnostics are echoed as one block (PASS/FAIL and every failed threshold), so the
    `DiagnosticsWarning` that says the same is not shown again, and PyMC's INFO line
    listing the variables of the prior predictive is kept out of the output."""
    from bayesblis.model.bounds import format_bound_report
    from bayesblis.model.diagnostics import DiagnosticsWarning, format_diagnostics
    from bayesblis.model.hierarchy import LatencyModel
    from bayesblis.model.store import save_posterior

    if progressbar is None:
        from bayesblis.console import show_progress

        progressbar = show_progress()
    echo(describe_data(data))
    model = LatencyModel(priors=priors, sampler_config=sampler_config)
    if method == "summary":
        model.build_model(data, likelihood="summary",
                          progress=_summary_progress if progressbar else None)
    else:
        model.build_model(data)
    with quiet_pymc_info():
        model.sample_prior_predictive(samples=100)
    cfg = model.sampler_config
    if cfg.get("max_draws") and cfg["max_draws"] > cfg["draws"] and method in ("nuts", "summary"):
        echo(f"fitting with {method}: {cfg['draws']} draws per chain, then more until the "
             f"diagnostics pass (at most {cfg['max_draws']}) ...")
    else:
        echo(f"fitting with {method} ...")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DiagnosticsWarning)
        model.fit(method=method, progressbar=progressbar)
    checks = model.fit_info.get("draw_checks")
    if checks and len(checks) > 1:
        echo("draws per chain checked: " + ", ".join(
            f"{c['draws']} " + ("pass" if c["passed"] else f"({'; '.join(c['problems'])})")
            for c in checks))
    echo(format_diagnostics(model.fit_info["diagnostics"]))
    echo(format_bound_report(model.fit_info["physical_bounds"]))
    compile_s = model.fit_info.get("compile_s") or 0.0
    echo(f"fit took {model.fit_info['wall_s']:.1f} s"
         + (f" (nutpie's compile step {compile_s:.1f} s)" if compile_s else ""))
    if out_path is not None:
        save_posterior(model, out_path)
        echo(f"wrote {out_path}")
    return model


def _summary_progress(done: int, total: int) -> None:
    import sys

    end = "\n" if done == total else ""
    print(f"\rsummarising each configuration's likelihood: {done}/{total}", end=end,
          file=sys.stderr, flush=True)


@contextlib.contextmanager
def quiet_pymc_info():
    """PyMC logs its sampling plans at INFO ("Sampling: [...]"); keep WARNING and above."""
    logger = logging.getLogger("pymc")
    level = logger.level
    logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(level)
