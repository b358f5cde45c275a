"""Operator profiles -> configuration rows and `operator_profile` observations."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from bayesblis.features.beta import BETA_FEATURES
from bayesblis.io.operator_profiles import read_operator_profiles
from bayesblis.operator_evidence import (KIND, combine, profile_observations, spread_subsample,
                                         token_regime)
from profile_helpers import SHAPES, TRUTH, linear_time_s, write_profiles


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    return read_operator_profiles(write_profiles(tmp_path_factory.mktemp("ev") / "vidur"))


def test_configurations_and_rows(profiles):
    cfg, obs = profile_observations(profiles)
    assert len(cfg) == 2 * 2 * 2 + 2 * 3  # GPUs x models x tp, + all-reduce per GPU x workers
    row = cfg.set_index("config").loc["ops:tiny-2b|H100-SXM|tp2|ep1|fp16"]
    assert (row["model"], row["model_family"], row["arch"], row["hardware"], row["tp"]) == (
        "ops:tiny-2b", "tiny", "dense", "H100-SXM", 2)
    ar = cfg[cfg["model_family"] == "collective"]
    assert set(ar["model"]) == {"ops:all-reduce-dgx"} and set(ar["tp"]) == {2, 4, 8}
    assert (obs["kind"] == KIND).all() and (obs["n_steps"] == 1).all()
    # only single-node all-reduce rows: 5 sizes per GPU x workers
    assert obs["message_bytes"].notna().sum() == 2 * 3 * 5
    assert set(obs.columns) >= {f"f_{f}" for f in BETA_FEATURES} | {"a_alpha_const_s", "source"}
    assert not obs[[c for c in obs if c.startswith("a_")]].to_numpy().any()


def test_linear_row_features_and_time_match_the_physics(profiles):
    _, obs = profile_observations(profiles)
    one = obs[(obs["config"] == "ops:llama-2-7b|A100-SXM-80GB|tp2|ep1|fp16") & (obs["num_tokens"] == 1024)]
    assert len(one) == 1
    params = (4 * 4096**2 + 3 * 4096 * 11008) / 2  # one layer's matmuls on one of 2 GPUs
    # the FLOP time beyond the weight streaming it overlaps (roofline, features/beta.py)
    assert one["f_prefill_compute_s"].iloc[0] == pytest.approx(
        2 * params * 1024 / 312e12 - 2 * params / 2.039e12)
    assert one["f_weight_traffic_s"].iloc[0] == pytest.approx(2 * params / 2.039e12)
    assert one["f_layer_overhead_s"].iloc[0] == pytest.approx(1e-6)
    assert one["y_s"].iloc[0] == pytest.approx(linear_time_s("a100", SHAPES["meta-llama/Llama-2-7b-hf"], 2, 1024))
    # the synthetic truth is exactly linear in these features
    truth = (TRUTH["prefill"] * one["f_prefill_compute_s"] + TRUTH["weight"] * one["f_weight_traffic_s"]
             + TRUTH["layer_us"] * one["f_layer_overhead_s"])
    assert truth.iloc[0] == pytest.approx(one["y_s"].iloc[0])
    ar = obs[(obs["config"] == "ops:all-reduce-dgx|H100-SXM|tp8|ep1|fp16") & (obs["message_bytes"] == 1 << 20)]
    # H100 is in kernel-db: one all-reduce is priced at vLLM's measured time for it, whole
    from bayesblis.catalog.gpus import load_gpu
    from bayesblis.catalog.kernel_prices import allreduce_curve

    assert ar["f_tp_comm_s"].iloc[0] == pytest.approx(np.interp(1 << 20, *allreduce_curve(load_gpu("H100"), 8)))
    assert ar["f_tp_sync_s"].iloc[0] == 0


def test_options(profiles):
    _, no_const = profile_observations(profiles, layer_constant=False)
    assert not no_const["f_layer_overhead_s"].any()
    cfg, _ = profile_observations(profiles, topologies=("pairwise_nvlink",), gpus=["A100-SXM-80GB"])
    assert set(cfg["hardware"]) == {"A100-SXM-80GB"} and "collective" not in set(cfg["model_family"])
    _, med = profile_observations(profiles, statistic="median")
    assert np.isfinite(med["y_s"]).all()
    cfg, obs = profile_observations(profiles, all_reduce=False)
    assert "collective" not in set(cfg["model_family"]) and obs["message_bytes"].isna().all()
    cfg, obs = profile_observations(profiles, linear=False)
    assert set(cfg["model_family"]) == {"collective"}
    md = combine(None, cfg, obs, drop_unused=True)  # no prior-only coefficients
    # the profiled GPUs are in kernel-db: all-reduces priced whole, no per-round latency
    assert {c for c in md.obs if c.startswith(("f_", "a_"))} == {"f_tp_comm_s"}


def test_subsample_spreads_over_sizes_and_groups(profiles):
    _, obs = profile_observations(profiles)
    sub = spread_subsample(obs, 4, seed=1)
    assert sub.groupby("config").size().max() == 4
    groups = token_regime(sub)
    assert set(groups) == {"linear <=64 tok", "linear 65-1023 tok", "linear >=1024 tok", "all-reduce"}
    assert (token_regime(obs)[obs["message_bytes"].notna()] == "all-reduce").all()


def test_design_builds_profiles_with_traced_sources(tmp_path, samples, profiles):
    from bayesblis.design import build_model_data
    from bayesblis.io.dataset import ingest

    folder = Path(profiles.files[0]).parents[4]
    ds = ingest([samples / "otel-run", folder])
    md, summary = build_model_data(ds, return_summary=True)
    # linear layers only (gpus x models x tp configurations, 8 token counts each): the NCCL
    # all-reduce rows stay out of a fit with traced runs (WITH_TRACES_ALL_REDUCE)
    assert summary["vidur"] == {"configs": 8, "kept": {KIND: 2 * 2 * 2 * 8}}
    assert "llama-2-7b|H100-SXM-80GB|tp1|ep1|fp16" not in set(md.configs["config"])
    assert {"llama-2-7b|H100-SXM|tp1|ep1|fp16", "ops:llama-2-7b|H100-SXM|tp1|ep1|fp16"} <= set(
        md.configs["config"])
    assert md.obs.loc[md.obs["kind"] != KIND, "num_tokens"].isna().all()
    only = build_model_data(ds, kinds=["step_gap"])
    assert KIND not in only.kinds()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prof_only = build_model_data(ingest([folder]))
    assert prof_only.kinds() == [KIND]
    # the same rows through combine() (no dataset)
    cfg, obs = profile_observations(profiles, source="vidur", all_reduce=False)
    both = combine(build_model_data(ingest([samples / "otel-run"])), cfg, obs)
    assert len(both.obs) == len(md.obs) and len(both.configs) == len(md.configs)


def test_rows_follow_the_observation_schema(profiles):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((Path(__file__).resolve().parents[2] / "data_specs" /
                         "observations.schema.json").read_text())
    _, obs = profile_observations(profiles)
    for rec in obs.iloc[::17].to_dict("records"):
        jsonschema.validate({k: (None if isinstance(v, float) and np.isnan(v) else v)
                             for k, v in rec.items()}, schema)


def test_deployment_errors_skip_a_configuration_with_a_warning(tmp_path):
    from profile_helpers import compute_table

    path = tmp_path / "p" / "compute" / "h100" / "acme" / "tiny-2b" / "mlp.csv"
    path.parent.mkdir(parents=True)
    table = compute_table("h100", "acme/tiny-2b", tps=(1, 3))  # 16 heads: tp 3 impossible
    table.to_csv(path, index=False)
    with pytest.warns(UserWarning, match="tp3 skipped"):
        cfg, _ = profile_observations(read_operator_profiles(tmp_path / "p"))
    assert list(cfg["tp"]) == [1]


def test_validation_folds_take_the_profiles_of_their_gpu_as_evidence(tmp_path):
    from bayesblis.errors import InputError
    from bayesblis.model.data import ModelData
    from bayesblis.validate import heldout_models, with_profiles

    folder = write_profiles(tmp_path / "vidur")
    traced_cfg, traced_obs = profile_observations(read_operator_profiles(folder), gpus=["A100-SXM-80GB"])
    # stand-ins for traced configurations: A100 ones under their own model names
    traced_cfg = traced_cfg.assign(model=traced_cfg["model"].str.replace("ops:", ""))
    traced = ModelData(traced_cfg, traced_obs)
    data, info = with_profiles(traced, folder, "H100", per_config=4, seed=0)
    added = data.configs[~data.configs["config"].isin(traced_cfg["config"])]
    assert set(added["hardware"]) == {"H100-SXM"} and info["hardware"] == "H100-SXM"
    profile_rows = data.obs[data.obs["config"].isin(added["config"])]
    assert info["configs"] == len(added) and info["rows"] == len(profile_rows)
    assert profile_rows.groupby("config").size().max() <= 4
    assert len(data.obs) == len(traced_obs) + len(profile_rows)
    # profiled configurations are never a held-out model
    assert heldout_models(data.configs) == sorted(set(traced_cfg["model"]))
    with pytest.raises(InputError, match="no operator profile of L40S"):
        with_profiles(traced, folder, "L40S", per_config=4, seed=0)
