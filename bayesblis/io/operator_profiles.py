"""Operator profiles: measured kernel times of one transformer layer's operators and of
all-reduces (the Vidur project's `data/profiling` layout), as tidy tables.

Layout of a profiles folder (data_specs/operator-profiles.md)::

    compute/<gpu>/<org>/<model>/mlp.csv        per-layer operator times (ms) by num_tokens, TP
    network/<gpu>_<topology>/all_reduce.csv    all-reduce times (ms) by size (bytes), workers

`read_operator_profiles(folder)` returns `OperatorProfiles` with

- `compute`: one row per (file row, operator): ``gpu`` (catalog name), ``model`` (the
  package's model name: catalog preset or derived from the shapes, `profile_model`),
  ``model_id`` (the Vidur folder ``<org>/<model>``), ``tp``, ``num_tokens``, ``operator``,
  ``time_s_mean``, ``time_s_median``, ``time_s_std`` (s), the shape columns ``n_head``,
  ``n_kv_head``, ``n_embd``, ``n_expanded_embd``, ``vocab_size``, ``use_gated_mlp``, and
  ``file``, ``line`` (where the row comes from);
- `all_reduce`: one row per file row: ``gpu``, ``topology``, ``num_workers``,
  ``devices_per_node``, ``size_bytes``, ``time_s_mean``, ``time_s_median``,
  ``time_s_std``, ``file``, ``line``;
- `models`: model name -> `ModelArch`.

Malformed input raises `InputError` naming the file, the line and the column.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from bayesblis.errors import EmptyInputError, InputError, UnknownArchitectureError, UnknownHardwareError

COMPUTE_FILE = "mlp.csv"
NETWORK_FILE = "all_reduce.csv"
LINEAR_OPERATORS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
"""The matmul operators of one layer (QKV projection, output projection, MLP up (with the
gate) and down projections): what the linear-layer features cover."""
OTHER_OPERATORS = ("emb", "input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add")
"""Element-wise and lookup operators a file may also time (read when present, not modelled)."""
TIME_STATS = ("mean", "median", "std")
"""Statistics read for every operator (ms in the files, s in the tables)."""
SHAPE_COLUMNS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size")
COMPUTE_KEYS = ("num_tokens", "num_tensor_parallel_workers")
NETWORK_COLUMNS = ("num_workers", "size")
COMPUTE_COLUMNS = ("gpu", "model", "model_id", "tp", "num_tokens", "operator",
                   *(f"time_s_{s}" for s in TIME_STATS), *SHAPE_COLUMNS, "use_gated_mlp",
                   "file", "line")
ALL_REDUCE_COLUMNS = ("gpu", "topology", "num_workers", "devices_per_node", "size_bytes",
                      *(f"time_s_{s}" for s in TIME_STATS), "file", "line")

VIDUR_MODELS = {
    "microsoft/phi-2": ("phi", "PhiForCausalLM", 32),
    "internlm/internlm-20b": ("internlm", "InternLMForCausalLM", 60),
    "qwen/qwen-72b": ("qwen", "QWenLMHeadModel", 80),
    "meta-llama/meta-llama-3-8b": ("llama", "LlamaForCausalLM", 32),
    "meta-llama/meta-llama-3-70b": ("llama", "LlamaForCausalLM", 80),
}
"""Profiled models the catalog has no preset for: (family, HF architecture, layers), from
their public config.json. The layer count only names the model correctly; the per-layer
features of a profile row do not depend on it. Other unknown models get the family of
their name's first word and 1 layer (with the shapes of the file)."""


@dataclass
class OperatorProfiles:
    """Tidy tables of one profiles folder (module docstring)."""

    compute: pd.DataFrame
    all_reduce: pd.DataFrame
    models: dict = field(default_factory=dict)
    files: list = field(default_factory=list)

    def linear_layer_times(self, statistic: str = "mean") -> pd.DataFrame:
        """One row per compute file row: ``gpu``, ``model``, ``tp``, ``num_tokens`` and
        ``time_s`` = the sum of the LINEAR_OPERATORS' `statistic` (one layer's matmuls)."""
        if statistic not in TIME_STATS[:2]:
            raise ValueError(f"statistic must be 'mean' or 'median', got {statistic!r}")
        linear = self.compute[self.compute["operator"].isin(LINEAR_OPERATORS)]
        keys = ["file", "line", "gpu", "model", "tp", "num_tokens"]
        out = linear.groupby(keys, sort=False)[f"time_s_{statistic}"].sum().reset_index()
        return out.rename(columns={f"time_s_{statistic}": "time_s"})


def is_operator_profiles_folder(path) -> bool:
    """True for a folder holding `compute/**/mlp.csv` and/or `network/*/all_reduce.csv`."""
    path = Path(path)
    if not path.is_dir():
        return False
    return (next((path / "compute").glob(f"**/{COMPUTE_FILE}"), None) is not None
            if (path / "compute").is_dir() else False) or (
        next((path / "network").glob(f"*/{NETWORK_FILE}"), None) is not None
        if (path / "network").is_dir() else False)


# ------------------------------------------------------------------------------ parsing
def _read_csv(path: Path) -> pd.DataFrame:
    """The CSV as strings-then-numbers; undecodable bytes and CSV syntax errors name the line."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise InputError(path, f"undecodable byte 0x{raw[exc.start]:02x} (not UTF-8 text)",
                         record=f"line {line}", expected="a UTF-8 CSV file") from None
    if not text.strip():
        raise EmptyInputError(path, "empty file", expected="a CSV header and rows")
    try:
        table = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, ValueError) as exc:
        match = re.search(r"line (\d+)", str(exc))
        raise InputError(path, f"not a valid CSV table: {str(exc).strip()}",
                         record=f"line {match.group(1)}" if match else None) from None
    if table.empty:
        raise EmptyInputError(path, "no data rows", expected="a CSV header and rows")
    return table


def _require(path: Path, table: pd.DataFrame, columns, what: str):
    for column in columns:
        if column not in table.columns:
            raise InputError(path, "missing column", field=column, expected=what)


def _numbers(path: Path, table: pd.DataFrame, column: str, *, positive=False, integer=False,
             non_negative=False) -> np.ndarray:
    """A column as floats; the first bad cell raises an InputError naming line and column."""
    text = table[column].astype(str).str.strip()
    values = pd.to_numeric(text, errors="coerce").to_numpy(float)
    bad = ~np.isfinite(values)
    reason = "not a finite number"
    if not bad.any() and positive:
        bad, reason = values <= 0, "non-positive value"
    if not bad.any() and non_negative:
        bad, reason = values < 0, "negative value"
    if not bad.any() and integer:
        bad, reason = values != np.round(values), "not an integer"
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        cell = table[column].iloc[i]
        kind = "a positive" if positive else "a non-negative" if non_negative else "a"
        raise InputError(path, f"{reason} {cell!r}", record=f"line {i + 2}", field=column,
                         expected=f"{kind} {'integer' if integer else 'number'}")
    return values


def _booleans(path: Path, table: pd.DataFrame, column: str) -> np.ndarray:
    text = table[column].astype(str).str.strip().str.lower()
    mapping = {"true": True, "false": False, "1": True, "0": False}
    bad = ~text.isin(list(mapping))
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise InputError(path, f"not a boolean {table[column].iloc[i]!r}", record=f"line {i + 2}",
                         field=column, expected="True or False")
    return text.map(mapping).to_numpy(bool)


def _constant(path: Path, table: pd.DataFrame, column: str, values: np.ndarray):
    if len(np.unique(values)) > 1:
        i = int(np.flatnonzero(values != values[0])[0])
        raise InputError(path, f"value {table[column].iloc[i]!r} differs from the first row's "
                         f"{table[column].iloc[0]!r}", record=f"line {i + 2}", field=column,
                         expected="one model shape per file")
    return values[0]


def _gpu_name(path: Path, folder: str) -> str:
    from bayesblis.catalog.gpus import load_gpu

    try:
        return load_gpu(folder).name
    except UnknownHardwareError as exc:
        raise InputError(path, f"GPU folder '{folder}' is not a catalog GPU ({exc})",
                         expected="a catalog GPU name or alias (a100, a40, h100, ...)") from None


def _stat_columns(operator: str) -> list[str]:
    return [f"time_stats.{operator}.{s}" for s in TIME_STATS]


def _times_s(path, table, operator) -> dict:
    mean = _numbers(path, table, f"time_stats.{operator}.mean", positive=True)
    median = _numbers(path, table, f"time_stats.{operator}.median", positive=True)
    std = _numbers(path, table, f"time_stats.{operator}.std", non_negative=True)
    return {"time_s_mean": mean * 1e-3, "time_s_median": median * 1e-3, "time_s_std": std * 1e-3}


def read_compute_file(path, gpu: str, model_id: str) -> tuple[pd.DataFrame, object]:
    """One `mlp.csv` as tidy rows (COMPUTE_COLUMNS) and the profiled model's `ModelArch`."""
    path = Path(path)
    table = _read_csv(path)
    needed = (*SHAPE_COLUMNS, "use_gated_mlp", *COMPUTE_KEYS,
              *(c for op in LINEAR_OPERATORS for c in _stat_columns(op)))
    _require(path, table, needed, "Vidur mlp.csv columns: time_stats.<operator>.{mean,median,std} "
             f"for {', '.join(LINEAR_OPERATORS)}, the model shape and {', '.join(COMPUTE_KEYS)}")
    shapes = {c: int(_constant(path, table, c, _numbers(path, table, c, positive=True, integer=True)))
              for c in SHAPE_COLUMNS}
    shapes["use_gated_mlp"] = bool(_constant(path, table, "use_gated_mlp",
                                             _booleans(path, table, "use_gated_mlp")))
    tokens = _numbers(path, table, "num_tokens", positive=True, integer=True).astype(np.int64)
    tp = _numbers(path, table, "num_tensor_parallel_workers", positive=True,
                  integer=True).astype(np.int64)
    arch = profile_model(model_id, shapes, path=path)
    operators = list(LINEAR_OPERATORS) + [op for op in OTHER_OPERATORS
                                          if all(c in table.columns for c in _stat_columns(op))]
    n, k = len(table), len(operators)
    times = [_times_s(path, table, op) for op in operators]
    columns = {"gpu": np.full(n * k, gpu, dtype=object), "model": np.full(n * k, arch.name, dtype=object),
               "model_id": np.full(n * k, model_id, dtype=object), "tp": np.tile(tp, k),
               "num_tokens": np.tile(tokens, k), "operator": np.repeat(np.array(operators, dtype=object), n),
               **{c: np.concatenate([t[c] for t in times]) for c in times[0]},
               **{c: np.full(n * k, v) for c, v in shapes.items()},
               "file": np.full(n * k, str(path), dtype=object), "line": np.tile(np.arange(2, n + 2), k)}
    return pd.DataFrame(columns)[list(COMPUTE_COLUMNS)], arch


def read_all_reduce_file(path, gpu: str, topology: str) -> pd.DataFrame:
    """One `all_reduce.csv` as rows of ALL_REDUCE_COLUMNS (sizes in bytes, times in s)."""
    path = Path(path)
    table = _read_csv(path)
    _require(path, table, (*NETWORK_COLUMNS, *_stat_columns("all_reduce")),
             "Vidur all_reduce.csv columns: time_stats.all_reduce.{mean,median,std}, "
             "num_workers, size")
    if "collective" in table.columns:
        other = table["collective"].astype(str).str.strip() != "all_reduce"
        if other.any():
            i = int(np.flatnonzero(other.to_numpy())[0])
            raise InputError(path, f"collective {table['collective'].iloc[i]!r}",
                             record=f"line {i + 2}", field="collective", expected="all_reduce")
    workers = _numbers(path, table, "num_workers", positive=True, integer=True).astype(np.int64)
    per_node = (_numbers(path, table, "devices_per_node", positive=True, integer=True).astype(np.int64)
                if "devices_per_node" in table.columns else workers.copy())
    size = _numbers(path, table, "size", positive=True, integer=True).astype(np.int64)
    out = pd.DataFrame({"gpu": gpu, "topology": topology, "num_workers": workers,
                        "devices_per_node": per_node, "size_bytes": size,
                        **_times_s(path, table, "all_reduce"), "file": str(path),
                        "line": np.arange(2, len(table) + 2)})
    return out[list(ALL_REDUCE_COLUMNS)]


# ------------------------------------------------------------------------------ models
def profile_model(model_id: str, shapes: dict, *, path=None):
    """The `ModelArch` of a profiled model: the catalog preset when the catalog knows the
    id (its shape checked against the file's), else a dense model built from the shape
    columns (`VIDUR_MODELS` for the family and layer count)."""
    from bayesblis.catalog.models import ModelArch, load_model

    h, heads, kv = shapes["n_embd"], shapes["n_head"], shapes["n_kv_head"]
    inter, gated = shapes["n_expanded_embd"], bool(shapes.get("use_gated_mlp", True))
    if h % heads:
        raise InputError(path, f"n_embd {h} is not a multiple of n_head {heads}", field="n_embd")
    try:
        arch = load_model(model_id)
    except UnknownArchitectureError:
        arch = None
    if arch is not None:
        mine = {"n_head": arch.n_heads, "n_kv_head": arch.n_kv_heads, "n_embd": arch.hidden_size,
                "n_expanded_embd": arch.intermediate_size, "use_gated_mlp": arch.gated_mlp}
        for column, value in mine.items():
            if value != shapes[column]:
                raise InputError(path, f"{column} {shapes[column]} differs from the catalog preset "
                                 f"'{arch.name}' ({value})", field=column,
                                 expected=f"the shape of {model_id}")
        return arch
    family, architecture, layers = VIDUR_MODELS.get(
        model_id.lower(), (re.match(r"[a-z]*", model_id.rsplit("/", 1)[-1].lower()).group(0)
                           or "unknown", "", 1))
    return ModelArch(name=model_id.rsplit("/", 1)[-1].lower(), family=family,
                     architecture=architecture, n_layers=layers, hidden_size=h, n_heads=heads,
                     n_kv_heads=kv, head_dim=h // heads, intermediate_size=inter,
                     vocab_size=shapes["vocab_size"], gated_mlp=gated, weight_dtype="fp16",
                     hf_id=model_id, source=f"{path} (shape columns)" if path else "shape columns")


# ------------------------------------------------------------------------------ folder
def read_operator_profiles(folder) -> OperatorProfiles:
    """Every compute/<gpu>/<org>/<model>/mlp.csv and network/<gpu>_<topology>/all_reduce.csv
    of `folder` (other files ignored)."""
    folder = Path(folder)
    if not is_operator_profiles_folder(folder):
        raise InputError(folder, "not an operator-profiles folder",
                         expected=f"compute/<gpu>/<org>/<model>/{COMPUTE_FILE} and/or "
                                  f"network/<gpu>_<topology>/{NETWORK_FILE}")
    compute, network, models, files = [], [], {}, []
    for path in sorted((folder / "compute").glob(f"**/{COMPUTE_FILE}")):
        rel = path.relative_to(folder / "compute").parts
        if len(rel) < 3:
            raise InputError(path, "compute profile outside a <gpu>/<model> folder",
                             expected=f"compute/<gpu>/<org>/<model>/{COMPUTE_FILE}")
        table, arch = read_compute_file(path, _gpu_name(path, rel[0]), "/".join(rel[1:-1]))
        known = models.setdefault(arch.name, arch)
        if known != arch:
            raise InputError(path, f"model '{arch.name}' has another shape in another GPU's file",
                             field="n_embd", expected="one shape per model")
        compute.append(table)
        files.append(path)
    for path in sorted((folder / "network").glob(f"*/{NETWORK_FILE}")):
        name = path.parent.name
        gpu_folder, _, topology = name.partition("_")
        if not topology:
            raise InputError(path, f"network folder '{name}' names no topology",
                             expected="network/<gpu>_<topology>/all_reduce.csv (e.g. h100_dgx)")
        network.append(read_all_reduce_file(path, _gpu_name(path, gpu_folder), topology))
        files.append(path)
    compute_df = (pd.concat(compute, ignore_index=True) if compute
                  else pd.DataFrame(columns=list(COMPUTE_COLUMNS)))
    network_df = (pd.concat(network, ignore_index=True) if network
                  else pd.DataFrame(columns=list(ALL_REDUCE_COLUMNS)))
    return OperatorProfiles(compute=compute_df, all_reduce=network_df, models=models, files=files)


def model_config(arch) -> dict:
    """A config.json-style dict of a profiled model (stored with an ingested source, so the
    dataset rebuilds the same `ModelArch` without the folder)."""
    from dataclasses import asdict

    return {k: v for k, v in asdict(arch).items()}


def arch_from_config(config: dict):
    """Inverse of `model_config`."""
    from bayesblis.catalog.models import ModelArch

    return ModelArch(**config)


def source_operator_profiles(path):
    """An ingested `io.dataset.Source` (kind ``operator_profiles``): tables ``operators``
    (the tidy compute rows) and ``all_reduce``; `extra["models"]` keeps each profiled
    model's `ModelArch` fields."""
    from bayesblis.io.dataset import Source, _settings_dict, file_info

    path = Path(path)
    profiles = read_operator_profiles(path)
    return Source(kind="operator_profiles", name=path.name, settings=_settings_dict(),
                  tables={"operators": profiles.compute, "all_reduce": profiles.all_reduce},
                  extra={"models": {n: model_config(a) for n, a in profiles.models.items()}},
                  inputs=[file_info(p) for p in profiles.files],
                  meta={"path": str(path.resolve()), "n_compute_files": int(profiles.compute["file"].nunique()),
                        "n_network_files": int(profiles.all_reduce["file"].nunique())})


def profiles_from_source(source) -> OperatorProfiles:
    """`OperatorProfiles` back from an ingested source."""
    models = {n: arch_from_config(c) for n, c in (source.extra.get("models") or {}).items()}
    return OperatorProfiles(compute=source.tables["operators"], all_reduce=source.tables["all_reduce"],
                            models=models)
