"""bayesblis: Bayesian latency coefficients for the BLIS vLLM simulator."""

__version__ = "0.1.0"
