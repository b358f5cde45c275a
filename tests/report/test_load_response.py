"""Load response on a synthetic fleet (bayesblis.load_response): the demo posterior's fleet,
its held-out run replayed stage by stage, measured vs true vs predicted."""

from __future__ import annotations

import pytest

from bayesblis.load_response import CURVE_METRICS, curve_errors, format_curves, stage_curve
from bayesblis.synth import Fleet


@pytest.fixture(scope="module")
def curve(demo_dir, posterior):
    fleet = Fleet.load(demo_dir / "fleet")
    name = fleet.configs.loc[fleet.configs["heldout"], "name"].iloc[0]
    return fleet, stage_curve(fleet, name, posterior, n_draws=8, n_true=4)


def test_stage_curve_has_every_stage_and_metric(curve):
    fleet, c = curve
    assert not c["seen"] and c["config"] in fleet.heldout_configs
    assert len(c["stages"]) == len(fleet.spec.load_levels)
    rates = [s["rate_rps"] for s in c["stages"]]
    assert rates == sorted(rates)
    for s in c["stages"]:
        for m in CURVE_METRICS:
            assert s[f"{m}_lo"] <= s[f"{m}_pred"] <= s[f"{m}_hi"]
            assert s[f"{m}_measured"] > 0 and s[f"{m}_true"] > 0
    for m in CURVE_METRICS:
        assert set(c["rise"][m]) == {"measured", "true", "pred"}


def test_measured_stages_read_from_the_traces_agree_with_the_true_replay(curve):
    """The run's traces are its true coefficients plus step noise and a few outlier steps:
    the measured stage means must sit near the noise-free replay (a wrong TTFT or E2E
    definition, or stages matched to the wrong requests, would be far off). The outliers
    (0.5% of the steps stretched 3-10x) move a 20-second stage's mean TTFT by up to about
    20% (this fleet, model version 11: 37.4 ms measured against 31.6 ms replayed; 31.4 ms
    with the outliers left out)."""
    _, c = curve
    for s in c["stages"]:
        for m in CURVE_METRICS:
            assert s[f"{m}_measured"] == pytest.approx(s[f"{m}_true"], rel=0.25), (m, s)


def test_curve_errors_and_table(curve):
    _, c = curve
    for against in ("measured", "true"):
        e = curve_errors([c], "itl_mean_s", against)
        assert e["n_stages"] == len(c["stages"]) and 0 <= e["coverage"] <= 1
        assert e["median_abs_error"] >= 0
    table = format_curves([c], "itl_mean_s")
    assert "(held out)" in table and "rise" in table
    assert table.count("\n") == len(c["stages"]) + 2
