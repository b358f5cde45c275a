"""Shared set-up of the analyst notebooks: one work folder, and the fleet, dataset and
posterior each notebook needs, regenerated when missing.

Every function is a thin wrapper over bayesblis's public API (the calls notebooks 01 and
02 show step by step), so notebooks 03 and 04 can run on their own: they reuse what 01
and 02 left in the work folder, or redo it with the same settings.

Work folder: ``$BAYESBLIS_NOTEBOOK_WORK`` if set, else
``<tempfile.gettempdir()>/bayesblis-notebooks``.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path

# Observation kinds fitted: the demo's (step gaps, decode windows, arrival -> queue and
# post-decode delays; `queue_to_first_token` windows are biased and left out).
from bayesblis.reconstruct import FIT_KINDS as KINDS


def work_dir() -> Path:
    """The folder the notebooks share (created if missing)."""
    env = os.environ.get("BAYESBLIS_NOTEBOOK_WORK")
    folder = Path(env) if env else Path(tempfile.gettempdir()) / "bayesblis-notebooks"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def fleet(preset: str = "tiny", seed: int = 0):
    """The synthetic fleet `preset` (bayesblis.synth), generated once per work folder."""
    from bayesblis.synth import Fleet, generate_fleet

    root = work_dir() / f"fleet-{preset}-seed{seed}"
    if (root / "fleet.json").is_file() and (root / "truth.json").is_file():
        try:
            return Fleet.load(root)
        except Exception:  # noqa: BLE001 - an older or partial folder: regenerate
            pass
    return generate_fleet(preset, root, seed=seed, progress=False)


def dataset(fl):
    """The ingested training runs of fleet `fl` (bayesblis.io.dataset), saved beside it."""
    from bayesblis.io.dataset import Dataset, ingest

    folder = fl.root.parent / f"{fl.root.name}-dataset"
    if (folder / "manifest.json").is_file():
        try:
            return Dataset.load(folder)
        except Exception:  # noqa: BLE001 - written by another version: ingest again
            pass
    ds = ingest([fl.root / "runs"])
    ds.save(folder)
    return ds


def model_data(ds, max_obs_per_config: int, seed: int = 0):
    """Window observations of `ds` (bayesblis.design.build_model_data), the demo's kinds."""
    from bayesblis.design import build_model_data

    return build_model_data(ds, kinds=list(KINDS), max_obs_per_config=max_obs_per_config,
                            seed=seed)


def sampler_config(draws: int, chains: int, max_treedepth: int, seed: int) -> dict:
    """NUTS settings of the notebooks (tuning steps: as many as draws; nutpie on the JAX
    backend, which compiles in seconds where numba takes about a minute)."""
    return {"draws": draws, "tune": draws, "chains": chains, "max_treedepth": max_treedepth,
            "seed": seed + 1, "nuts_backend": "jax"}


def posterior_path(preset: str, seed: int, draws: int, chains: int, max_obs_per_config: int,
                   max_treedepth: int) -> Path:
    """Where notebook 02 saves the fit made with these settings."""
    return work_dir() / (f"posterior-{preset}-seed{seed}-d{draws}x{chains}"
                         f"-obs{max_obs_per_config}-depth{max_treedepth}.nc")


def fit(md, draws: int, chains: int, max_treedepth: int, seed: int = 0):
    """Build and fit a `LatencyModel` on `md` with nutpie NUTS; returns the model."""
    from bayesblis.model.hierarchy import LatencyModel

    model = LatencyModel(sampler_config=sampler_config(draws, chains, max_treedepth, seed))
    model.build_model(md)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # failed diagnostics are reported, not warned
        model.fit(method="nuts", progressbar=False)
    return model


def posterior(preset: str = "tiny", seed: int = 0, *, draws: int, chains: int,
              max_obs_per_config: int, max_treedepth: int):
    """The posterior notebook 02 saved with these settings (`load_posterior`), or a new
    fit with the same settings when there is none (or it cannot be read)."""
    from bayesblis.errors import BayesBlisError
    from bayesblis.model.store import load_posterior, save_posterior

    path = posterior_path(preset, seed, draws, chains, max_obs_per_config, max_treedepth)
    if path.is_file():
        try:
            return load_posterior(path)
        except BayesBlisError as exc:  # e.g. another model version: refit
            print(f"refitting: {exc}")
    fl = fleet(preset, seed)
    md = model_data(dataset(fl), max_obs_per_config, seed)
    print(f"no saved fit at {path}: fitting now ({len(md.obs)} observations, "
          f"{chains} chains x {draws} draws)")
    model = fit(md, draws, chains, max_treedepth, seed)
    save_posterior(model, path)
    return load_posterior(path)
