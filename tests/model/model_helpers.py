"""Helpers shared by the model tests (imported by name: tests/model is on sys.path).

The generator lives in the package (`bayesblis.model.synthetic_steps`, also used by the
benchmarks); it is re-exported here for the tests."""

from bayesblis.model.synthetic_steps import FEATURES, LAYERS, synthetic_data  # noqa: F401
