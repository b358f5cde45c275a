import json

import numpy as np
import pytest
import yaml

from bayesblis.cli import main
from bayesblis.coefficients import blis_yaml, coefficient_draws, export_record
from bayesblis.errors import UnseenLevelError
from bayesblis.model.store import load_posterior


def _levels(hardware="H100-SXM", family="llama", tp=2):
    return dict(model=f"{family}-m", model_family=family, arch="dense", hardware=hardware, tp=tp)


def test_seen_configuration_uses_its_own_posterior(tiny_fit):
    _, path, truth = tiny_fit
    post = load_posterior(path)
    draws = coefficient_draws(post, **_levels())
    assert draws.seen_config and not draws.unseen_levels
    expected = post.idata.posterior["beta"].sel(config=draws.config).mean(("chain", "draw")).values
    np.testing.assert_allclose(draws.beta.mean(0), expected)


def test_unseen_level_needs_explicit_permission_and_is_wider(tiny_fit):
    _, path, _ = tiny_fit
    post = load_posterior(path)
    with pytest.raises(UnseenLevelError, match="hardware=L40S"):
        coefficient_draws(post, **_levels(hardware="L40S"))
    seen = coefficient_draws(post, **_levels())
    unseen = coefficient_draws(post, **_levels(hardware="L40S"), allow_unseen=True)
    assert unseen.unseen_levels == {"hardware": "L40S"}
    k = post.beta_features.index("prefill_compute_s")
    width = lambda d: np.subtract(*np.quantile(np.log(d.beta[:, k]), [0.95, 0.05]))  # noqa: E731
    assert width(unseen) > width(seen)


def test_unseen_draws_come_in_antithetic_pairs(tiny_fit):
    from bayesblis.coefficients import _stacked, antithetic_normal, antithetic_pick, level_effects
    from bayesblis.model.priors import floors

    rng = np.random.default_rng(0)
    z = antithetic_normal(rng, (7, 3))
    np.testing.assert_array_equal(z[4:], -z[:3])   # row 6 is drawn alone
    rows = antithetic_pick(rng, 10, 7)
    assert len(set(rows)) == 7 and sum((r + 5) in rows for r in rows if r < 5) == 3
    # a new GPU: every fresh effect (hardware, configuration, group) of draw i + half is minus
    # draw i's, so about the population they cancel in pairs whatever the draws picked
    post = load_posterior(tiny_fit[1])
    draws = coefficient_draws(post, **_levels(hardware="L40S"), allow_unseen=True, new_run=False)
    k = post.beta_features.index("weight_traffic_s")
    theta = np.log(draws.beta[:, k] - floors(post.priors["beta"], post.beta_features)[k])
    pooled = _stacked(post.idata.posterior, "beta_mu").values[:, k]
    for short, _, cols, _, effects in level_effects(post.idata.posterior, "beta", "feature"):
        if short == "family" and k in cols:
            pooled = pooled + effects["llama"][:, cols.index(k)]
    fresh = theta - pooled
    half = len(fresh) // 2
    assert np.std(fresh) > 0.05
    np.testing.assert_allclose(fresh[half:2 * half], -fresh[:half], atol=1e-9)


def test_a_new_gpu_kernel_db_measured_varies_less_where_its_kernels_are_in_the_features(tiny_fit):
    from bayesblis.catalog.kernel_spread import HARDWARE_SCALE, hardware_scales

    measured_caps, unmeasured_caps = hardware_scales("L40S"), hardware_scales("A40")
    assert measured_caps["weight_traffic_s"] == HARDWARE_SCALE
    assert HARDWARE_SCALE < unmeasured_caps["weight_traffic_s"]   # kernel-db's spread across GPUs
    post = load_posterior(tiny_fit[1])
    measured, unmeasured = (coefficient_draws(post, **_levels(hardware=gpu), allow_unseen=True,
                                              seed=3) for gpu in ("L40S", "A40"))
    log_of = lambda d, f: np.log(d.beta[:, post.beta_features.index(f)])  # noqa: E731
    spread = lambda d, f: np.std(log_of(d, f))  # noqa: E731
    assert spread(measured, "weight_traffic_s") < spread(unmeasured, "weight_traffic_s")
    # same seed, same normals: the two differ by (A40's cap - L40S's) z_hardware alone
    tau = float(post.idata.posterior["beta_tau_hardware"].sel(
        beta_hardware_feature="weight_traffic_s").mean())
    gap = log_of(unmeasured, "weight_traffic_s") - log_of(measured, "weight_traffic_s")
    expected = min(tau, unmeasured_caps["weight_traffic_s"]) - min(tau, HARDWARE_SCALE)
    assert np.std(gap) == pytest.approx(expected, rel=0.25)
    # a coefficient kernel-db says nothing of keeps the posterior's hardware scale
    assert spread(measured, "layer_overhead_s") == pytest.approx(
        spread(unmeasured, "layer_overhead_s"))


def test_new_configuration_of_seen_levels_is_population_level(tiny_fit):
    _, path, _ = tiny_fit
    post = load_posterior(path)
    draws = coefficient_draws(post, **_levels(tp=4))
    assert not draws.seen_config and not draws.unseen_levels
    record = export_record(draws)
    assert record["population_level"]
    assert len(record["blis"]["beta_coeffs"]) == 11 and len(record["blis"]["alpha_coeffs"]) == 3


def test_blis_export_folds_the_kernel_priced_factors_into_their_slots(tiny_fit):
    from bayesblis.coefficients import deployment_draws
    from bayesblis.features import Deployment

    _, path, _ = tiny_fit
    dep = Deployment("llama-2-70b", "A100", tp=4)  # A100's GEMMs stream slower than H100's
    assert dep.weight_stream_factor > 1.1 and dep.feature_factors["kv_traffic_s"] > 1.1
    draws = deployment_draws(load_posterior(path), dep)
    assert draws.feature_factors == dep.feature_factors == draws.mean().feature_factors
    record = export_record(draws)
    assert record["blis"]["feature_factors"] == dep.feature_factors
    for slot, name in ((0, "prefill_compute_s"), (2, "weight_traffic_s"), (8, "kv_traffic_s")):
        k = draws.beta_features.index(name)
        assert record["blis"]["beta_coeffs"][slot] == pytest.approx(
            draws.beta[:, k].mean() * dep.feature_factors[name], rel=1e-9)


def test_blis_yaml_is_valid_and_commented(tiny_fit):
    _, path, _ = tiny_fit
    record = export_record(coefficient_draws(load_posterior(path), **_levels()))
    text = blis_yaml(record)
    parsed = yaml.safe_load(text)["trained_physics_coefficients"]
    assert len(parsed["beta_coeffs"]) == 11
    assert "# beta5_per_layer_us" in text


def test_cli_coefficients_answers_seen_and_unseen(tiny_fit, tmp_path, capsys):
    _, path, _ = tiny_fit
    # The tiny fit's configs name synthetic models; the CLI needs catalog models, so it
    # answers through the hierarchy: unseen family without the flag is refused.
    out = tmp_path / "c.json"
    with pytest.raises(SystemExit) as exc:
        main(["coefficients", str(path), "--model", "llama-2-7b", "--hardware", "L40S",
              "--tp", "1", "--out", str(out)])
    assert exc.value.code == 2
    assert "--allow-unseen" in capsys.readouterr().err
    assert not out.exists()
    main(["coefficients", str(path), "--model", "llama-2-7b", "--hardware", "L40S", "--tp", "1",
          "--allow-unseen", "--out", str(tmp_path / "c.yaml")])
    record = json.loads((tmp_path / "c.json").read_text())
    assert record["unseen_levels"]["hardware"] == "L40S"
    assert yaml.safe_load((tmp_path / "c.yaml").read_text())


@pytest.mark.parametrize("option, value", [
    ("--prob", "1.5"), ("--prob", "0"), ("--prob", "nan"), ("--max-num-batched-tokens", "-5"),
    ("--max-model-len", "0"), ("--max-num-seqs", "0"), ("--cpu-offload-gb", "-1"),
])
def test_cli_coefficients_refuses_out_of_range_options_before_reading(tmp_path, capsys, option, value):
    """An interval probability outside (0, 1) or a non-positive vLLM setting is a one-line
    error naming the option, not a traceback or a value recorded as given."""
    posterior = tmp_path / "posterior.nc"
    posterior.write_text("not read: the options are checked first")
    out = tmp_path / "c.json"
    with pytest.raises(SystemExit) as exc:
        main(["coefficients", str(posterior), "--model", "llama-2-7b", "--hardware", "H100",
              option, value, "--out", str(out)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert option in err and "Traceback" not in err
    assert not out.exists()


def test_decode_compute_is_tied_to_prefill_compute_everywhere(tiny_fit):
    """One GEMM efficiency per step (priors.TIED_BETA): fitted configurations, a new
    configuration of seen levels and an unseen GPU all carry decode = prefill compute."""
    from bayesblis.model.priors import tie_columns, tied_pairs

    model, path, _ = tiny_fit
    beta = model.idata.posterior["beta"]
    np.testing.assert_array_equal(beta.sel(feature="decode_compute_s").values,
                                  beta.sel(feature="prefill_compute_s").values)
    post = load_posterior(path)
    features = list(post.beta_features)
    p, d = features.index("prefill_compute_s"), features.index("decode_compute_s")
    assert tied_pairs(features) == [(d, p)]
    for levels, allow in ((_levels(tp=4), False), (_levels(hardware="L40S"), True)):
        cd = coefficient_draws(post, **levels, allow_unseen=allow)
        assert not cd.seen_config
        np.testing.assert_array_equal(cd.beta[:, d], cd.beta[:, p])
    raw = np.arange(2.0 * len(features)).reshape(2, -1)
    tied = tie_columns(raw, features)
    assert (tied[:, d] == raw[:, p]).all() and raw[0, d] == d  # a copy, the input untouched


def test_step_noise_leaves_out_the_ttft_arrival_phase(tiny_fit):
    """The simulator's per-step noise is sigma_step less, in variance, the share a
    configuration's client TTFT windows owe to the arrival phase; a configuration without
    such windows (OTEL-traced, as the tiny fleet) keeps sigma_step."""
    import copy

    import pandas as pd

    from bayesblis.coefficients import _stacked, step_noise
    from bayesblis.client_windows import ttft_phase_share

    _, path, _ = tiny_fit
    post = load_posterior(path)
    sigma = _stacked(post.idata.posterior, "sigma_step").values
    np.testing.assert_array_equal(step_noise(post), sigma)
    target = str(post.configs["config"].iloc[0])
    obs = post.data.obs
    ttft = obs[obs["config"] == target].head(20).assign(kind="client_ttft", n_steps=2.5,
                                                          phase_var=1.0 / 12)
    with_ttft = copy.copy(post)
    with_ttft.data = copy.copy(post.data)
    with_ttft.data.obs = pd.concat([obs, ttft], ignore_index=True)
    noise = step_noise(with_ttft)
    beta = post.idata.posterior["beta"].sel(config=target).mean(("chain", "draw")).values
    alpha = post.idata.posterior["alpha"].sel(config=target).mean(("chain", "draw")).values
    steps = ttft[[f"f_{f}" for f in post.beta_features]].to_numpy(float) @ beta
    a_cols = [f"a_{f}" for f in post.alpha_features]  # a step-only table has none
    mean = steps + ttft.reindex(columns=a_cols, fill_value=0.0).to_numpy(float) @ alpha
    share = ttft_phase_share(ttft, steps, mean)
    assert share > 0
    np.testing.assert_allclose(noise[:, 0], np.sqrt(np.maximum(sigma[:, 0] ** 2 - share, 0)))
    np.testing.assert_array_equal(noise[:, 1:], sigma[:, 1:])
    config = post.configs.iloc[0]
    draws = coefficient_draws(with_ttft, model=config["model"], model_family=config["model_family"],
                              arch=config["arch"], hardware=config["hardware"], tp=int(config["tp"]),
                              ep=int(config["ep"]), dtype=config["dtype"])
    assert draws.config == target
    np.testing.assert_allclose(np.sort(draws.noise_sigma), np.sort(noise[:, 0]))
