"""What a prediction is known to get wrong and the model does not correct: plain-language
caveats that `simulate`, `plan` and `blis-run` print (``caveat: ...``) and store
(`metadata.caveats`). The numbers are not changed.

Each comes from a measured miss of the new-model check (docs/new-models.md,
docs/limits.md) and is raised where its cause is present:

- a repetition penalty among the sampling defaults vLLM applies to requests that set none
  (`catalog.generation`), or top-k / top-p over a vocabulary of 100k tokens or more:
  per-step work no traced model does; and a vocabulary that size whose model's defaults
  are not known here;
- routed experts computed in FP8: vLLM 0.15's FP8 fused-MoE kernels are timed in kernel-db
  only at other shapes or versions, and the step at small batches costs more than uniform
  routing over the experts says;
- a GPU the posterior has no trace of: its step is priced from kernel times, and on the
  measured A100 and L40S runs the cost of a request in flight was not (docs/kernel-db.md).
"""

from __future__ import annotations

SAMPLING_MEASURED = ("the one measured model whose defaults set a repetition penalty "
                     "(Qwen2.5-7B-Instruct, 1.05) ran 11-15% slower than predicted")
FP8_MOE_MEASURED = ("the one measured FP8 MoE model (Llama-4-Scout-17B-16E, TP 2) ran 8-11% "
                    "slower than predicted on 1,448-token outputs (its first tokens 30% later) "
                    "and within 6% either way at 2.5-10 req/s")
LARGE_VOCAB = 100_000
"""Vocabularies from this size up make top-k / top-p sampling a caveat (the traced models': 32k)."""
LARGE_VOCAB_MEASURED = ("measured TP 1 models with 128-152k-token vocabularies ran 7-24% slower "
                        "than predicted (Llama-3.1-8B-Instruct, top_p 0.9; Qwen3-14B), "
                        "Llama-3.1-70B-Instruct at TP 4 within 4%")
"""The figures: the new-model check and `benchmarks/sim_to_real.py`, model version 14
(docs/new-models.md)."""
UNSEEN_GPU_MEASURED = ("on seven measured A100 and L40S runs such predictions were within 10% at "
                       "2.5 req/s but 4-24% too fast at 6 req/s, where a request in flight cost "
                       "1.6-3x the simulation's")
"""The figures: `benchmarks/sim_to_real.py`, model version 14 (docs/kernel-db.md)."""


def sampling(defaults: dict, vocab_size: int | None = None, known: bool = True) -> list[str]:
    """The caveat of sampling defaults (`catalog.generation.sampling_defaults`) that set a
    repetition penalty, or top-k or top-p over a vocabulary of at least `LARGE_VOCAB` tokens
    (`vocab_size`, None: unknown), or of defaults not `known` for a vocabulary that size;
    none otherwise."""
    if not known and not defaults and (vocab_size or 0) >= LARGE_VOCAB:
        return [f"no generation_config.json is known here for this model ({vocab_size:,}-token "
                "vocabulary), so no sampling defaults are assumed. If its file sets top-k or "
                "top-p, vLLM applies them to requests that set none (--generation-config auto) "
                f"and sorts the whole vocabulary each step: {LARGE_VOCAB_MEASURED} "
                "(docs/new-models.md). Put the model's generation_config.json beside its "
                "config.json to have it checked"]
    penalty = defaults.get("repetition_penalty")
    filtered = any(k in defaults for k in ("top_k", "top_p"))
    if penalty is None and not (filtered and (vocab_size or 0) >= LARGE_VOCAB):
        return []
    lead = "repetition_penalty" if penalty is not None else ("top_p" if "top_p" in defaults else "top_k")
    others = ", ".join(f"{k} {v:g}" for k, v in defaults.items() if k != lead)
    head = (f"the model's generation_config.json sets {lead} {defaults[lead]:g}"
            + (f" (and {others})" if others else "")
            + "; vLLM applies these to requests that set none (--generation-config auto). ")
    if penalty is not None:
        body = f"The penalty adds per-step work no traced model does: {SAMPLING_MEASURED}"
    else:
        body = (f"It samples them with a sort over the whole {vocab_size:,}-token vocabulary each "
                f"step, work no traced model does at that size: {LARGE_VOCAB_MEASURED}")
    return [head + body + " (docs/new-models.md). Requests that set their own sampling, or a "
            "server run with --generation-config vllm (scenario: vllm.generation_config: vllm), "
            "avoid it"]


def fp8_moe(deployment) -> list[str]:
    """The caveat of a deployment whose routed experts compute in FP8; none otherwise."""
    if not (deployment.model.is_moe and deployment.dtype == "fp8"):
        return []
    return ["the routed experts compute in FP8, whose fused-MoE kernels kernel-db times only at "
            "other shapes or vLLM versions, and small batches cost more than uniform routing "
            f"over the experts says: {FP8_MOE_MEASURED} (docs/limits.md). Calibrate on minutes "
            "of its traffic"]


def unseen_gpu(gpu: str | None) -> list[str]:
    """The caveat of a prediction on a GPU the posterior has no trace of (`gpu`: the
    deployment's unseen hardware level, None when the fit saw it); none otherwise."""
    if gpu is None:
        return []
    from bayesblis.catalog.kernel_spread import kernel_measured

    priced = ("vLLM's kernel times there (kernel-db)" if kernel_measured(gpu)
              else "the fitted GPUs' efficiencies, spread as kernel-db's GPUs differ")
    return [f"the posterior has no trace of {gpu}: its step physics is priced from {priced}; "
            f"{UNSEEN_GPU_MEASURED} (docs/kernel-db.md). Calibrate on minutes of its "
            "traffic before planning near capacity"]
