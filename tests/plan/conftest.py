"""One tiny real posterior for the plan tests: the `tiny` synthetic fleet (catalog models
and GPUs, so its scenarios simulate), ingested and fitted with a short ADVI run."""

from __future__ import annotations

import warnings

import pytest


@pytest.fixture(scope="session")
def tiny_posterior(tmp_path_factory):
    """(posterior path, scenario YAML path, loaded posterior) of a really tiny real fit.

    Fleet `tiny` (llama-3.1-8b H100 TP1 + qwen2.5-7b A100 TP2 fitted); the scenario is the
    held-out qwen2.5-7b H100 TP1 run (never fitted, every level seen). ADVI, 500
    iterations, 60 windows per configuration: seconds, not a converged fit, but a real
    posterior file with the hierarchy the planner uses.
    """
    import yaml

    from bayesblis.design import build_model_data
    from bayesblis.io.dataset import ingest
    from bayesblis.model.hierarchy import LatencyModel
    from bayesblis.model.store import load_posterior, save_posterior
    from bayesblis.synth import generate_fleet

    root = tmp_path_factory.mktemp("plan")
    fleet = generate_fleet("tiny", root / "fleet", seed=0, progress=False)
    dataset = ingest([fleet.root / "runs"])
    md = build_model_data(dataset, kinds=["step_gap", "decode_window", "arrival_to_queue",
                                          "post_decode"], max_obs_per_config=60, seed=0)
    model = LatencyModel(sampler_config={"draws": 60, "chains": 1, "seed": 1,
                                         "advi_iterations": 500})
    model.build_model(md)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(method="advi", progressbar=False)
    post_path = save_posterior(model, root / "posterior.nc")

    sc = fleet.scenario(fleet.spec.heldout[0].name)
    d = sc.describe()
    doc = {k: d[k] for k in ("name", "model", "hardware", "tp", "ep", "vllm", "workload")}
    scen_path = root / "scenario.yaml"
    scen_path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return post_path, scen_path, load_posterior(post_path)
