"""Measured weight-streaming efficiency of one model's linear layers on one GPU, by TP.

Decode steps stream every weight once, and how close a GEMV gets to the datasheet bandwidth
depends on its shape: on H100 the operator profiles (``../shared/data/operator-profiles``,
Vidur) time one layer's four matmuls at 1-16 tokens at 1.14x the bytes-over-peak time for
Llama-2-70B at TP 1 but 1.26x for Llama-2-7B (smaller matrices) and 1.67x for Llama-2-7B at
TP 4. Fits of the traced runs find the same order per configuration (model version 4,
docs/operator-profiles.md). So where a profile of the deployment's model, GPU and TP exists, the
``weight_traffic_s`` feature carries it (`features.beta`): the ratio of the profiled time to
bytes over peak, divided by the GPU's median ratio over every profiled model and TP (the
``reference``), so the fitted coefficient keeps its meaning and an unprofiled deployment
gets factor 1.

The factors live in ``weight_streaming.json`` beside this module, built from a profiles
folder by ``python3 -m bayesblis.catalog.weight_streaming PROFILES_DIR`` (the build reads the
folder with `bayesblis.io.operator_profiles`; nothing reads profiles at run time).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np

CATALOG_FILE = Path(__file__).with_name("weight_streaming.json")
TOKENS_MAX = 16
"""Profile rows up to this many tokens are weight-bound (a decode step's GEMVs): their
median ratio is the (model, GPU, TP) efficiency."""
PROFILED_WEIGHT_BYTES = 2.0
"""The profiles time fp16 weights: the factor applies to deployments reading 2-byte weights."""


def measure(profiles) -> dict:
    """{gpu: {"reference": median ratio, "ratios": {model: {tp: ratio}}}} of an
    `OperatorProfiles` (ratio: profiled linear-layer time over the layer's weight bytes
    at datasheet bandwidth, median over rows of at most TOKENS_MAX tokens)."""
    from bayesblis.features.beta import weight_time_at_peak_s
    from bayesblis.features.physics import Deployment

    times = profiles.linear_layer_times("median")
    times = times[times["num_tokens"] <= TOKENS_MAX]
    out = {}
    for (gpu, model, tp), rows in times.groupby(["gpu", "model", "tp"], sort=True):
        d = Deployment(profiles.models[model], gpu, tp=int(tp), dtype="fp16")
        bytes_s = weight_time_at_peak_s(d, d.dense_layer_weight_bytes)
        ratio = float(np.median(rows["time_s"].to_numpy(float) / bytes_s))
        out.setdefault(gpu, {"ratios": {}})["ratios"].setdefault(model, {})[str(int(tp))] = round(ratio, 4)
    for entry in out.values():
        entry["reference"] = round(float(np.median(
            [r for by_tp in entry["ratios"].values() for r in by_tp.values()])), 4)
    return out


@lru_cache(maxsize=1)
def catalog() -> dict:
    """The built-in factors (``weight_streaming.json``): {"gpus": {...}, "source": ...}."""
    if not CATALOG_FILE.is_file():
        return {"gpus": {}}
    return json.loads(CATALOG_FILE.read_text())


def factor(gpu: str, model: str, tp: int, weight_bytes_per_param: float = PROFILED_WEIGHT_BYTES) -> float:
    """The deployment's profiled weight-streaming time relative to its GPU's reference
    (1.0 when the catalog has no profile of this GPU, model and TP, or weights are not
    2 bytes wide)."""
    if weight_bytes_per_param != PROFILED_WEIGHT_BYTES:
        return 1.0
    entry = catalog()["gpus"].get(gpu)
    if entry is None:
        return 1.0
    ratio = entry["ratios"].get(model, {}).get(str(int(tp)))
    return 1.0 if ratio is None else float(ratio) / float(entry["reference"])


def build(profiles_dir, out=CATALOG_FILE) -> dict:
    """Measure a profiles folder and write the catalog file (atomically)."""
    from bayesblis.atomic import write_json
    from bayesblis.io.operator_profiles import read_operator_profiles

    doc = {"source": f"operator profiles, linear layers at 1-{TOKENS_MAX} tokens "
                     f"(built from {Path(profiles_dir).name}/ by "
                     f"python3 -m bayesblis.catalog.weight_streaming)",
           "tokens_max": TOKENS_MAX, "gpus": measure(read_operator_profiles(profiles_dir))}
    write_json(out, doc)
    catalog.cache_clear()
    return doc


def format_table(doc: dict) -> str:
    lines = [f"{'gpu':<16}{'model':<18}{'tp':>4}{'ratio':>8}{'factor':>8}"]
    for gpu, entry in doc["gpus"].items():
        for model, by_tp in entry["ratios"].items():
            for tp, ratio in by_tp.items():
                lines.append(f"{gpu:<16}{model:<18}{tp:>4}{ratio:>8.3f}{ratio / entry['reference']:>8.3f}")
        lines.append(f"{gpu:<16}{'(reference)':<18}{'':>4}{entry['reference']:>8.3f}")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 2:
        sys.exit("usage: python3 -m bayesblis.catalog.weight_streaming PROFILES_DIR")
    print(format_table(build(sys.argv[1])))
