"""`bayesblis inspect PATH`: describe a dataset folder, an input trace or a posterior."""

from __future__ import annotations

from pathlib import Path

import click


def _echo_df(df, max_rows=40):
    import pandas as pd

    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.max_colwidth", 48,
                           "display.max_rows", max_rows):
        click.echo(df.to_string(index=False) if len(df) <= max_rows else str(df))


def describe_dataset(folder: Path):
    from bayesblis.io.dataset import Dataset

    ds = Dataset.load(folder)
    m = ds.manifest
    click.echo(f"dataset {folder} (format {m.get('format_version')}, written by bayesblis "
               f"{m.get('package_version')} at {m.get('created_at')}), {len(ds)} source(s), "
               f"{len(m.get('inputs', []))} input file(s)")
    _echo_df(ds.summary())
    for s in ds.sources:
        tables = ", ".join(f"{k} [{len(v)}]" for k, v in s.tables.items())
        st = s.settings
        click.echo(f"- {s.name} ({s.kind}): tp={st.get('tp')} max_num_seqs={st.get('max_num_seqs')} "
                   f"max_num_batched_tokens={st.get('max_num_batched_tokens')} "
                   f"kv_blocks_total_gpu={st.get('kv_blocks_total_gpu')}; tables: {tables}")


def describe_file(path: Path, kind: str):
    if kind == "otel":
        from bayesblis.io.otel import read_otel

        tr = read_otel(path)
        r = tr.requests
        click.echo(f"OTEL trace {path}: {len(r)} engine requests, {len(tr.journey_events)} journey events, "
                   f"{len(tr.steps)} sampled steps, {len(tr.snapshots)} snapshots; {tr.meta}")
        if len(r):
            click.echo("finish status: " + ", ".join(f"{k}={v}" for k, v in r["finish_status"].value_counts().items()))
            ttft = (r["first_token_s"] - r["queued_s"]).dropna()
            if len(ttft):
                click.echo(f"engine TTFT (QUEUED->FIRST_TOKEN) mean {ttft.mean() * 1e3:.2f} ms, "
                           f"max {ttft.max() * 1e3:.2f} ms; prompt tokens mean {r['prompt_tokens'].mean():.1f}, "
                           f"output tokens mean {r['output_tokens'].mean():.1f}")
        if len(tr.steps):
            s = tr.steps
            click.echo(f"steps {int(s.step_id.min())}..{int(s.step_id.max())} ({len(s)} sampled), "
                       f"mean scheduled tokens {s.scheduled_tokens.mean():.1f}, "
                       f"kv blocks total {int(s.kv_blocks_total.iloc[0])}")
    elif kind == "kv_events":
        from bayesblis.io.kv_events import read_kv_events

        kv = read_kv_events(path, allow_multiple_runs=True)
        click.echo(f"KV events {path}: {kv.meta}")
        _echo_df(kv.events["event_type"].value_counts().rename_axis("event_type").reset_index())
        res = kv.cpu_residency_blocks()
        off = kv.offload_blocks_per_step()
        click.echo(f"CPU-resident blocks: peak {int(res.max()) if len(res) else 0}, final "
                   f"{int(res.iloc[-1]) if len(res) else 0}; offload blocks {int(off.sum())} over {len(off)} steps")
    elif kind == "trace_v2":
        from bayesblis.io.dataset import _source_trace_v2

        src = _source_trace_v2(path)
        h = src.extra["header"]
        r = src.tables["requests"]
        counts = {k: int(v) for k, v in r["status"].value_counts().items()}
        click.echo(f"TraceV{h.get('trace_version')} ({h.get('mode')}) {path}: {len(r)} requests, "
                   f"status {counts}, server {h.get('server')}")
        ok = r[r["status"] == "ok"]
        if len(ok):
            click.echo(f"TTFT mean {ok['ttft_s'].mean() * 1e3:.2f} ms, E2E mean {ok['e2e_s'].mean() * 1e3:.2f} ms")
    elif kind == "inference_perf":
        from bayesblis.io.inference_perf import read_inference_perf, stage_measurements

        exp = read_inference_perf(path)
        click.echo(f"inference-perf experiment {exp.name}: model {exp.model_name}, tp {exp.settings.tp}, "
                   f"{len(exp.requests)} requests ({int(exp.requests.has_error.sum())} errors), "
                   f"kv_blocks_total_gpu {exp.kv_blocks_total_gpu}")
        _echo_df(stage_measurements(exp))


@click.command("inspect")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
def command(path: Path):
    """Describe PATH: a dataset folder, an inference-perf folder, an OTEL traces.json,
    a kv_events.jsonl, a TraceV2 .yaml/.csv, or a posterior .nc file."""
    from bayesblis.errors import InputError
    from bayesblis.io.dataset import detect_kind

    if path.is_dir() and (path / "manifest.json").is_file():
        return describe_dataset(path)
    if path.is_file() and path.suffix == ".nc":
        try:
            from bayesblis.model.store import describe_posterior
        except ImportError as exc:
            raise click.ClickException(f"cannot describe posterior {path}: the model store is unavailable ({exc})")
        out = describe_posterior(path)
        if out is not None:
            click.echo(out if isinstance(out, str) else str(out))
        return None
    kind = detect_kind(path)
    if kind == "otel_run":
        describe_file(path / "traces.json", "otel")
        if (path / "kv_events.jsonl").is_file():
            describe_file(path / "kv_events.jsonl", "kv_events")
        return None
    if kind in (None, "parent"):
        raise InputError(path, "nothing to describe",
                         expected="a dataset folder, an input trace/folder, or a posterior .nc")
    return describe_file(path, kind)
