"""What a prediction is known to get wrong and the model does not correct: plain-language
caveats that `simulate`, `plan` and `blis-run` print (``caveat: ...``) and store
(`metadata.caveats`). The numbers are not changed.

Each comes from a measured miss of the new-model check (docs/new-models.md,
docs/limits.md) and is raised where its cause is present:

- a repetition penalty among the sampling defaults vLLM applies to requests that set none
  (`catalog.generation`): per-step work no traced model does;
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
"""The figures: the new-model check, model version 14 (docs/new-models.md)."""
UNSEEN_GPU_MEASURED = ("on seven measured A100 and L40S runs such predictions were within 10% at "
                       "2.5 req/s but 4-24% too fast at 6 req/s, where a request in flight cost "
                       "1.6-3x the simulation's")
"""The figures: `benchmarks/other_gpus.py`, model version 14 (docs/kernel-db.md)."""


def sampling(defaults: dict) -> list[str]:
    """The caveat of sampling defaults (`catalog.generation.sampling_defaults`) that set a
    repetition penalty; none otherwise."""
    penalty = defaults.get("repetition_penalty")
    if penalty is None:
        return []
    others = ", ".join(f"{k} {v:g}" for k, v in defaults.items() if k != "repetition_penalty")
    return [f"the model's generation_config.json sets repetition_penalty {penalty:g}"
            + (f" (and {others})" if others else "")
            + "; vLLM applies these to requests that set none (--generation-config auto). The "
            f"penalty adds per-step work no traced model does: {SAMPLING_MEASURED} "
            "(docs/limits.md). Requests that set it themselves, or a server run with "
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
              else "the fitted GPUs' efficiencies, spread as kernel-db's GPUs differ")
    return [f"the posterior has no trace of {gpu}: its step physics is priced from {priced}; "
            f"{UNSEEN_GPU_MEASURED} (docs/kernel-db.md). Calibrate on minutes of its "
            "traffic before planning near capacity"]
