"""Kernel database: vLLM's measured kernel times per GPU (NVIDIA AIConfigurator's
`systems/data` layout), as tidy tables.

Layout of a kernel-db folder (data_specs/kernel-db.md)::

    <gpu>/<op>/<framework>/<version>/<table>.parquet    one layer's operator on one GPU (ms)
    <gpu>/<op>/<framework>/<version>/collection_meta.yaml   provenance of the folder
    <gpu>/<op>/<framework>/<version>/reuse.yaml         (optional) shapes forward-filled from another version

`<op>` is one of `gemm`, `attention`, `comm`, `moe`; a folder holding one `<gpu>` or a
root holding several is read. `read_kernel_db(folder)` returns `KernelDb`: one tidy table
per operator (`KernelDb.tables`, keys `OPERATORS`), latencies in µs (`latency_us`), shapes
renamed to what they mean (`context_tokens`, `message_elements`, ...), and on every row the
provenance: ``gpu`` (catalog name), ``gpu_folder``, ``device`` (the device string of the
file), ``framework``, ``framework_version`` (the folder's), ``file_version`` (the version the
file's rows name, e.g. a dev build), ``kernel_source``, ``provenance`` (collection_meta.yaml:
``legacy`` or ``collected``), ``reuse_from_version`` and ``file`` (relative path); plus
`KernelDb.files`, one row per table file.

Malformed input raises `InputError` naming the file, the row and the column, and what
was expected.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bayesblis.errors import EmptyInputError, InputError, InputWarning, UnknownHardwareError
from bayesblis.io.text import load_yaml_checked

META_FILE = "collection_meta.yaml"
REUSE_FILE = "reuse.yaml"
OP_FOLDERS = ("gemm", "attention", "comm", "moe")
MS_TO_US = 1e3

TABLE_FILES = {
    "gemm_perf": "gemm",
    "generation_attention_perf": "decode_attention",
    "context_attention_perf": "prefill_attention",
    "custom_allreduce_perf": "custom_allreduce",
    "nccl_perf": "nccl",
    "moe_perf": "moe",
}
"""File stem -> operator (the tidy table's name)."""
OPERATORS = tuple(TABLE_FILES.values())

DTYPE_NAMES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float8": "fp8",
               "fp8_e4m3": "fp8", "float32": "fp32"}
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1, "int8": 1}

# (file column, tidy column, kind); kinds: "str", "dtype", "int+" (> 0), "int0" (>= 0)
_ATTENTION_SHAPE = (("batch_size", "batch_size", "int+"), ("num_heads", "num_heads", "int+"),
                    ("num_key_value_heads", "num_kv_heads", "int+"), ("head_dim", "head_dim", "int+"),
                    ("attn_dtype", "dtype", "dtype"), ("kv_cache_dtype", "kv_cache_dtype", "dtype"))
COLUMNS = {
    "gemm": (("gemm_dtype", "dtype", "dtype"), ("m", "m", "int+"), ("n", "n", "int+"), ("k", "k", "int+")),
    "decode_attention": (*_ATTENTION_SHAPE, ("isl", "query_tokens", "int+"),
                         ("step", "context_tokens", "int0")),
    "prefill_attention": (*_ATTENTION_SHAPE, ("isl", "prompt_tokens", "int+"),
                          ("step", "context_tokens", "int0")),
    "custom_allreduce": (("allreduce_dtype", "dtype", "dtype"), ("num_gpus", "num_gpus", "int+"),
                         ("message_size", "message_elements", "int+"), ("backend", "backend", "str")),
    "nccl": (("op_name", "collective", "str"), ("nccl_dtype", "dtype", "dtype"),
             ("num_gpus", "num_gpus", "int+"), ("message_size", "message_elements", "int+")),
    "moe": (("moe_dtype", "dtype", "dtype"), ("num_tokens", "num_tokens", "int+"),
            ("hidden_size", "hidden_size", "int+"), ("inter_size", "inter_size", "int+"),
            ("topk", "topk", "int+"), ("num_experts", "num_experts", "int+"),
            ("moe_tp_size", "tp", "int+"), ("moe_ep_size", "ep", "int+"),
            ("distribution", "distribution", "str")),
}
"""Required columns of each table (besides `latency`, ms), renamed to their tidy names."""

PROVENANCE_COLUMNS = ("gpu", "gpu_folder", "device", "framework", "framework_version", "file_version",
                      "kernel_source", "provenance", "reuse_from_version", "file")
FILE_COLUMNS = ("gpu", "gpu_folder", "op_folder", "framework", "framework_version", "operator", "table",
                "file", "n_rows", "provenance", "status", "reuse_from_version", "reuse_reason", "device",
                "file_versions")


@dataclass
class KernelDb:
    """Tidy tables of one kernel-db folder (module docstring)."""

    tables: dict[str, pd.DataFrame]
    files: pd.DataFrame
    root: Path | None = None
    inputs: list = field(default_factory=list)

    def __getitem__(self, operator: str) -> pd.DataFrame:
        if operator not in self.tables:
            raise KeyError(f"no {operator!r} table (have: {', '.join(self.tables) or 'none'})")
        return self.tables[operator]

    def gpus(self) -> list[str]:
        return sorted(self.files["gpu"].unique())


# ------------------------------------------------------------------------------ layout
def _version_folders(gpu_dir: Path):
    """(op, framework, version folder) under one GPU folder that hold a collection_meta.yaml."""
    for op in OP_FOLDERS:
        op_dir = gpu_dir / op
        if not op_dir.is_dir():
            continue
        for meta in sorted(op_dir.glob(f"*/*/{META_FILE}")):
            yield op, meta.parent.parent.name, meta.parent


def _is_gpu_folder(path: Path) -> bool:
    return path.is_dir() and next(_version_folders(path), None) is not None


def gpu_folders(path) -> list[Path]:
    """The GPU folders of a kernel-db folder: itself if it is one, else its children that are."""
    path = Path(path)
    if _is_gpu_folder(path):
        return [path]
    if not path.is_dir():
        return []
    return [c for c in sorted(path.iterdir()) if _is_gpu_folder(c)]


def is_kernel_db_folder(path) -> bool:
    """True for a folder in the AIConfigurator layout (one GPU folder or a root of them)."""
    return bool(gpu_folders(path))


# ------------------------------------------------------------------------------ parsing
def _gpu_name(folder: Path) -> str:
    from bayesblis.catalog.gpus import load_gpu

    try:
        return load_gpu(folder.name).name
    except UnknownHardwareError:
        warnings.warn(f"{folder}: GPU folder '{folder.name}' is not a catalog GPU; its rows keep "
                      f"gpu = '{folder.name}' (add a datasheet to price it)", InputWarning, stacklevel=3)
        return folder.name


def _device_gpu(device: str) -> str | None:
    from bayesblis.catalog.gpus import load_gpu

    try:
        return load_gpu(device).name
    except UnknownHardwareError:
        return None


def read_meta(folder: Path, framework: str, version: str) -> dict:
    """collection_meta.yaml (and reuse.yaml) of one version folder, checked against the folder names."""
    path = folder / META_FILE
    expected = "an AIConfigurator collection_meta.yaml (schema_version, provenance, runtime, tables)"
    meta = load_yaml_checked(path, expected=expected)
    if not isinstance(meta, dict):
        raise InputError(path, "not a mapping", expected=expected)
    runtime = meta.get("runtime")
    if not isinstance(runtime, dict):
        raise InputError(path, "missing runtime", field="runtime",
                         expected="a mapping with framework and version")
    if str(runtime.get("framework", "")).lower() != framework.lower():
        raise InputError(path, f"framework {runtime.get('framework')!r} differs from the folder's",
                         field="runtime.framework", expected=repr(framework))
    if str(runtime.get("version", "")) != version:
        raise InputError(path, f"version {runtime.get('version')!r} differs from the folder's",
                         field="runtime.version", expected=repr(version))
    tables = meta.get("tables") or {}
    if not isinstance(tables, dict):
        raise InputError(path, "tables is not a mapping", field="tables",
                         expected="a mapping of table name -> {status: ...}")
    status = {}
    for name, info in tables.items():
        if not isinstance(info, dict):
            raise InputError(path, f"entry is {type(info).__name__}", field=f"tables.{name}",
                             expected="a mapping with status")
        status[str(name)] = str(info.get("status", ""))
    reuse = {}
    rpath = folder / REUSE_FILE
    if rpath.is_file():
        data = load_yaml_checked(rpath, expected="an AIConfigurator reuse.yaml (reuse: list of table, from_version)")
        entries = (data or {}).get("reuse", []) if isinstance(data, dict) else None
        if not isinstance(entries, list):
            raise InputError(rpath, "reuse is not a list", field="reuse",
                             expected="a list of {table, from_version, reason}")
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict) or "table" not in entry or "from_version" not in entry:
                raise InputError(rpath, "entry without table and from_version", record=f"entry {i}",
                                 field="reuse", expected="a mapping with table and from_version")
            reuse[str(entry["table"])] = (str(entry["from_version"]), str(entry.get("reason", "")))
    return {"provenance": str(meta.get("provenance", "")), "status": status, "reuse": reuse}


def _read_parquet(path: Path, operator: str) -> pd.DataFrame:
    try:
        table = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise InputError(path, f"not a readable parquet file: {' '.join(str(exc).split())[:200]}",
                         expected=f"an AIConfigurator {operator} table (parquet)") from None
    if table.empty:
        raise EmptyInputError(path, "no rows", expected=f"measured {operator} latencies")
    return table


def _bad(path, table, mask, column, reason, expected):
    i = int(np.flatnonzero(mask)[0])
    raise InputError(path, f"{reason} {table[column].iloc[i]!r}", record=f"row {i}", field=column,
                     expected=expected)


def _column(path: Path, table: pd.DataFrame, column: str, kind: str):
    if column not in table.columns:
        raise InputError(path, "missing column", field=column,
                         expected={"str": "a text column", "dtype": "a dtype name column"}.get(kind, "an integer column"))
    values = table[column]
    if kind in ("str", "dtype"):
        null = values.isna().to_numpy() | (values.astype(str).str.strip() == "").to_numpy()
        if null.any():
            _bad(path, table, null, column, "empty value", "a non-empty string")
        text = values.astype(str).str.strip()
        if kind == "dtype":
            text = text.str.lower().map(lambda s: DTYPE_NAMES.get(s, s))
        return text.to_numpy(object)
    numbers = pd.to_numeric(values, errors="coerce").to_numpy(float)
    bad = ~np.isfinite(numbers)
    if bad.any():
        _bad(path, table, bad, column, "not a finite number", "an integer")
    if (numbers != np.round(numbers)).any():
        _bad(path, table, numbers != np.round(numbers), column, "not an integer", "an integer")
    low = 1 if kind == "int+" else 0
    if (numbers < low).any():
        _bad(path, table, numbers < low, column, "out of range",
             "a positive integer" if low else "a non-negative integer")
    return numbers.astype(np.int64)


def _optional_text(table: pd.DataFrame, column: str) -> pd.Series:
    if column not in table.columns:
        return pd.Series(pd.NA, index=table.index, dtype="string")
    return table[column].astype("string").str.strip()


def read_table(path, operator: str, *, gpu: str, gpu_folder: str, framework: str, version: str,
               provenance: str = "", reuse_from_version: str | None = None, relative: str | None = None
               ) -> pd.DataFrame:
    """One table file as its tidy table (columns: provenance, then the operator's shape
    columns, then ``latency_us``)."""
    path = Path(path)
    if operator not in COLUMNS:
        raise ValueError(f"unknown operator {operator!r} (known: {', '.join(OPERATORS)})")
    raw = _read_parquet(path, operator)
    out = pd.DataFrame(index=raw.index)
    out["gpu"] = gpu
    out["gpu_folder"] = gpu_folder
    device = _optional_text(raw, "device")
    known = device.dropna().unique()
    for name in known:
        matched = _device_gpu(name)
        if matched is not None and gpu_folder and matched != gpu and _device_gpu(gpu) == gpu:
            mask = (device == name).fillna(False).to_numpy()
            _bad(path, raw, mask, "device", f"a {matched} device in the {gpu} folder:", f"a {gpu} device")
    out["device"] = device
    out["framework"] = framework
    out["framework_version"] = version
    out["file_version"] = _optional_text(raw, "version")
    out["kernel_source"] = _optional_text(raw, "kernel_source")
    out["provenance"] = provenance
    out["reuse_from_version"] = reuse_from_version
    out["file"] = relative or str(path)
    for source, name, kind in COLUMNS[operator]:
        out[name] = _column(path, raw, source, kind)
    if "latency" not in raw.columns:
        raise InputError(path, "missing column", field="latency", expected="latencies in ms")
    latency = pd.to_numeric(raw["latency"], errors="coerce").to_numpy(float)
    bad = ~np.isfinite(latency) | (latency <= 0)
    if bad.any():
        _bad(path, raw, bad, "latency", "not a positive number", "a positive latency in ms")
    if operator in ("custom_allreduce", "nccl"):
        width = pd.Series(out["dtype"]).map(DTYPE_BYTES)
        if width.isna().any():
            _bad(path, raw, width.isna().to_numpy(), COLUMNS[operator][0 if operator == "custom_allreduce" else 1][0],
                 "unknown element type", f"one of {', '.join(sorted(DTYPE_BYTES))} (or bfloat16, half)")
        out["message_bytes"] = out["message_elements"] * width.to_numpy(np.int64)
    if operator == "decode_attention":
        out["kv_len_tokens"] = out["context_tokens"] + out["query_tokens"]
    out["latency_us"] = latency * MS_TO_US
    for col in ("gpu", "gpu_folder", "framework", "framework_version", "provenance", "reuse_from_version",
                "file"):
        out[col] = out[col].astype("string")
    for col in ("dtype", "kv_cache_dtype", "backend", "collective", "distribution"):
        if col in out.columns:
            out[col] = out[col].astype("string")
    return out.reset_index(drop=True)


CATEGORICAL = ("gpu", "gpu_folder", "device", "framework", "framework_version", "file_version",
               "kernel_source", "provenance", "reuse_from_version", "file", "dtype", "kv_cache_dtype",
               "backend", "collective", "distribution")
"""Columns of few distinct values, kept as pandas categoricals (the tables run to 10^5-10^6 rows)."""


def _categorical(table: pd.DataFrame) -> pd.DataFrame:
    for col in CATEGORICAL:
        if col in table.columns:
            table[col] = table[col].astype("str").astype("category")  # str categories survive parquet
    return table


def read_kernel_db(folder, *, gpus=None, versions=None) -> KernelDb:
    """Every table of a kernel-db folder (module docstring). `gpus` (catalog names or GPU
    folder names) and `versions` (framework versions) restrict what is read."""
    root = Path(folder)
    folders = gpu_folders(root)
    if not folders:
        raise InputError(root, "no kernel-db tables found",
                         expected=f"<gpu>/<op>/<framework>/<version>/{META_FILE} with <op> among "
                                  f"{', '.join(OP_FOLDERS)}")
    base = root.parent if folders == [root] else root
    want_gpu = None if gpus is None else {str(g).lower() for g in gpus}
    want_version = None if versions is None else {str(v) for v in versions}
    parts: dict[str, list] = {op: [] for op in OPERATORS}
    files, inputs = [], []
    for gdir in folders:
        gpu = _gpu_name(gdir)
        if want_gpu is not None and gpu.lower() not in want_gpu and gdir.name.lower() not in want_gpu:
            continue
        for op_folder, framework, vdir in _version_folders(gdir):
            version = vdir.name
            if want_version is not None and version not in want_version:
                continue
            meta = read_meta(vdir, framework, version)
            inputs.append(vdir / META_FILE)
            if (vdir / REUSE_FILE).is_file():
                inputs.append(vdir / REUSE_FILE)
            for path in sorted(vdir.glob("*.parquet")):
                operator = TABLE_FILES.get(path.stem)
                if operator is None:
                    warnings.warn(f"{path}: unknown kernel-db table '{path.stem}' (known: "
                                  f"{', '.join(TABLE_FILES)}); skipped", InputWarning, stacklevel=2)
                    continue
                relative = path.relative_to(base).as_posix()
                reuse = meta["reuse"].get(path.stem)
                table = read_table(path, operator, gpu=gpu, gpu_folder=gdir.name, framework=framework,
                                   version=version, provenance=meta["provenance"],
                                   reuse_from_version=reuse[0] if reuse else None, relative=relative)
                parts[operator].append(table)
                inputs.append(path)
                files.append({"gpu": gpu, "gpu_folder": gdir.name, "op_folder": op_folder,
                              "framework": framework, "framework_version": version, "operator": operator,
                              "table": path.stem, "file": relative, "n_rows": len(table),
                              "provenance": meta["provenance"], "status": meta["status"].get(path.stem, ""),
                              "reuse_from_version": reuse[0] if reuse else None,
                              "reuse_reason": reuse[1] if reuse else None,
                              "device": ";".join(sorted(table["device"].dropna().unique())),
                              "file_versions": ";".join(sorted(table["file_version"].dropna().unique()))})
    if not files:
        raise EmptyInputError(root, "no kernel-db table matched",
                              expected=f"tables for gpus={gpus!r}, versions={versions!r}")
    tables = {op: _categorical(pd.concat(p, ignore_index=True)) for op, p in parts.items() if p}
    return KernelDb(tables=tables, files=pd.DataFrame(files, columns=list(FILE_COLUMNS)), root=root,
                    inputs=inputs)


# ------------------------------------------------------------------------------ dataset
def source_kernel_db(path):
    """An ingested `io.dataset.Source` (kind ``kernel_db``): one table per operator
    (`OPERATORS`) and ``kernel_files`` (one row per table file)."""
    from bayesblis.io.dataset import Source, _settings_dict, file_info

    path = Path(path)
    db = read_kernel_db(path)
    tables = dict(db.tables)
    tables["kernel_files"] = db.files
    return Source(kind="kernel_db", name=path.name, settings=_settings_dict(), tables=tables,
                  inputs=[file_info(p) for p in db.inputs],
                  meta={"path": str(path.resolve()), "gpus": db.gpus(),
                        "rows": {op: len(t) for op, t in db.tables.items()},
                        "framework_versions": sorted(set(db.files["framework"] + " " + db.files["framework_version"]))})


def kernel_db_from_source(source) -> KernelDb:
    """`KernelDb` back from an ingested source."""
    tables = {op: source.tables[op] for op in OPERATORS if op in source.tables}
    return KernelDb(tables=tables, files=source.tables["kernel_files"])
