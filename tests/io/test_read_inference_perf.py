import json
import shutil

import numpy as np
import pytest

from bayesblis.errors import EmptyInputError, InputError
from bayesblis.io.inference_perf import read_inference_perf, stage_measurements


@pytest.fixture(scope="module")
def codegen70(real_ip_dir):
    return read_inference_perf(real_ip_dir / "20260217-203421-llama-2-70b-hf-tp4-codegen")


def test_real_experiment_fields(codegen70):
    e = codegen70
    assert e.model_name == "meta-llama/Llama-2-70b-hf"
    assert e.settings.tp == 4 and e.settings.max_num_seqs == 128 and e.settings.max_num_batched_tokens == 2048
    assert e.kv_blocks_total_gpu == 31356 and e.block_size == 16
    assert list(e.stages.columns) == ["stage", "rate_rps", "duration_s", "start_s", "end_s"]
    assert list(e.requests.columns) == ["request_index", "arrival_s", "prompt_tokens", "output_tokens",
                                        "prefix_group", "has_error", "e2e_s", "ttft_s", "stage",
                                        "max_tokens"]
    assert (e.requests["max_tokens"] == 247).all()   # profile output_len with ignore_eos
    assert set(e.lifecycle) == {0, 1, "summary"}
    # stage sizes agree with inference-perf's own per-stage counts
    for st in (0, 1):
        assert (e.requests.stage == st).sum() == e.lifecycle[st]["load_summary"]["count"]


def test_per_token_itl_matches_published_example(codegen70):
    m = stage_measurements(codegen70)
    s0 = m[m.stage == 0].iloc[0]
    assert s0.itl_mean_s == pytest.approx(0.0175, abs=0.0003)  # README: 17.5 ms
    chunk_itl = codegen70.lifecycle[0]["successes"]["latency"]["inter_token_latency"]["mean"]
    assert 0.4 < chunk_itl / s0.itl_mean_s < 0.6  # inference-perf's ITL is per chunk (~half)
    assert s0.e2e_mean_s == pytest.approx(
        codegen70.lifecycle[0]["successes"]["latency"]["request_latency"]["mean"], rel=1e-6)


def test_errors_have_no_ttft(real_ip_dir):
    e = read_inference_perf(real_ip_dir / "20260217-170634-llama-2-7b-tp1-reasoning")
    err = e.requests[e.requests.has_error]
    assert len(err) == 4068 and err.ttft_s.isna().all()
    ok = e.requests[~e.requests.has_error]
    assert np.isfinite(ok.ttft_s).all() and (ok.e2e_s >= ok.ttft_s).all()


def test_sample_experiment(samples):
    e = read_inference_perf(samples / "inference-perf-2stage")
    assert len(e.requests) == 200 and int(e.requests.has_error.sum()) == 2
    assert (e.requests.groupby("stage").size() == [100, 100]).all()
    m = stage_measurements(e)
    assert list(m.n_ok) == [99, 99]
    assert (m.itl_mean_s > 0.006).all()


def _copy(src, tmp_path):
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    for p in dst.iterdir():
        p.chmod(0o644)
    return dst


def test_count_mismatch_names_both_files(samples, tmp_path):
    d = _copy(samples / "inference-perf-2stage", tmp_path)
    gt = json.loads((d / "ground_truth.json").read_text())
    (d / "ground_truth.json").write_text(json.dumps(gt[:-3]))
    with pytest.raises(InputError) as exc:
        read_inference_perf(d)
    assert "ground_truth.json" in str(exc.value) and "requests.json" in str(exc.value)


def test_negative_tokens(samples, tmp_path):
    d = _copy(samples / "inference-perf-2stage", tmp_path)
    meta = json.loads((d / "requests.json").read_text())
    meta["requests"][7]["output_tokens"] = -4
    (d / "requests.json").write_text(json.dumps(meta))
    with pytest.raises(InputError) as exc:
        read_inference_perf(d)
    msg = str(exc.value)
    assert "requests.json" in msg and "index 7" in msg and "output_tokens" in msg


def test_nan_timing(samples, tmp_path):
    d = _copy(samples / "inference-perf-2stage", tmp_path)
    text = (d / "ground_truth.json").read_text()
    gt = json.loads(text)
    gt[3]["e2e_s"] = float("nan")
    (d / "ground_truth.json").write_text(json.dumps(gt))  # writes NaN
    with pytest.raises(InputError) as exc:
        read_inference_perf(d)
    assert "ground_truth.json" in str(exc.value) and "index 3" in str(exc.value) and "e2e_s" in str(exc.value)


def test_empty_requests(samples, tmp_path):
    d = _copy(samples / "inference-perf-2stage", tmp_path)
    meta = json.loads((d / "requests.json").read_text())
    meta["requests"] = []
    (d / "requests.json").write_text(json.dumps(meta))
    with pytest.raises(EmptyInputError, match="requests.json"):
        read_inference_perf(d)


def test_missing_file(samples, tmp_path):
    d = _copy(samples / "inference-perf-2stage", tmp_path)
    (d / "ground_truth.json").unlink()
    with pytest.raises(InputError, match="ground_truth.json.*missing"):
        read_inference_perf(d)
