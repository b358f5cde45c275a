"""What a prediction is known to get wrong and the model does not correct: plain-language
caveats that `simulate`, `plan` and `blis-run` print (``caveat: ...``) and store
(`metadata.caveats`). The numbers are not changed.

Each comes from a measured miss of the new-model check (docs/new-models.md,
docs/limits.md) and is raised where its cause is present:

- a repetition penalty among the sampling defaults vLLM applies to requests that set none
  (`catalog.generation`): per-step work no traced model does (top-k and top-p are priced,
  `catalog.sampler_prices`); and a vocabulary of 100k tokens or more whose model's defaults
  are not known here, whose sort would then be left out;
- routed experts computed in FP8: vLLM 0.15's FP8 fused-MoE kernels are timed in kernel-db
  only at other shapes or versions, and the step at small batches costs more than uniform
  routing over the experts says;
- a GPU the posterior has no trace of: its step is priced from kernel times, and on the
  measured A100 and L40S runs the cost of a request in flight was not (docs/kernel-db.md).
"""

from __future__ import annotations

SAMPLING_MEASURED = ("the one measured model whose defaults set a repetition penalty "
                     "(Qwen2.5-7B-Instruct, 1.05) ran within 2% with its top-k / top-p sort "
                     "priced, at outputs of 250-1,450 tokens; the penalty's own work grows with "
                     "each request's output (vLLM pull request 47540: 6 ms a step at 4k tokens "
                     "of history) and is not priced")
FP8_MOE_MEASURED = ("the one measured FP8 MoE model (Llama-4-Scout-17B-16E, TP 2) ran 8-14% "
                    "slower than predicted on 1,448-token outputs (its first tokens 29-33% "
                    "later) and within 9% either way at 2.5-10 req/s")
LARGE_VOCAB = 100_000
"""Vocabularies from this size up make unknown sampling defaults a caveat (the traced models': 32k)."""
LARGE_VOCAB_MEASURED = ("Qwen3-14B at TP 1 was predicted 7-19% fast while its defaults "
                        "(top-k and top-p) were not known here")
"""The figures: `benchmarks/sim_to_real.py`, model version 15, check seeds 1 and 2
(docs/new-models.md)."""
UNSEEN_GPU_MEASURED = ("on seven measured A100 and L40S runs such predictions were −2 to +5% "
                       "off at 2.5 req/s and −13 to −3% at 6 req/s (Mixtral at TP 2: −15% at "
                       "8 req/s, −35 to −38% at 20)")
"""The figures: `benchmarks/sim_to_real.py`, model version 17, check seeds 1 and 2
(docs/kernel-db.md)."""


def sampling(defaults: dict, vocab_size: int | None = None, known: bool = True,
             deployment=None) -> list[str]:
    """The caveat of sampling defaults (`catalog.generation.sampling_defaults`) that set a
    repetition penalty, or of defaults not `known` for a vocabulary of at least `LARGE_VOCAB`
    tokens (`vocab_size`, None: unknown; the sort top-k or top-p would add is quoted at 32
    requests on `deployment`'s GPU when given); none otherwise. Top-k and top-p themselves
    are priced (`catalog.sampler_prices`)."""
    if not known and not defaults and (vocab_size or 0) >= LARGE_VOCAB:
        cost = ""
        if deployment is not None:
            from bayesblis.catalog.sampler_prices import SORT, step_prices

            step_s, row_s = step_prices(vocab_size, SORT, deployment.gpu.hbm_bandwidth_bytes_per_s)
            cost = f" (about {(step_s + 32 * row_s) * 1e3:.1f} ms a step at 32 requests on {deployment.gpu.name})"
        return [f"no generation_config.json is known here for this model ({vocab_size:,}-token "
                "vocabulary), so no sampling defaults are assumed. If its file sets top-k or "
                "top-p, vLLM applies them to requests that set none (--generation-config auto) "
                f"and sorts the whole vocabulary each step{cost}, which the prediction then "
                f"leaves out: {LARGE_VOCAB_MEASURED} (docs/new-models.md). Put the model's "
                "generation_config.json beside its config.json to have it priced"]
    penalty = defaults.get("repetition_penalty")
    if penalty is None:
        return []
    others = ", ".join(f"{k} {v:g}" for k, v in defaults.items() if k != "repetition_penalty")
    return [f"the model's generation_config.json sets repetition_penalty {penalty:g}"
            + (f" (and {others})" if others else "")
            + "; vLLM applies these to requests that set none (--generation-config auto). "
            f"The penalty adds per-step work no traced model does: {SAMPLING_MEASURED} "
            "(docs/new-models.md). Requests that set their own sampling, or a server run with "
            "--generation-config vllm (scenario: vllm.generation_config: vllm), avoid it"]


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
              else "the geometric mean of the kernel times of the GPUs kernel-db measures, "
                   "spread as kernel-db's GPUs differ")
    return [f"the posterior has no trace of {gpu}: its step physics is priced from {priced}; "
            f"{UNSEEN_GPU_MEASURED} (docs/kernel-db.md). Calibrate on minutes of its "
            "traffic before planning near capacity"]
