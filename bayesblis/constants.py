"""Project-wide constants: dimension names, credible-interval probability, versions.

Dimension names never change meaning anywhere in the package (see data_specs/dims.md).
"""

CI_PROB = 0.90
"""Default probability mass of every credible interval the package reports."""

MODEL_VERSION = "17"
"""Bumped whenever the saved posterior layout or the model's meaning changes."""

# Dimension names (xarray / ArviZ).
DIM_OBS = "obs"
DIM_CONFIG = "config"
DIM_HARDWARE = "hardware"
DIM_FAMILY = "model_family"
DIM_ARCH = "arch"
DIM_FEATURE = "feature"
DIM_ALPHA_FEATURE = "alpha_feature"

ARCH_LEVELS = ("dense", "moe")

US = 1e-6
"""One microsecond in seconds: overhead features are counts times this, so their
coefficients read in microseconds."""

NS = 1e-9
"""One nanosecond in seconds (per-token, per-layer attention cost: coefficient in ns)."""
