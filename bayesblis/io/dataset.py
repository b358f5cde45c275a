"""The ingested dataset folder: a list of sources, each with tidy tables.

Layout (see data_specs/dataset.md)::

    DATASET/manifest.json                  package version, inputs (size, sha256), sources
    DATASET/sources/<name>/<table>.parquet one file per table
    DATASET/sources/<name>/extra.json      non-tabular data (profile, lifecycle, header)

A source has a `kind` (inference_perf, otel, kv_events, trace_v2), a unique `name`, a
`settings` dict (VllmSettings fields plus `hardware`) and its `tables`.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bayesblis import __version__
from bayesblis.errors import BayesBlisError, EmptyInputError, InputError, InputWarning
from bayesblis.io.text import load_json_checked, type_name

FORMAT = "bayesblis-dataset"
FORMAT_VERSION = 1
KINDS = ("inference_perf", "otel", "kv_events", "trace_v2", "operator_profiles", "kernel_db")
OK_FINISH = ("stopped", "length", "finished")
SAMPLES_DIR = Path(__file__).resolve().parents[1] / "data" / "samples"


@dataclass
class Source:
    """One ingested input: kind, unique name, settings dict, tables, extra data."""

    kind: str
    name: str
    settings: dict
    tables: dict[str, pd.DataFrame]
    extra: dict = field(default_factory=dict)
    inputs: list[dict] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    def counts(self) -> dict:
        """Per-source counts used by the manifest and `Dataset.summary()`."""
        t = self.tables
        req = t.get("requests")
        n_req = len(req) if req is not None else 0
        if req is None:
            n_ok = 0
        elif self.kind == "inference_perf":
            n_ok = int((~req["has_error"]).sum())
        elif self.kind == "otel":
            n_ok = int(req["finish_status"].isin(OK_FINISH).sum())
        elif self.kind == "trace_v2":
            n_ok = int((req["status"] == "ok").sum())
        else:
            n_ok = 0
        return {
            "n_requests": n_req, "n_ok": n_ok, "n_errors": n_req - n_ok,
            "n_stages": len(t["stages"]) if "stages" in t else 0,
            "n_journey_events": len(t["journey_events"]) if "journey_events" in t else 0,
            "n_steps": len(t["steps"]) if "steps" in t else 0,
            "n_snapshots": len(t["snapshots"]) if "snapshots" in t else 0,
            "n_kv_events": len(t["kv_events"]) if "kv_events" in t else 0,
        }


@dataclass
class Dataset:
    """An ordered list of sources; save/load as a folder of parquet tables."""

    sources: list[Source] = field(default_factory=list)
    manifest: dict = field(default_factory=dict)

    def __getitem__(self, name: str) -> Source:
        for s in self.sources:
            if s.name == name:
                return s
        raise KeyError(name)

    def __len__(self):
        return len(self.sources)

    def names(self) -> list[str]:
        return [s.name for s in self.sources]

    def summary(self) -> pd.DataFrame:
        """One row per source: kind, name, model, hardware, tp, kv_blocks_total_gpu, counts."""
        rows = []
        for s in self.sources:
            rows.append({"name": s.name, "kind": s.kind, "model": s.settings.get("model"),
                         "hardware": s.settings.get("hardware"), "tp": s.settings.get("tp"),
                         "kv_blocks_total_gpu": s.settings.get("kv_blocks_total_gpu"), **s.counts()})
        cols = ["name", "kind", "model", "hardware", "tp", "kv_blocks_total_gpu", "n_requests", "n_ok", "n_errors",
                "n_stages", "n_journey_events", "n_steps", "n_snapshots", "n_kv_events"]
        df = pd.DataFrame(rows, columns=cols)
        for col in ("tp", "kv_blocks_total_gpu"):
            df[col] = df[col].astype("Int64")
        return df

    # -- persistence -------------------------------------------------------------------
    def save(self, folder) -> Path:
        """Write atomically: build in a temp folder beside `folder`, then swap it in."""
        folder = Path(folder).resolve()
        if folder.exists() and (not folder.is_dir() or (any(folder.iterdir())
                                                          and not (folder / "manifest.json").is_file())):
            raise BayesBlisError(f"{folder}: exists and is not a bayesblis dataset; refusing to overwrite it")
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
        try:
            src_entries = []
            for s in self.sources:
                d = tmp / "sources" / s.name
                d.mkdir(parents=True)
                tables = {}
                for tname, df in s.tables.items():
                    df.to_parquet(d / f"{tname}.parquet", index=False)
                    tables[tname] = {"file": f"sources/{s.name}/{tname}.parquet", "n_rows": len(df)}
                if s.extra:
                    (d / "extra.json").write_text(json.dumps(s.extra, indent=1, default=str), encoding="utf-8")
                src_entries.append({"kind": s.kind, "name": s.name, "settings": s.settings,
                                    "counts": s.counts(), "tables": tables, "inputs": s.inputs,
                                    "meta": s.meta})
            manifest = {"format": FORMAT, "format_version": FORMAT_VERSION,
                        "package_version": __version__,
                        "created_at": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                        "inputs": [i for s in self.sources for i in s.inputs],
                        "sources": src_entries}
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1, default=str) + "\n", encoding="utf-8")
            old = None
            if folder.exists():
                old = folder.parent / f".{folder.name}.old-{os.getpid()}"
                os.replace(folder, old)
            os.replace(tmp, folder)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
            self.manifest = manifest
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return folder

    @classmethod
    def load(cls, folder) -> "Dataset":
        """Read a dataset folder written by `save`."""
        folder = Path(folder)
        mpath = folder / "manifest.json"
        if not mpath.is_file():
            raise InputError(folder, "no manifest.json", expected="a dataset folder written by `bayesblis ingest`")
        manifest = load_json_checked(mpath, expected="a dataset manifest written by `bayesblis ingest`")
        if not isinstance(manifest, dict) or not isinstance(manifest.get("sources"), list):
            raise InputError(mpath, "no 'sources' list", field="sources",
                             expected="a dataset manifest written by `bayesblis ingest`")
        if manifest.get("format") != FORMAT:
            raise InputError(mpath, f"format {manifest.get('format')!r}", field="format", expected=repr(FORMAT))
        if manifest.get("format_version") != FORMAT_VERSION:
            raise InputError(mpath, f"format_version {manifest.get('format_version')!r}", field="format_version",
                             expected=str(FORMAT_VERSION))
        sources = []
        for e in manifest["sources"]:
            tables = {}
            for tname, info in e["tables"].items():
                p = folder / info["file"]
                if not p.is_file():
                    raise InputError(p, "table file missing", record=f"source {e['name']}", field=tname)
                tables[tname] = pd.read_parquet(p)
            extra_p = folder / "sources" / e["name"] / "extra.json"
            extra = load_json_checked(extra_p, expected="a JSON object") if extra_p.is_file() else {}
            sources.append(Source(kind=e["kind"], name=e["name"], settings=e["settings"], tables=tables,
                                  extra=extra, inputs=e.get("inputs", []), meta=e.get("meta", {})))
        return cls(sources=sources, manifest=manifest)


# -- detection and ingestion ---------------------------------------------------------------
def file_info(path) -> dict:
    """Input record for the manifest: path, size_bytes, sha256 (streamed)."""
    path = Path(path)
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return {"path": str(path.resolve()), "size_bytes": path.stat().st_size, "sha256": h.hexdigest()}


def _first_char(path: Path) -> str:
    with open(path, "rb") as fh:
        for line in fh:
            s = line.strip()
            if s:
                return chr(s[0])
    return ""


def detect_kind(path) -> str | None:
    """'inference_perf' | 'otel_run' | 'otel' | 'kv_events' | 'trace_v2' | 'operator_profiles'
    | 'kernel_db' | 'parent' | None."""
    from bayesblis.io.inference_perf import is_inference_perf_folder

    path = Path(path)
    if path.is_dir():
        if is_inference_perf_folder(path):
            return "inference_perf"
        if (path / "traces.json").is_file():
            return "otel_run"
        from bayesblis.io.operator_profiles import is_operator_profiles_folder

        if is_operator_profiles_folder(path):  # compute/**/mlp.csv, network/*/all_reduce.csv
            return "operator_profiles"
        from bayesblis.io.kernel_db import is_kernel_db_folder

        if is_kernel_db_folder(path):  # <gpu>/<op>/<framework>/<version>/collection_meta.yaml
            return "kernel_db"
        if any(detect_kind(c) for c in sorted(path.iterdir()) if c.is_dir()):
            return "parent"
        return None
    if not path.is_file():
        return None
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        return "trace_v2" if path.with_suffix(".csv").is_file() else None
    if suffix == ".csv":
        return "trace_v2" if (path.with_suffix(".yaml").is_file() or path.with_suffix(".yml").is_file()) else None
    if path.stat().st_size == 0:
        raise EmptyInputError(path, "empty file", expected="an OTEL traces.json, kv_events.jsonl or TraceV2 pair")
    first = _first_char(path)
    if first == "{":
        return "otel"
    if first == "[":
        return "kv_events"
    return None


def _settings_dict(settings=None, **extra) -> dict:
    from bayesblis.io.vllm_settings import VllmSettings

    d = (settings or VllmSettings()).to_dict()
    d["hardware"] = None
    d.update({k: v for k, v in extra.items() if v is not None})
    return d


def _read_deployment(path: Path) -> dict:
    """Optional `deployment.yaml`: name, model, hardware, and `vllm_args` (a `vllm serve`
    command) and/or `vllm` (a mapping of VllmSettings fields). `model` (a catalog name, or
    a config.json path relative to this file) wins over the model of `vllm_args`."""
    from bayesblis.io.mapping_file import read_mapping
    from bayesblis.io.vllm_settings import VllmSettings

    data = read_mapping(path, expected="name/model/hardware/vllm_args/vllm keys")
    for key in ("name", "model", "hardware"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise InputError(path, f"invalid value {data[key]!r}", field=key, expected="a string")
    if data.get("vllm") is not None and not isinstance(data["vllm"], dict):
        raise InputError(path, f"not a mapping but {type_name(data['vllm'])}", field="vllm",
                         expected="a mapping of vLLM settings (data_specs/vllm-settings.md)")
    try:
        settings = VllmSettings.from_cli_args(data["vllm_args"]) if data.get("vllm_args") else VllmSettings()
        overrides = {**(data.get("vllm") or {})}
        if data.get("model"):
            overrides["model"] = _beside(path, data["model"])
        settings = VllmSettings.from_dict({**settings.to_dict(), **overrides}, source=path)
    except InputError as exc:
        raise (exc if exc.path else exc.at(path)) from None
    hardware = _beside(path, data["hardware"]) if data.get("hardware") else None
    return {"name": data.get("name"), "settings": _settings_dict(settings, hardware=hardware)}


def _beside(path: Path, name: str) -> str:
    """A relative .json path (config.json, GPU datasheet) named in `path`, made absolute
    against `path`'s folder when the file is there; other names unchanged."""
    cand = path.parent / name
    if not Path(name).is_absolute() and (cand.suffix == ".json" and cand.is_file()
                                         or (cand / "config.json").is_file()):
        return str(cand.resolve())
    return name


def warn_unknown_name(key: str, name: str, where: str) -> None:
    """Warn (naming `where`: file and field) when `name` is a model (`key` 'model') or GPU
    ('hardware') the catalogs cannot resolve. The traces are still ingested, but fit,
    simulate, coefficients and plan will refuse the name."""
    from bayesblis.catalog.gpus import load_gpu
    from bayesblis.catalog.models import load_model

    try:
        (load_model if key == "model" else load_gpu)(name)
    except BayesBlisError as exc:
        warnings.warn(f"{where}: {exc} -- ingested anyway; fit, simulate, coefficients and plan "
                      f"will refuse this {key} until it is fixed", InputWarning, stacklevel=2)


def _warn_unknown_names(settings: dict, origins: dict) -> None:
    for key, where in origins.items():
        if settings.get(key):
            warn_unknown_name(key, settings[key], where)


def _source_inference_perf(path: Path) -> Source:
    from bayesblis.io.inference_perf import read_inference_perf, stage_measurements

    exp = read_inference_perf(path)
    settings = _settings_dict(exp.settings)
    origin = {"model": f"{path / 'exp-config.yaml'}, field 'model'"}
    dep = path / "deployment.yaml"
    if dep.is_file():
        dep_settings = _read_deployment(dep)["settings"]
        settings.update({k: v for k, v in dep_settings.items() if v is not None})
        origin["hardware"] = f"{dep}, field 'hardware'"
        if dep_settings.get("model"):
            origin["model"] = f"{dep}, field 'model'"
    _warn_unknown_names(settings, origin)
    inputs = [file_info(p) for p in sorted(path.iterdir()) if p.is_file()]
    return Source(kind="inference_perf", name=exp.name, settings=settings,
                  tables={"requests": exp.requests, "stages": exp.stages,
                          "stage_measurements": stage_measurements(exp)},
                  extra={"profile": exp.profile, "lifecycle": {str(k): v for k, v in exp.lifecycle.items()},
                         "meta": exp.meta},
                  inputs=inputs, meta={"path": str(path.resolve())})


def _kv_tables(kv) -> dict:
    res = kv.cpu_residency_blocks().reset_index()
    off = kv.offload_blocks_per_step().reset_index()
    return {"kv_events": kv.events, "kv_cpu_residency": res, "kv_offload_per_step": off}


def _source_otel(traces: Path, kv: Path | None, deployment: Path | None, name: str) -> Source:
    from bayesblis.io.kv_events import read_kv_events
    from bayesblis.io.otel import read_otel

    tr = read_otel(traces)
    tables = {"requests": tr.requests, "journey_events": tr.journey_events, "steps": tr.steps,
              "snapshots": tr.snapshots}
    inputs = [file_info(traces)]
    meta = {"path": str(traces.resolve()), "otel": tr.meta}
    if kv is not None:
        k = read_kv_events(kv)
        tables.update(_kv_tables(k))
        inputs.append(file_info(kv))
        meta["kv_events"] = k.meta
    settings = _settings_dict()
    if deployment is not None:
        dep = _read_deployment(deployment)
        settings = dep["settings"]
        name = dep["name"] or name
        inputs.append(file_info(deployment))
        _warn_unknown_names(settings, {"model": f"{deployment}, field 'model'",
                                       "hardware": f"{deployment}, field 'hardware'"})
    if settings.get("kv_blocks_total_gpu") is None and len(tr.steps):
        settings["kv_blocks_total_gpu"] = int(tr.steps["kv_blocks_total"].iloc[0])
    return Source(kind="otel", name=name, settings=settings, tables=tables, inputs=inputs, meta=meta)


def _source_kv(path: Path) -> Source:
    from bayesblis.io.kv_events import read_kv_events

    k = read_kv_events(path)
    return Source(kind="kv_events", name=path.stem, settings=_settings_dict(), tables=_kv_tables(k),
                  inputs=[file_info(path)], meta={"path": str(path.resolve()), **k.meta})


def _source_trace_v2(path: Path) -> Source:
    """A TraceV2/V3 pair as a source: the header's `server:` block (`tracev2.server_settings`:
    BLIS's keys and bayesblis's extensions, e.g. `kv_blocks_total_gpu`, `hardware`) gives
    the settings; a `<stem>.deployment.yaml`, else a `deployment.yaml`, beside the header
    (as for inference-perf and OTEL runs; BLIS never reads it) overrides those it sets to
    other than vLLM's defaults, and names the hardware."""
    from bayesblis.io.tracev2 import read_trace_v2, server_settings
    from bayesblis.io.vllm_settings import VllmSettings

    if path.suffix.lower() == ".csv":
        header = path.with_suffix(".yaml") if path.with_suffix(".yaml").is_file() else path.with_suffix(".yml")
        data = path
    else:
        header, data = path, path.with_suffix(".csv")
    tv = read_trace_v2(header, data)
    server = server_settings(tv.header, header)
    if not server.get("model"):   # the rows' own model column (blis observe fills it)
        named = [m for m in tv.requests["model"].astype(str) if m]
        if named:
            server["model"] = named[0]
    hardware = server.pop("hardware", None)
    settings = _settings_dict(VllmSettings(**server), hardware=hardware)
    origin = {"model": f"{header}, field 'server.model'", "hardware": f"{header}, field 'server.hardware'"}
    inputs = [file_info(header), file_info(data)]
    name = data.stem
    for dep in (header.with_name(f"{header.stem}.deployment.yaml"), header.parent / "deployment.yaml"):
        if dep.is_file():
            found = _read_deployment(dep)
            default = _settings_dict()
            settings.update({k: v for k, v in found["settings"].items()
                             if v is not None and v != default.get(k)})
            name = found["name"] or name
            inputs.append(file_info(dep))
            origin.update({k: f"{dep}, field '{k}'" for k in ("model", "hardware") if found["settings"].get(k)})
            break
    _warn_unknown_names(settings, origin)
    tables = {"requests": tv.requests}
    if tv.itl is not None:
        tables["itl"] = tv.itl
        inputs.append(file_info(Path(str(data) + ".itl.csv")))
    return Source(kind="trace_v2", name=name, settings=settings, tables=tables,
                  extra={"header": tv.header}, inputs=inputs, meta={"path": str(data.resolve()), **tv.meta})


def expand_paths(paths) -> list[tuple[str, Path]]:
    """Resolve each path to (kind, path) items; parent folders expand to their children."""
    items: list[tuple[str, Path]] = []
    seen_tv: set[Path] = set()
    for p in map(Path, paths):
        if not p.exists():
            raise InputError(p, "no such file or folder")
        kind = detect_kind(p)
        if kind is None:
            raise InputError(p, "unrecognised input",
                             expected="an inference-perf folder, a folder with traces.json, an OTEL traces.json, "
                                      "a kv_events.jsonl, or a TraceV2 .yaml/.csv pair")
        if kind == "parent":
            items.extend(expand_paths([c for c in sorted(p.iterdir()) if c.is_dir() and detect_kind(c)]))
        elif kind == "trace_v2":
            key = p.with_suffix("")
            if key not in seen_tv:
                seen_tv.add(key)
                items.append((kind, p))
        else:
            items.append((kind, p))
    return items


def ingest_one(kind: str, path: Path) -> Source:
    path = Path(path)
    if kind == "inference_perf":
        return _source_inference_perf(path)
    if kind == "otel_run":
        kv = path / "kv_events.jsonl"
        dep = path / "deployment.yaml"
        return _source_otel(path / "traces.json", kv if kv.is_file() else None,
                            dep if dep.is_file() else None, path.name)
    if kind == "otel":
        return _source_otel(path, None, None, path.stem if path.stem != "traces" else path.parent.name)
    if kind == "kv_events":
        return _source_kv(path)
    if kind == "trace_v2":
        return _source_trace_v2(path)
    if kind == "operator_profiles":
        from bayesblis.io.operator_profiles import source_operator_profiles

        return source_operator_profiles(path)
    if kind == "kernel_db":
        from bayesblis.io.kernel_db import source_kernel_db

        return source_kernel_db(path)
    raise ValueError(f"unknown kind {kind!r}")


def _ingest_item(item) -> Source:
    return ingest_one(*item)


def ingest(paths, *, progress=None, scheduler: str | None = None,
           dask_workers: int = 2) -> Dataset:
    """Read every input (auto-detected kind) into a Dataset. `progress` wraps the item
    list (e.g. tqdm) if given. Source names are made unique with a numeric suffix.

    `scheduler`: None (read here, one input after the other), 'local' (a Dask
    LocalCluster of `dask_workers` processes) or a Dask address (tcp://host:port): one
    task per input, same Dataset (sources in input order). With Dask, the paths must be
    readable by the workers."""
    items = expand_paths(paths)
    if not items:
        raise EmptyInputError(None, "no inputs found")
    if scheduler is None:
        read = (ingest_one(kind, p) for kind, p in (progress(items) if progress else items))
    else:
        from bayesblis.distributed import map_tasks

        ticks = iter(progress(range(len(items)))) if progress else None
        read = map_tasks(_ingest_item, [(kind, Path(p).absolute()) for kind, p in items],
                         scheduler=scheduler, n_workers=dask_workers,
                         progress=(lambda i: next(ticks, None)) if ticks else None)
        if ticks is not None:
            for _ in ticks:  # let the wrapper finish (e.g. close a tqdm bar)
                pass
    sources: list[Source] = []
    used: set[str] = set()
    for src in read:
        base, n = src.name, 2
        while src.name in used:
            src.name = f"{base}-{n}"
            n += 1
        used.add(src.name)
        sources.append(src)
    return Dataset(sources=sources)


def sample_paths() -> list[Path]:
    """The bundled sample inputs (see bayesblis/data/samples)."""
    if not SAMPLES_DIR.is_dir():
        raise BayesBlisError(f"bundled samples missing at {SAMPLES_DIR}")
    return [SAMPLES_DIR / "inference-perf-2stage", SAMPLES_DIR / "otel-run", SAMPLES_DIR / "tracev2" / "trace.yaml"]

