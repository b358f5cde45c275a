"""`bayesblis coefficients`: alpha/beta with credible intervals for any configuration."""

from __future__ import annotations

from pathlib import Path

import click

from bayesblis import atomic
from bayesblis.cli.params import FiniteFloatRange, PROBABILITY
from bayesblis.constants import CI_PROB


@click.command("coefficients")
@click.argument("posterior", type=click.Path(exists=True, dir_okay=False))
@click.option("--model", "model_name", required=True,
              help="config.json path, folder holding one, or catalog name (e.g. llama-2-70b).")
@click.option("--hardware", required=True, help="GPU name from the catalog or a datasheet JSON path.")
@click.option("--tp", default=1, show_default=True, type=int, help="Tensor-parallel degree.")
@click.option("--ep", default=1, show_default=True, type=int, help="Expert-parallel degree (1 or TP).")
@click.option("--dtype", default="auto", show_default=True, help="Compute dtype (auto = model's).")
@click.option("--max-num-batched-tokens", type=click.IntRange(min=1), default=None,
              help="vLLM chunk size; recorded in the output (features, not coefficients, use it).")
@click.option("--max-model-len", type=click.IntRange(min=1), default=None,
              help="vLLM max_model_len; recorded.")
@click.option("--kv-offloading-size", "--cpu-offload-gb", "cpu_offload_gb",
              type=FiniteFloatRange(min=0), default=None,
              help="vLLM CPU KV offload size in GiB (--kv-offloading-size); recorded. "
                   "--cpu-offload-gb is its old name here (vLLM's flag of that name "
                   "offloads weights).")
@click.option("--allow-unseen", is_flag=True,
              help="Answer for levels (GPU, model family) the posterior never saw, "
                   "from population-level draws.")
@click.option("--prob", default=CI_PROB, show_default=True, type=PROBABILITY,
              help="Credible-interval probability.")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False),
              help="Output: .json (with intervals) or .yaml (BLIS trained_physics_coefficients); "
                   "with --format bayesblis-go the file BLIS's bayesblis backend reads.")
@click.option("--format", "fmt", type=click.Choice(["auto", "bayesblis-go"]), default="auto",
              show_default=True,
              help="auto: by the suffix of --out; bayesblis-go: the coefficient file of "
                   "`blis ... --latency-model bayesblis --bayesblis-coeffs FILE` "
                   "(integrations/blis, docs/blis.md).")
@click.option("--draws", "n_draws", type=click.IntRange(min=1), default=None,
              help="Also write N coefficient sets, one file per draw (<stem>.drawNNN<suffix>): "
                   "the posterior-predictive draws of a new run that `simulate --draws N "
                   "--seed S` runs (bayesblis-go or BLIS YAML; `blis-run` runs BLIS per file).")
@click.option("--max-num-seqs", type=click.IntRange(min=1), default=None,
              help="vLLM max_num_seqs; recorded (bayesblis-go: predicts the next step).")
@click.option("--generation-config", type=click.Choice(["auto", "vllm"]), default="auto",
              show_default=True,
              help="vLLM's --generation-config: auto applies the model's generation_config.json "
                   "sampling defaults (top-k or top-p prices a sort of the vocabulary every step, "
                   "sampling_s); vllm: plain sampling.")
@click.option("--async-scheduling/--no-async-scheduling", default=True, show_default=True,
              help="The engine schedules one step ahead (vLLM's default): bayesblis-go "
                   "emulates it; a slot-mapped BLIS YAML adds the step it waits to alpha0.")
@click.option("--project-on", "project_on", type=click.Path(exists=True, path_type=Path),
              default=None,
              help="BLIS YAML: fit BLIS's trained-physics basis to bayesblis's step and request "
                   "model over the steps bayesblis's simulator runs on this scenario (YAML, "
                   "inference-perf folder or TraceV2), instead of copying coefficients slot "
                   "by slot; the fit's error is written in the YAML (docs/blis.md).")
@click.option("--replay", is_flag=True, help="--project-on an inference-perf folder: its recorded requests.")
@click.option("--max-duration-s", type=FiniteFloatRange(min=0, min_open=True), default=None,
              help="--project-on: only the requests of the first S seconds (e.g. the first stage).")
@click.option("--blis-model-config", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="--project-on: the folder with the config.json BLIS reads "
                                 "(default: the catalog's values).")
@click.option("--blis-hardware-config", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="--project-on: BLIS's hardware_config.json (default: the "
                                 "catalog's datasheet).")
@click.option("--seed", default=0, show_default=True, type=int)
def command(posterior, model_name, hardware, tp, ep, dtype, max_num_batched_tokens,
            max_model_len, cpu_offload_gb, allow_unseen, prob, out_path, fmt, n_draws,
            max_num_seqs, generation_config, async_scheduling, project_on, replay, max_duration_s,
            blis_model_config, blis_hardware_config, seed):
    """Posterior mean, median and credible interval of every coefficient for one configuration."""
    from bayesblis.catalog.generation import sampler_for
    from bayesblis.catalog.sampler_prices import SORT
    from bayesblis.coefficients import blis_yaml, deployment_draws, export_record, format_table
    from bayesblis.features.physics import Deployment
    from bayesblis.model.store import load_posterior

    # before the slow load; its sampler as `simulate` prices it (the model's sampling defaults)
    deployment = Deployment(model_name, hardware, tp=tp, ep=ep, dtype=dtype,
                            sampler=sampler_for(model_name, generation_config))
    post = load_posterior(posterior)
    draws = deployment_draws(post, deployment, allow_unseen=allow_unseen, seed=seed)
    knobs = {k: v for k, v in {"max_num_batched_tokens": max_num_batched_tokens,
                               "max_model_len": max_model_len,
                               "cpu_offload_gb": cpu_offload_gb}.items() if v is not None}
    record = export_record(draws, prob=prob, async_scheduling=async_scheduling,
                           context={"posterior": str(posterior), "vllm": knobs} if knobs else
                           {"posterior": str(posterior)})
    click.echo(format_table(record))
    click.echo("vLLM's sampler: " + (
        "a sort of the vocabulary every step (the model's sampling defaults set top-k or top-p; "
        "--generation-config vllm: plain)" if deployment.sampler == SORT
        else f"{deployment.sampler} sampling"))
    out = Path(out_path)
    if n_draws is not None and fmt != "bayesblis-go" and out.suffix not in (".yaml", ".yml"):
        raise click.UsageError("--draws writes BLIS files: use --format bayesblis-go or a .yaml --out")
    if project_on is not None and (fmt == "bayesblis-go" or out.suffix not in (".yaml", ".yml")):
        raise click.UsageError("--project-on fits BLIS's trained-physics basis: give a .yaml --out")
    mapping = None
    if project_on is not None:
        mapping = _projection(project_on, deployment, hardware, replay, seed, max_duration_s,
                              blis_model_config, blis_hardware_config)
    if fmt == "bayesblis-go" or n_draws is not None:
        _write_blis_sets(post, deployment, draws, out, fmt, n_draws, seed=seed, mapping=mapping,
                         allow_unseen=allow_unseen, async_scheduling=async_scheduling,
                         max_num_batched_tokens=max_num_batched_tokens,
                         max_num_seqs=max_num_seqs, context={"posterior": str(posterior)})
        if fmt == "bayesblis-go":
            return
    if mapping is not None:
        from bayesblis.blis_export import draw_sets, write_trained_physics_files

        beta, alpha, _, _ = draw_sets(draws, None, mean=True)
        write_trained_physics_files(out, deployment, beta, alpha, mapping=mapping,
                                    context={"posterior": str(posterior), "set": "posterior mean",
                                             "projected on": str(project_on)})
        atomic.write_json(out.with_suffix(".json"), record)
        click.echo(f"wrote {out} (BLIS format, projected on {project_on}) and "
                   f"{out.with_suffix('.json')} (with intervals)")
    elif out.suffix in (".yaml", ".yml"):
        atomic.write_text(out, blis_yaml(record))
        atomic.write_json(out.with_suffix(".json"), record)
        click.echo(f"wrote {out} (BLIS format, slot mapping; --project-on SCENARIO reproduces "
                   f"simulate) and {out.with_suffix('.json')} (with intervals)")
    else:
        atomic.write_json(out, record)
        click.echo(f"wrote {out}")


def _projection(scenario_path, deployment, hardware, replay, seed, max_duration_s, model_config,
                hardware_config):
    """The `blis_projection` mapping over the scenario's steps."""
    from bayesblis.blis_projection import BlisShape, projection_mapping
    from bayesblis.simulate.scenario import load_scenario

    sc = load_scenario(scenario_path, hardware=hardware, replay=replay, seed=seed)
    shape = None
    if model_config is not None or hardware_config is not None:
        if model_config is None or hardware_config is None:
            raise click.UsageError("give both --blis-model-config and --blis-hardware-config")
        from bayesblis.blis_run import blis_gpu_name

        shape = BlisShape.from_hf_config(Path(model_config) / "config.json", hardware_config,
                                         blis_gpu_name(deployment), deployment.tp)
    return projection_mapping(sc, sc.engine_config(deployment), seed=seed,
                              max_duration_s=max_duration_s, shape=shape)


def _write_blis_sets(post, deployment, draws, out, fmt, n_draws, *, seed, allow_unseen,
                     async_scheduling, max_num_batched_tokens, max_num_seqs, context,
                     mapping=None):
    """bayesblis-go files (the posterior mean, or one per predictive draw) or, with --draws,
    one BLIS trained-physics YAML per draw."""
    from bayesblis.blis_export import draw_sets, write_go_files, write_trained_physics_files
    from bayesblis.coefficients import deployment_draws

    if n_draws is not None:   # the draws `simulate --draws N --seed S` runs
        sets = deployment_draws(post, deployment, allow_unseen=allow_unseen, seed=seed,
                                n_draws=n_draws, new_run=True)
        beta, alpha, sigma, nu = draw_sets(sets, None)
    else:
        beta, alpha, sigma, nu = draw_sets(draws, None, mean=True)
    if fmt == "bayesblis-go":
        paths = write_go_files(out, deployment, beta, alpha, sigma, nu,
                               async_scheduling=async_scheduling, seed=seed,
                               max_num_batched_tokens=max_num_batched_tokens or 0,
                               max_num_seqs=max_num_seqs or 0, context=context)
        what = "bayesblis-go (blis --latency-model bayesblis --bayesblis-coeffs FILE)"
    else:
        paths = write_trained_physics_files(out, deployment, beta, alpha, context=context,
                                            mapping=mapping)
        what = "BLIS trained_physics_coefficients, one per draw" + (
            ", projected" if mapping is not None else ", slot mapping")
    shown = f"{paths[0]}" if len(paths) == 1 else f"{len(paths)} files {paths[0].name} .. {paths[-1].name}"
    click.echo(f"wrote {shown} ({what})")
