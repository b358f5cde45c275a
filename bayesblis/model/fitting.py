"""One call from model data to a saved, diagnosed posterior (used by the CLI, demo, validate)."""

from __future__ import annotations

from bayesblis.model.data import ModelData


def load_prior_overrides(path) -> dict:
    """Prior overrides from a YAML or JSON file."""
    from bayesblis.io.mapping_file import read_mapping

    return read_mapping(path, expected="{beta: {...}, alpha: {...}, hyper: {...}}")


def describe_data(data: ModelData) -> str:
    counts = data.obs.groupby(["config", "kind"]).size().unstack(fill_value=0)
    return f"{len(data.configs)} configurations, {len(data.obs)} observations\n{counts.to_string()}"


def fit_and_save(data: ModelData, out_path, *, method="nuts", priors=None, sampler_config=None,
                 echo=print, progressbar=True):
    """Build, fit, diagnose and save; return the fitted LatencyModel."""
    from bayesblis.model.diagnostics import format_diagnostics
    from bayesblis.model.hierarchy import LatencyModel
    from bayesblis.model.store import save_posterior

    echo(describe_data(data))
    model = LatencyModel(priors=priors, sampler_config=sampler_config)
    model.build_model(data)
    model.sample_prior_predictive(samples=100)
    echo(f"fitting with {method} ...")
    model.fit(method=method, progressbar=progressbar)
    echo(format_diagnostics(model.fit_info["diagnostics"]))
    echo(f"fit took {model.fit_info['wall_s']:.1f} s")
    if out_path is not None:
        save_posterior(model, out_path)
        echo(f"wrote {out_path}")
    return model
