import hashlib
import json

import pandas as pd
import pytest
from click.testing import CliRunner

from bayesblis.errors import BayesBlisError, InputError
from bayesblis.io.dataset import Dataset, detect_kind, ingest, sample_paths


@pytest.fixture(scope="module")
def real_dataset(real_ip_dir, tmp_path_factory):
    """All 16 real experiments, ingested and saved once for the module."""
    ds = ingest([real_ip_dir])
    out = ds.save(tmp_path_factory.mktemp("real") / "ds")
    return ds, out


def test_real_counts_match_requests_json(real_dataset, real_experiments):
    ds, _ = real_dataset
    assert len(ds) == 16 == len(real_experiments)
    summary = ds.summary().set_index("name")
    for exp in real_experiments:
        meta = json.loads((exp / "requests.json").read_text())
        gt = json.loads((exp / "ground_truth.json").read_text())
        assert summary.loc[exp.name, "n_requests"] == len(meta["requests"])
        assert summary.loc[exp.name, "n_errors"] == sum(r["has_error"] for r in gt)
    assert int(summary.n_requests.sum()) == 151200


def test_real_save_load(real_dataset):
    ds, out = real_dataset
    loaded = Dataset.load(out)
    pd.testing.assert_frame_equal(loaded.summary(), ds.summary())
    m = json.loads((out / "manifest.json").read_text())
    assert m["package_version"] and len(m["inputs"]) == sum(len(s.inputs) for s in ds.sources)
    assert all(len(i["sha256"]) == 64 and i["size_bytes"] > 0 for i in m["inputs"])


def test_samples_round_trip(tmp_path):
    ds = ingest(sample_paths())
    assert [s.kind for s in ds.sources] == ["inference_perf", "otel", "trace_v2"]
    otel = ds["toy-otel-run"]
    assert otel.settings["hardware"] == "H100-SXM-80GB" and otel.settings["max_num_batched_tokens"] == 64
    assert {"kv_events", "kv_offload_per_step", "kv_cpu_residency"} <= set(otel.tables)
    ds.save(tmp_path / "ds")
    back = Dataset.load(tmp_path / "ds")
    for s in ds.sources:
        for name, df in s.tables.items():
            pd.testing.assert_frame_equal(back[s.name].tables[name], df.reset_index(drop=True))
        assert back[s.name].settings == s.settings


def test_save_is_atomic_and_refuses_foreign_folder(tmp_path, monkeypatch):
    ds = ingest(sample_paths()[:1])
    out = ds.save(tmp_path / "ds")
    before = (out / "manifest.json").read_text()
    bad = ingest(sample_paths()[:1])
    bad.sources[0].tables["requests"] = pd.DataFrame({"x": [object()]})  # not parquet-able
    with pytest.raises(Exception):
        bad.save(out)
    assert (out / "manifest.json").read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]  # no temp leftovers
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(BayesBlisError, match="refusing"):
        ds.save(foreign)


def _digest(paths):
    out = {}
    for root in paths:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for p in files:
            st = p.stat()
            out[str(p)] = (st.st_mtime_ns, st.st_size, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def test_readers_never_modify_inputs(samples, tmp_path):
    roots = [samples]
    before = _digest(roots)
    ds = ingest(sample_paths())
    ds.save(tmp_path / "ds")
    from bayesblis.io.kv_events import read_kv_events
    read_kv_events(samples / "otel-run" / "kv_events.jsonl").cpu_residency_blocks()
    assert _digest(roots) == before


def test_detect_kind(samples, tmp_path):
    assert detect_kind(samples / "inference-perf-2stage") == "inference_perf"
    assert detect_kind(samples / "otel-run") == "otel_run"
    assert detect_kind(samples / "otel-run" / "traces.json") == "otel"
    assert detect_kind(samples / "otel-run" / "kv_events.jsonl") == "kv_events"
    assert detect_kind(samples / "tracev2" / "trace.csv") == "trace_v2"
    assert detect_kind(samples) == "parent"
    junk = tmp_path / "x.txt"
    junk.write_text("hello\n")
    with pytest.raises(InputError, match="unrecognised"):
        ingest([junk])


def test_cli_ingest_and_inspect(tmp_path):
    from bayesblis.cli import cli

    r = CliRunner().invoke(cli, ["ingest", "--sample", "--quiet", "--out", str(tmp_path / "ds")])
    assert r.exit_code == 0, r.output
    assert "inference-perf-2stage" in r.output and "toy-otel-run" in r.output and "220 requests" in r.output
    r = CliRunner().invoke(cli, ["inspect", str(tmp_path / "ds")])
    assert r.exit_code == 0, r.output
    assert "3 source(s)" in r.output
    for p in sample_paths() + [sample_paths()[1] / "kv_events.jsonl"]:
        r = CliRunner().invoke(cli, ["inspect", str(p)])
        assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["ingest", "--out", str(tmp_path / "x")])
    assert r.exit_code != 0


def test_bundled_samples_match_generator(tmp_path, samples):
    import make_samples

    make_samples.write_samples(tmp_path / "s")
    for p in sorted(samples.rglob("*")):
        if p.is_file():
            assert (tmp_path / "s" / p.relative_to(samples)).read_bytes() == p.read_bytes(), p


def test_real_inputs_untouched(real_experiments, tmp_path):
    exp = real_experiments[0]
    before = _digest([exp])
    ingest([exp]).save(tmp_path / "ds")
    assert _digest([exp]) == before


def test_inspect_posterior_hook(tmp_path, monkeypatch):
    import sys

    from bayesblis.cli import cli

    nc = tmp_path / "p.nc"
    nc.write_bytes(b"")
    monkeypatch.setitem(sys.modules, "bayesblis.model.store", None)  # import fails
    r = CliRunner().invoke(cli, ["inspect", str(nc)])
    assert r.exit_code != 0 and "model store is unavailable" in r.output


def test_real_stage_counts_match_lifecycle(real_dataset, real_experiments):
    ds, _ = real_dataset
    for exp in real_experiments:
        src = ds[exp.name]
        per_stage = src.tables["requests"].groupby("stage").size().tolist()
        stage_files = sorted(exp.glob("stage_*_lifecycle_metrics.json"))
        lifecycle = [json.loads(p.read_text()) for p in stage_files]
        assert per_stage == [lc["load_summary"]["count"] for lc in lifecycle], exp.name
        assert list(src.tables["stage_measurements"].n_ok) == [lc["successes"]["count"] for lc in lifecycle]


def test_atomic_writes_get_the_usual_file_permissions(tmp_path):
    import os

    from bayesblis.atomic import write_json

    old = os.umask(0o022)
    try:
        write_json(tmp_path / "x.json", {"a": 1})
    finally:
        os.umask(old)
    assert (tmp_path / "x.json").stat().st_mode & 0o777 == 0o644
