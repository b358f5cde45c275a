"""The HTML report: sections, figures, no network references; rendered in headless Chromium."""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path

import pytest

from bayesblis.errors import InputError
from bayesblis.report.html import SECTIONS, read_plan, write_report

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="session")
def report_path(posterior_path, plan_path, tmp_path_factory):
    from click.testing import CliRunner

    from bayesblis.cli import cli

    out = tmp_path_factory.mktemp("report") / "report.html"
    res = CliRunner().invoke(cli, ["report", str(posterior_path), "--plan", str(plan_path),
                                   "--out", str(out), "--draws", "60"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    return out


def test_report_has_every_section_and_no_network_reference(report_path, posterior):
    text = report_path.read_text(encoding="utf-8")
    for sid, heading in SECTIONS:
        assert f'<section id="{sid}"><h2>{heading}</h2>' in text
    # no external resources: every src/href is a data: URI or an in-page anchor
    refs = re.findall(r'(?:src|href)\s*=\s*"([^"]*)"', text)
    assert refs and all(r.startswith(("data:image/png;base64,", "#")) for r in refs)
    assert not re.search(r"https?://", text)
    assert "<script" not in text and "@import" not in text and "url(" not in text
    # one PPC figure per configuration plus shrinkage, coverage, Pareto k and plan
    n_cfg = len(posterior.configs)
    assert text.count('data-figure="ppc-') == n_cfg
    for name in ("shrinkage", "coverage", "pareto-k", "load-response", "plan", "latency"):
        assert f'data-figure="{name}"' in text
    for cfg in posterior.configs["config"]:
        assert cfg in text
    assert "tp=2" in text and "ttft_p90" in text  # the plan's options and SLOs
    # the prior predictive check, one row per configuration and kind
    assert 'data-table="prior-predictive"' in text
    table = text[text.index('data-table="prior-predictive"'):]
    table = table[:table.index("</table>")]
    assert table.count("<tr>") + table.count('<tr class="flag">') == 1 + len(
        posterior.configs) + posterior.data.obs.groupby("config")["kind"].nunique().sum()
    # the answer first: capacity, then latency, then trust, then the coefficients
    order = [text.index(m) for m in ('data-figure="plan"', 'data-figure="latency"',
                                     'id="diagnostics"', 'id="coefficients"')]
    assert order == sorted(order)


def test_report_without_plan_says_how_to_get_one(posterior, checked):
    from bayesblis.report.html import NO_PLAN, build_report

    text = build_report(posterior, check=checked)
    assert '<section id="plan">' not in text and NO_PLAN in text
    assert text.index(NO_PLAN) < text.index('<section id="diagnostics">')
    assert "Posterior-predictive check:" in text


def test_population_of_floored_coefficients_is_on_their_own_scale(posterior):
    """floor + exp(mu), like the configurations' floor + exp(theta), never below the floor."""
    import numpy as np

    from bayesblis.constants import DIM_FEATURE
    from bayesblis.report.figures import coefficient_floors, level_draws

    post = posterior.idata.posterior
    floor = coefficient_floors(posterior, "beta", DIM_FEATURE)
    assert floor.max() >= 1.0  # the compute coefficients are floored at the datasheet peak
    pop = level_draws(post, "beta", DIM_FEATURE, floor)[("population", "all")]
    raw = level_draws(post, "beta", DIM_FEATURE)[("population", "all")]
    np.testing.assert_allclose(pop, floor + raw)
    assert (pop[:, floor > 0] > floor[floor > 0]).all()
    features = [str(f) for f in post[DIM_FEATURE].values]
    if "decode_compute_s" in features:  # tied to prefill compute, as per configuration
        np.testing.assert_array_equal(pop[:, features.index("decode_compute_s")],
                                      pop[:, features.index("prefill_compute_s")])


def test_diagnostics_section_shows_thresholds_and_verdict(posterior):
    """The MCMC diagnostics table from a `diagnose` record (the demo fixture is ADVI, which
    has none: that path is checked too)."""
    from bayesblis.report.html import diagnostics_section

    diag = {"method": "nuts", "chains": 2, "draws": 50, "r_hat_max": 1.2345,
            "ess_bulk_min": 31.0, "ess_tail_min": 27.0, "divergences": 3, "e_bfmi_min": 0.52,
            "problems": ["r_hat max 1.234 > 1.01", "3 divergent transitions"], "passed": False}
    other = copy.copy(posterior)
    other.fit_info = {**posterior.fit_info, "diagnostics": diag}
    text = diagnostics_section(other)
    assert text.startswith('<section id="diagnostics"><h2>Can it be trusted</h2>')
    assert '<span class="fail">FAIL</span>' in text and "2 chains &times; 50 draws" in text
    rows = re.findall(r'<tr><td class="l">([^<]+)</td><td>([^<]+)</td><td>([^<]+)</td></tr>', text)
    assert rows == [("r_hat max", "1.234", "&le; 1.01"), ("bulk ESS min", "31", "&ge; 200"),
                    ("tail ESS min", "27", "&ge; 200"), ("divergences", "3", "&le; 0"),
                    ("E-BFMI min", "0.52", "&ge; 0.3")]
    assert "<li>3 divergent transitions</li>" in text
    passed = diagnostics_section(copy.copy(other).__class__(
        **{**other.__dict__, "fit_info": {"diagnostics": {**diag, "problems": [], "passed": True}}}))
    assert '<span class="pass">PASS</span>' in passed and "<li>" not in passed
    assert "no MCMC diagnostics" in diagnostics_section(posterior)  # the ADVI fit itself


def test_plan_section_shows_the_cliff_as_a_probability(plan_path):
    """P(saturated) at capacity and per rate, beside SLO metrics as median [interval] and mean
    (the mean runs away at 2 x capacity, where every draw saturates; the median does not)."""
    from bayesblis.report.html import plan_section

    plan = read_plan(plan_path)
    text = plan_section(plan)
    assert "<th>P saturated at capacity</th>" in text and "P(saturated)" in text
    assert "posterior draws only, without the simulator discrepancy" in text
    with_disc = copy.deepcopy(plan)
    with_disc.setdefault("metadata", {})["discrepancy"] = {"source": "validate report X",
                                                          "holdout": "experiment", "sd": {}}
    assert "the simulator discrepancy, validate report X" in plan_section(with_disc)
    assert "Never fitted" not in plan_section(with_disc)
    from bayesblis.discrepancy import NEW_CONFIGURATION
    with_disc["options"][0].setdefault("coefficients", {})["discrepancy_rule"] = NEW_CONFIGURATION
    label = with_disc["options"][0]["label"]
    assert f"<p>Never fitted ({label}): each draw's spread" in plan_section(with_disc)
    from bayesblis.discrepancy import UNMEASURED_GPU
    with_disc["options"][0]["coefficients"]["discrepancy_rule"] = UNMEASURED_GPU
    assert f"<p>GPU neither traced nor in kernel-db ({label}): each draw's spread" in \
        plan_section(with_disc)
    assert text.count("probability curve</h3>") == 2
    assert "<th>ttft_p90_s median [s]</th><th>ttft_p90_s mean [s]</th>" in text
    # the tp=1 curve's last row: 8 req/s, 2 x capacity: share 1, median 1.1 s, mean 30.1 s
    row = re.findall(r"<tr><td>8</td><td>480</td>(.*?)</tr>", text)[0]
    assert "<td>1</td><td>1.1<br><small>[0.05, 60.2]</small></td><td>30.1</td>" in row
    old = copy.deepcopy(plan)  # plans written before saturation was recorded still render
    for opt in old["options"]:
        opt.pop("at_capacity")
        for e in opt["evaluations"]:
            e.pop("saturated_share")
            e.pop("metrics")
    assert "probability curve" in plan_section(old)


def test_plan_reader_names_the_problem(tmp_path):
    bad = tmp_path / "plan.json"
    bad.write_text(json.dumps({"options": [{"evaluations": [{"rate_per_s": 1.0}]}]}))
    with pytest.raises(InputError, match="p_all"):
        read_plan(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(InputError, match="options"):
        read_plan(bad)
    with pytest.raises(InputError, match="not found"):
        write_report("unused.nc", tmp_path / "r.html", plan_path=tmp_path / "missing.json")


@pytest.mark.parametrize("text, field", [
    ('{"options": [{"evaluations": 5}]}', "evaluations"),
    ('{"options": [{"evaluations": [{"rate_per_s": "x", "p_all": 0.5}]}]}', "evaluations.rate_per_s"),
    ('{"options": [{"evaluations": [{"rate_per_s": 1, "p_all": "y"}]}]}', "evaluations.p_all"),
    ('{"options": [{"evaluations": [{"rate_per_s": 1, "p_all": 0.5, "p_slo": 3}]}]}',
     "evaluations.p_slo"),
    ('{"options": [{"evaluations": [{"rate_per_s": 1, "p_all": 0.5, "metrics": []}]}]}',
     "evaluations.metrics"),
])
def test_plan_reader_names_an_evaluation_of_the_wrong_type(tmp_path, text, field):
    """A PLAN.json whose evaluations are not a list, or whose rate, probabilities or metrics
    have the wrong type, names the option and field (they were tracebacks while drawing)."""
    bad = tmp_path / "plan.json"
    bad.write_text(text)
    with pytest.raises(InputError) as exc:
        read_plan(bad)
    assert exc.value.field == field and exc.value.record.startswith("option 0")


def test_plan_reader_names_the_line_of_truncated_json(tmp_path):
    bad = tmp_path / "plan.json"
    bad.write_text('{"options": [')
    with pytest.raises(InputError, match="line 1.*truncated JSON.*PLAN.json"):
        read_plan(bad)


def _browser():
    """Playwright + Debian Chromium, or a clear failure (skip only if asked to)."""
    if os.environ.get("BAYESBLIS_SKIP_BROWSER") == "1":
        pytest.skip("BAYESBLIS_SKIP_BROWSER=1")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the browser test needs the 'playwright' Python package (pip install "
                    "playwright; no 'playwright install'); set BAYESBLIS_SKIP_BROWSER=1 to skip")
    if not Path(CHROMIUM).is_file():
        pytest.fail(f"the browser test needs Chromium at {CHROMIUM} (apt-get install chromium); "
                    "set BAYESBLIS_SKIP_BROWSER=1 to skip")
    return sync_playwright


def test_report_renders_in_headless_chromium(report_path, posterior, tmp_path):
    sync_playwright = _browser()
    problems = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1800})
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
                    if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
            requests = []
            page.on("request", lambda r: requests.append(r.url))
            page.goto(report_path.as_uri(), wait_until="load")
            headings = page.eval_on_selector_all("section > h2", "els => els.map(e => e.textContent)")
            images = page.eval_on_selector_all(
                "figure img", "els => els.map(e => ({w: e.naturalWidth, h: e.naturalHeight, "
                "done: e.complete, box: e.getBoundingClientRect().width}))")
            svgs = page.eval_on_selector_all(
                "figure svg", "els => els.map(e => e.getBoundingClientRect().width)")
            first_screen = page.evaluate(
                "() => Object.fromEntries(['plan', 'latency'].map(n => [n, document.querySelector("
                "`figure[data-figure=${n}] img`).getBoundingClientRect().bottom]))")
            shot = tmp_path / "report.png"
            page.screenshot(path=str(shot))
        finally:
            browser.close()
    assert problems == []
    # only the file itself and its data: images are requested
    assert all(u.startswith(("file://", "data:")) for u in requests), requests
    assert headings == [h for _, h in SECTIONS]
    # + shrinkage, coverage, Pareto k, load response, plan, latency
    assert len(images) == len(posterior.configs) + 6
    # the first screen (1280 x 1000) holds the capacity figure and the latency predictions
    assert 0 < first_screen["plan"] <= 1000 and 0 < first_screen["latency"] <= 1000, first_screen
    for img in images:
        assert img["done"] and img["w"] > 0 and img["h"] > 0 and img["box"] > 0, img
    assert all(w > 0 for w in svgs)
    assert shot.read_bytes()[:4] == b"\x89PNG" and shot.stat().st_size > 10_000
