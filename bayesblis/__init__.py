"""bayesblis: Bayesian latency coefficients for the BLIS vLLM simulator."""

import warnings as _warnings

__version__ = "0.1.0"

# Two warnings about the installation, not about the user's work, printed by every command
# that imports PyMC; silenced here (and only these two, by message):
# - ArviZ 0.x announces its 1.x refactor on import (the package pins arviz < 1.0);
# - PyTensor's C backend finds no BLAS to link when installed from pip (numpy's OpenBLAS is
#   private to numpy). NUTS runs in nutpie's numba or JAX backends, which bring their own
#   BLAS; only small C-compiled helpers (prior/posterior predictive draws) go without.
_warnings.filterwarnings("ignore", message=r"\s*ArviZ is undergoing a major refactor",
                         category=FutureWarning)
_warnings.filterwarnings("ignore", message=r"PyTensor could not link to a BLAS",
                         category=UserWarning)
