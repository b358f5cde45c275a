"""Save and load a fitted model as one NetCDF file.

The file is an ArviZ InferenceData; its `posterior` group carries, as attributes, the
model version, the model config (priors, features), the configuration table, fit
diagnostics and the package versions that wrote it. `load_posterior` refuses a file of
another model version.

No draws per observation are stored (`without_observation_draws`): the per-observation
mean ``mean_s``, prior predictive ``y_obs`` and the model's data arrays are draws x
observations numbers (255 MB for 2 x 2,000 draws of 8,000 observations) that the stored
coefficients and the observation table (group `OBS_GROUP`) give back when needed
(`bayesblis.ppc` rebuilds the model and recomputes them). Such variables in a file
written before are dropped on load without being read.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import arviz as az
import numpy as np
import pandas as pd
import xarray as xr

from bayesblis.atomic import atomic_path
from bayesblis.constants import DIM_OBS, MODEL_VERSION
from bayesblis.errors import BayesBlisError, InputError, ModelVersionError

_ATTR_PREFIX = "bayesblis_"
OBS_GROUP = "bayesblis_observations"
"""InferenceData group holding the fitted observation table (one variable per column over
`obs`), so posterior-predictive checks can rebuild the model (`bayesblis check`)."""
_PACKAGES = ("bayesblis", "pymc", "pytensor", "arviz", "nutpie", "numpy", "pandas", "xarray")


def package_versions() -> dict:
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


@dataclass
class Posterior:
    """A loaded fit: draws plus everything needed to interpret them."""

    idata: object
    configs: pd.DataFrame
    beta_features: list
    alpha_features: list
    priors: dict
    fit_info: dict = field(default_factory=dict)
    versions: dict = field(default_factory=dict)
    path: str | None = None
    data: object = None
    """The fitted `ModelData` (configs + observation table) when the file stores it
    (group `bayesblis_observations`), else None."""

    @classmethod
    def of_fit(cls, fit) -> "Posterior":
        """A view over an in-memory fit (a fitted `LatencyModel` or a `Calibration`: anything
        with idata, data, beta/alpha_features, priors and fit_info), for
        `coefficients.coefficient_draws` and the simulator without a file."""
        return cls(idata=fit.idata, configs=fit.data.configs, beta_features=fit.beta_features,
                   alpha_features=fit.alpha_features, priors=fit.priors, fit_info=fit.fit_info,
                   data=fit.data)

    def config_row(self, key: str):
        match = self.configs[self.configs["config"] == key]
        return None if match.empty else match.iloc[0]


def save_posterior(model, path) -> Path:
    """Write `model` (a fitted LatencyModel) to `path` atomically; return the path."""
    if model.idata is None or "posterior" not in model.idata.groups():
        raise BayesBlisError("nothing to save: the model has no posterior (call fit() first)")
    path = Path(path)
    attrs = {
        "model_version": MODEL_VERSION,
        "model_config": model.model_config_json(),
        "configs": model.data.configs.to_json(orient="records"),
        "fit_info": json.dumps(model.fit_info, default=str),
        "versions": json.dumps(package_versions()),
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    idata = without_observation_draws(model.idata)
    for key, value in attrs.items():
        idata.posterior.attrs[_ATTR_PREFIX + key] = value
    if (OBS_GROUP not in idata.groups() and getattr(model, "data", None) is not None
            and len(model.data.obs)):  # a calibration on no data keeps no table
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a group outside ArviZ's scheme
            idata.add_groups({OBS_GROUP: observation_dataset(model.data.obs)})
    with atomic_path(path) as tmp:
        idata.to_netcdf(str(tmp), engine="h5netcdf")
    return path


def load_posterior(path) -> Posterior:
    """Read a posterior written by `save_posterior`; refuse other model versions."""
    path = Path(path)
    expected = "a POSTERIOR.nc written by `bayesblis fit` or `calibrate`"
    if not path.exists():
        raise InputError(path, "posterior file not found", expected=expected)
    try:
        idata = az.from_netcdf(str(path), engine="h5netcdf")
    except Exception as exc:  # h5py/netCDF raise many types for a non-NetCDF file
        raise InputError(path, f"not a NetCDF posterior file ({type(exc).__name__}: {exc})",
                         expected=expected) from exc
    if "posterior" not in idata.groups():
        raise InputError(path, "no posterior group", field="posterior", expected=expected)
    idata = without_observation_draws(idata)  # files written before kept mean_s draws
    attrs = idata.posterior.attrs
    version = attrs.get(_ATTR_PREFIX + "model_version")
    if version is None:
        raise InputError(path, "not written by bayesblis", field=_ATTR_PREFIX + "model_version",
                         expected=expected)
    if str(version) != MODEL_VERSION:
        raise ModelVersionError(
            f"{path}: written by model version {version}, this bayesblis reads version "
            f"{MODEL_VERSION}; refit with this version")
    config = json.loads(attrs[_ATTR_PREFIX + "model_config"])
    configs = pd.DataFrame(json.loads(attrs[_ATTR_PREFIX + "configs"]))
    data = None
    if OBS_GROUP in idata.groups():
        from bayesblis.model.data import ModelData

        data = ModelData(configs=configs, obs=observation_table(getattr(idata, OBS_GROUP)))
    return Posterior(idata=idata, configs=configs, beta_features=config["beta_features"],
                     alpha_features=config["alpha_features"], priors=config["priors"],
                     fit_info=json.loads(attrs.get(_ATTR_PREFIX + "fit_info", "{}")),
                     versions=json.loads(attrs.get(_ATTR_PREFIX + "versions", "{}")),
                     path=str(path), data=data)


def without_observation_draws(idata):
    """`idata` without any variable over the observation dimension (``mean_s``, ``y_obs``
    and the data arrays ``X``, ``y_s``, ...) outside the observation table `OBS_GROUP`;
    groups left empty are dropped. Lazily loaded variables are dropped unread; the group
    attributes (`save_posterior`'s metadata) are kept."""
    groups = {}
    for name in idata.groups():
        dataset = getattr(idata, name)
        if name != OBS_GROUP:
            drop = [v for v in dataset.variables if DIM_OBS in dataset[v].dims]
            if drop:
                dataset = dataset.drop_vars(drop)
                if not dataset.data_vars:
                    continue
        groups[name] = dataset
    if len(groups) == len(idata.groups()) and all(
            groups[g] is getattr(idata, g) for g in groups):
        return idata
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # OBS_GROUP is outside ArviZ's scheme
        return az.InferenceData(**groups)


def observation_dataset(obs: pd.DataFrame) -> xr.Dataset:
    """The observation table as an xarray Dataset over `obs` (text columns as strings)."""
    columns = {}
    for name in obs.columns:
        values = obs[name]
        if values.dtype == object or isinstance(values.dtype, pd.CategoricalDtype) \
                or pd.api.types.is_string_dtype(values.dtype):
            values = values.astype(str).to_numpy(dtype=str)
        else:
            values = values.to_numpy()
        columns[str(name)] = (DIM_OBS, values)
    return xr.Dataset(columns, coords={DIM_OBS: np.arange(len(obs))})


def observation_table(dataset) -> pd.DataFrame:
    """Inverse of `observation_dataset`."""
    table = pd.DataFrame({name: np.asarray(dataset[name].values) for name in dataset.data_vars})
    for name in table.columns:
        if table[name].dtype.kind in "US":
            table[name] = table[name].astype(str).astype(object)
    return table


def describe_posterior(path) -> str:
    """A short text description of a posterior file (for `bayesblis inspect`)."""
    post = load_posterior(path)
    diag = post.fit_info.get("diagnostics", {})
    lines = [f"posterior {post.path}",
             f"  model version {MODEL_VERSION}, written with bayesblis "
             f"{post.versions.get('bayesblis')}, pymc {post.versions.get('pymc')}",
             f"  fit: {post.fit_info.get('method')} on {post.fit_info.get('n_obs')} window "
             f"observations, {post.fit_info.get('wall_s', float('nan')):.1f} s, diagnostics "
             + {True: "PASS", False: "FAIL", None: "n/a"}[diag.get("passed")],
             f"  {len(post.configs)} configurations:"]
    for _, row in post.configs.iterrows():
        lines.append(f"    {row['config']}  ({row['arch']}, family {row['model_family']})")
    lines.append(f"  beta features: {', '.join(post.beta_features)}")
    lines.append(f"  alpha features: {', '.join(post.alpha_features)}")
    return "\n".join(lines)
