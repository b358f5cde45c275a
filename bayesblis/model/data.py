"""What the model is fitted to: window observations and the configurations they come from.

One observation table. Each row is a measured duration ``y_s`` (seconds) that the model
explains as ``f . beta[config] + a . alpha[config]``:

- ``f_<feature>`` columns: summed beta features of the ``n_steps`` engine steps inside
  the window (0 steps for a pure request-level delay);
- ``a_<feature>`` columns: alpha features of the request-level delays inside it (absent
  or 0 for a pure step window);
- ``run`` (optional, default ``source`` or ``config``): the traced experiment it belongs to;
- ``kind``: where the window comes from (``step_gap``, ``decode_window``, ``ttft``,
  ``arrival_to_queue``, ``post_decode``, ...): each kind has its own error term.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from bayesblis.errors import InputError

CONFIG_COLUMNS = ("config", "model", "model_family", "arch", "hardware", "tp", "ep", "dtype")
"""Columns of the configuration table; `config` is the unique key."""


def config_key(model: str, hardware: str, tp: int, ep: int = 1, dtype: str = "bf16") -> str:
    """The configuration key: what one set of per-configuration coefficients belongs to."""
    return f"{model}|{hardware}|tp{int(tp)}|ep{int(ep)}|{dtype}"


def tp_of(key: str) -> int:
    """The tensor-parallel degree in a `config_key`."""
    return int(key.split("|")[2][2:])


@dataclass
class ModelData:
    """Configurations plus the observation table (see module docstring)."""

    configs: pd.DataFrame
    obs: pd.DataFrame

    def __post_init__(self):
        self.configs = self.configs.reset_index(drop=True)
        missing = [c for c in CONFIG_COLUMNS if c not in self.configs.columns]
        if missing:
            raise InputError(None, "configuration table is incomplete", field=missing[0],
                             expected=f"columns {list(CONFIG_COLUMNS)}")
        if self.configs["config"].duplicated().any():
            dup = self.configs.loc[self.configs["config"].duplicated(), "config"].iloc[0]
            raise InputError(None, f"configuration '{dup}' is listed twice", field="config")
        order = {key: i for i, key in enumerate(self.configs["config"])}
        obs = self.obs.assign(_cfg=self.obs["config"].map(order)).sort_values(
            "_cfg", kind="stable").drop(columns="_cfg").reset_index(drop=True)
        if len(obs) == 0:
            raise InputError(None, "no observations to fit", field="obs")
        if "kind" not in obs.columns:
            obs["kind"] = "window"
        if "n_steps" not in obs.columns:
            obs["n_steps"] = 1
        if "run" not in obs.columns:
            obs["run"] = obs["source"] if "source" in obs.columns else obs["config"]
        self.obs = obs
        unknown = set(obs["config"]) - set(order)
        if unknown:
            raise InputError(None, "observations name configurations not in the table: "
                             f"{sorted(unknown)[:3]}", field="config")
        for column in ["y_s", "n_steps", *self.feature_columns(obs, "f_"),
                       *self.feature_columns(obs, "a_")]:
            values = obs[column].to_numpy(float)
            bad = ~np.isfinite(values) | (values < 0) | ((values == 0) & (column == "y_s"))
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                raise InputError(None, "observation has a negative or non-finite value",
                                 record=row, field=column,
                                 expected="a finite value >= 0 (durations > 0 s)")

    @staticmethod
    def feature_columns(table: pd.DataFrame, prefix: str) -> list[str]:
        return [c for c in table.columns if c.startswith(prefix)]

    def alpha_matrix(self, features: list[str]) -> np.ndarray:
        """[observation, feature] alpha feature values (columns ``a_<feature>``), 0 where
        the table has no such column."""
        obs = self.obs
        return np.column_stack([obs[f"a_{f}"].to_numpy(float) if f"a_{f}" in obs
                                else np.zeros(len(obs)) for f in features])

    def has_repeated_runs(self) -> bool:
        """True when some configuration was traced in more than one run."""
        return bool((self.obs.groupby("config")["run"].nunique() > 1).any())

    def repeated_runs(self) -> list[str]:
        """Sorted runs of the configurations traced in more than one run: the only runs
        with an effect of their own (a lone run's effect is its configuration's)."""
        per_config = self.obs.groupby("config")["run"].nunique()
        repeated = self.obs["config"].map(per_config) > 1
        return sorted(self.obs.loc[repeated, "run"].astype(str).unique())

    def run_slots(self, runs: list[str]) -> np.ndarray:
        """Index of each observation's run in `runs`; ``len(runs)`` for any other run."""
        lookup = {r: i for i, r in enumerate(runs)}
        return self.obs["run"].astype(str).map(lookup).fillna(len(runs)).to_numpy(np.int64)

    def run_centring(self, runs: list[str], weight: np.ndarray | None = None) -> np.ndarray:
        """[run, run] matrix ``A`` with ``(A @ z)[r]`` the mean of ``z`` over the runs of
        run r's configuration: ``z - A @ z`` sums to zero within each configuration. With
        observation weights, the mean is over the runs that keep a positive weight (a
        held-out run neither counts nor anchors its configuration)."""
        obs = self.obs.assign(run=self.obs["run"].astype(str))
        if weight is not None:
            kept = set(obs.loc[np.asarray(weight) > 0, "run"])
        else:
            kept = set(obs["run"])
        config_of = obs.drop_duplicates("run").set_index("run")["config"].astype(str)
        centring = np.zeros((len(runs), len(runs)))
        for r, run in enumerate(runs):
            peers = [s for s, other in enumerate(runs)
                     if config_of[other] == config_of[run] and other in kept]
            if peers:
                centring[r, peers] = 1.0 / len(peers)
        return centring

    def kinds(self) -> list[str]:
        """Sorted distinct observation kinds."""
        return sorted(self.obs["kind"].astype(str).unique())

    def levels(self, column: str) -> list[str]:
        """Sorted distinct levels of a configuration column."""
        return sorted(self.configs[column].astype(str).unique())

    def index_of(self, table: pd.DataFrame) -> np.ndarray:
        """Configuration index (row of `configs`) of every row of `table`."""
        lookup = {key: i for i, key in enumerate(self.configs["config"])}
        return table["config"].map(lookup).to_numpy(np.int64)

    def config_bounds(self) -> np.ndarray:
        """First observation row of each configuration, then the row count (`obs` is sorted
        by configuration: configuration c holds rows bounds[c]:bounds[c + 1])."""
        return np.searchsorted(self.index_of(self.obs), np.arange(len(self.configs) + 1))


def config_row(deployment) -> dict:
    """The configuration-table row of a `features.physics.Deployment`."""
    arch = deployment.model
    row = {"model": arch.name, "model_family": arch.family, "arch": arch.arch,
           "hardware": deployment.gpu.name, "tp": int(deployment.tp), "ep": int(deployment.ep),
           "dtype": str(deployment.dtype)}
    row["config"] = config_key(row["model"], row["hardware"], row["tp"], row["ep"], row["dtype"])
    return row
