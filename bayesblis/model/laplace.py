"""Laplace preconditioning of NUTS: sample whitened coordinates around the posterior mode.

On large tables the posterior is a narrow, strongly correlated ridge (data-pinned sums of
coefficients beside prior-dominated splits of them; posterior sds from 1e-4 to 1 on the
unconstrained scale). NUTS then spends its tuning walking to the ridge and learning its
shape. Here the mode is found first (L-BFGS on nutpie's own compiled log density and
gradient, so nothing compiles twice), the Hessian there is taken by finite differences of
the gradient, and nutpie samples ``z`` with::

    x = mode + W z,    W W^T = H^-1   (W = V diag(1 / sqrt(w)), H = V diag(w) V^T)

A linear map with a constant Jacobian: the posterior is exactly the same, only its shape in
the sampler's coordinates is round, so trees are short and tuning is brief. Chains start
at independent draws of the Laplace approximation. nutpie still adapts its mass matrix
and step size in ``z``, which absorbs what the Gaussian approximation gets wrong.

The mode search runs in two stages: a short L-BFGS in the original coordinates, then one
Hessian there and L-BFGS again in the whitened coordinates of that Hessian (L-BFGS alone
crawls along the ridge: about 1,300 gradients at 200k rows against a few hundred).

Both nutpie backends are wrapped. JAX's log density is a Python function (``PyFuncModel``):
the map is applied around it in Python. Numba's is a C callback (``CompiledPyMCModel``):
the mode search calls it through ctypes, and the whitened model gets new numba C callbacks
that apply the map and call the original, so sampling stays in compiled code (a Python
callback would hold the GIL and serialise the chains). Whether the mode search converged
is recorded (``fit_info["laplace"]``); a poor approximation costs speed, never
correctness. A hierarchical posterior on little data can have its mode at a collapsed group
scale (tau -> 0), where a Laplace approximation is meaningless: ``laplace="auto"`` uses it
from `AUTO_MIN_ROWS` rows.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

CHOICES = {"auto": "auto", "on": True, "off": False}
"""``--laplace`` choices (CLI, benchmarks) and the ``laplace`` sampler setting each stands for."""

AUTO_MIN_ROWS = 20_000
"""``laplace="auto"`` preconditions JAX fits of tables with at least this many rows (numba
fits only when asked). Neither made numba fits clearly shorter: the quick tour's 8,000
windows tuned in a quarter of the gradients but mixed worse; a synthetic fleet's 40,000
steps sampled 500 draws in 89 s against 99 s, with r_hat 1.017 against 1.010
(docs/sampler.md)."""

PILOT_EVALS = 200
"""Gradient evaluations of the first L-BFGS stage, in the original coordinates."""

MIN_CURVATURE = 1e-2
"""Floor on the Hessian's eigenvalues (unconstrained scale): flat or non-convex directions
get a standard deviation of at most 10, and nutpie's adaptation takes it from there."""

FD_STEP = 1e-5
"""Finite-difference step of the Hessian (unconstrained scale)."""


@dataclass
class Laplace:
    """A Gaussian approximation at the posterior mode, unconstrained coordinates."""

    mode: np.ndarray
    whiten: np.ndarray  # W: x = mode + W z, W W^T = inverse Hessian
    min_curvature: float  # smallest Hessian eigenvalue before the floor
    n_evals: int  # log-density gradients used (mode search and Hessians)
    wall_s: float
    converged: bool

    def summary(self) -> dict:
        return {"n_evals": self.n_evals, "wall_s": round(self.wall_s, 2),
                "min_curvature": float(self.min_curvature), "converged": self.converged,
                "n_dim": int(len(self.mode))}


class _Counted:
    """-log density and its gradient, counting calls; NaN or inf becomes a large value
    so that L-BFGS's line search backs off."""

    def __init__(self, logp_grad):
        self.logp_grad = logp_grad
        self.n = 0

    def __call__(self, x):
        self.n += 1
        lp, grad = self.logp_grad(x)
        grad = np.asarray(grad, dtype=float)
        if not np.isfinite(lp) or not np.all(np.isfinite(grad)):
            return 1e300, np.zeros_like(x)
        return -float(lp), -grad


def hessian(neg_logp_grad, x: np.ndarray, step: float = FD_STEP) -> np.ndarray:
    """Symmetrised forward-difference Hessian of -log density from its gradient."""
    g0 = neg_logp_grad(x)[1]
    h = np.empty((len(x), len(x)))
    for j in range(len(x)):
        e = np.zeros_like(x)
        e[j] = step
        h[:, j] = (neg_logp_grad(x + e)[1] - g0) / step
    return (h + h.T) / 2


def whitening(h: np.ndarray) -> tuple[np.ndarray, float]:
    """(W with W W^T = H^-1 after flooring H's eigenvalues at MIN_CURVATURE, smallest
    eigenvalue before the floor)."""
    w, v = np.linalg.eigh(h)
    return v / np.sqrt(np.maximum(w, MIN_CURVATURE)), float(w.min())


def find_laplace(logp_grad, x0: np.ndarray, max_evals: int = 5000) -> Laplace:
    """Mode and whitening of the log density ``logp_grad(x) -> (logp, grad)`` from ``x0``."""
    from scipy.optimize import minimize

    started = time.perf_counter()
    f = _Counted(logp_grad)
    pilot = minimize(f, x0, jac=True, method="L-BFGS-B", options={"maxfun": PILOT_EVALS})
    w1, _ = whitening(hessian(f, pilot.x))

    def in_z(z):
        value, grad = f(pilot.x + w1 @ z)
        return value, w1.T @ grad

    res = minimize(in_z, np.zeros(len(x0)), jac=True, method="L-BFGS-B",
                   options={"maxfun": max_evals})
    mode = pilot.x + w1 @ res.x
    whiten, min_curv = whitening(hessian(f, mode))
    return Laplace(mode=mode, whiten=whiten, min_curvature=min_curv, n_evals=f.n,
                   wall_s=time.perf_counter() - started,
                   converged=bool(res.success) and bool(np.isfinite(res.fun)))


def can_precondition(compiled) -> bool:
    """True for the nutpie models this module wraps: JAX (a Python log density) and numba
    (C callbacks)."""
    return _is_jax_model(compiled) or _is_numba_model(compiled)


def _field_names(compiled) -> set:
    return {f.name for f in dataclasses.fields(compiled)} if dataclasses.is_dataclass(compiled) \
        else set()


def _is_jax_model(compiled) -> bool:
    return {"_make_logp_func", "_make_expand_func", "_make_initial_points",
            "_shared_data"} <= _field_names(compiled)


def _is_numba_model(compiled) -> bool:
    return {"compiled_logp_func", "compiled_expand_func", "initial_point_func", "user_data",
            "n_expanded"} <= _field_names(compiled)


def initial_point_of(compiled, seed: int) -> np.ndarray:
    """nutpie's own (jittered) starting point of a chain, unconstrained coordinates."""
    if _is_numba_model(compiled):
        return np.asarray(compiled.initial_point_func(seed), dtype=float)
    return np.asarray(compiled._make_initial_points(seed), dtype=float)


def logp_grad_of(compiled):
    """nutpie's compiled log density and gradient as ``f(x) -> (logp, grad)``; a point the
    model rejects (its callback's non-zero code: NaN or inf) gives ``(-inf, 0)``."""
    if _is_numba_model(compiled):
        return _numba_logp_grad(compiled)
    logp = compiled._make_logp_func()
    shared = compiled._shared_data
    return lambda x: logp(x, **shared)


def _numba_logp_grad(compiled):
    import ctypes

    function = compiled.compiled_logp_func.ctypes
    n_dim, user_data = compiled.n_dim, ctypes.c_void_p(compiled.user_data.ctypes.data)
    pointer = ctypes.POINTER(ctypes.c_double)

    def logp_grad(x):
        x = np.ascontiguousarray(x, dtype=float)
        grad, logp = np.empty(n_dim), np.empty(1)
        code = function(n_dim, x.ctypes.data_as(pointer), grad.ctypes.data_as(pointer),
                        logp.ctypes.data_as(pointer), user_data)
        return (float(logp[0]), grad) if code == 0 else (-np.inf, np.zeros(n_dim))

    return logp_grad


def precondition(compiled, laplace: Laplace):
    """The same nutpie model sampled in ``z`` (``x = mode + W z``); chains start at
    independent standard-normal ``z`` (draws of the Laplace approximation)."""
    if _is_numba_model(compiled):
        return _precondition_numba(compiled, laplace)
    mode, whiten = laplace.mode, laplace.whiten
    make_logp, make_expand = compiled._make_logp_func, compiled._make_expand_func

    def make_logp_z():
        logp = make_logp()

        def logp_z(z, **shared):
            value, grad = logp(mode + whiten @ z, **shared)
            return value, np.ascontiguousarray(whiten.T @ grad)

        return logp_z

    def make_expand_z(seed1, seed2, chain):
        expand = make_expand(seed1, seed2, chain)
        return lambda z, **shared: expand(mode + whiten @ z, **shared)

    def initial_z(seed):
        return np.random.default_rng(seed).standard_normal(len(mode))

    return dataclasses.replace(compiled, _make_logp_func=make_logp_z,
                               _make_expand_func=make_expand_z,
                               _make_initial_points=initial_z)


def _precondition_numba(compiled, laplace: Laplace):
    """New numba C callbacks for nutpie's numba model: each maps ``z`` to ``x`` and calls
    the original callback (log density: the gradient mapped back by ``W^T``; expand: the
    traced values of ``x``), so the chains never enter Python."""
    import ctypes

    import numba
    from numba import types

    n_dim, n_expanded = compiled.n_dim, compiled.n_expanded
    mode = np.ascontiguousarray(laplace.mode, dtype=float)
    whiten = np.ascontiguousarray(laplace.whiten, dtype=float)
    whiten_t = np.ascontiguousarray(laplace.whiten.T)
    void = ctypes.c_void_p
    inner_logp = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_uint64, void, void, void, void)(
        compiled.compiled_logp_func.address)
    inner_expand = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_uint64, ctypes.c_uint64, void,
                                    void, void)(compiled.compiled_expand_func.address)
    doubles = types.CPointer(types.double)

    @numba.cfunc(types.int64(types.uint64, doubles, doubles, doubles, types.voidptr))
    def logp_z(dim, z_in, grad_out, logp_out, user_data):
        if dim != n_dim:
            return -1
        x = mode + whiten @ numba.carray(z_in, (n_dim,))
        grad_x = np.empty(n_dim)
        code = inner_logp(dim, x.ctypes, grad_x.ctypes, numba.carray(logp_out, (1,)).ctypes,
                          user_data)
        numba.carray(grad_out, (n_dim,))[:] = whiten_t @ grad_x
        return code

    @numba.cfunc(types.int64(types.uint64, types.uint64, doubles, doubles, types.voidptr))
    def expand_z(dim, expanded, z_in, values_out, user_data):
        if dim != n_dim:
            return -1
        x = mode + whiten @ numba.carray(z_in, (n_dim,))
        return inner_expand(dim, expanded, x.ctypes,
                            numba.carray(values_out, (n_expanded,)).ctypes, user_data)

    def initial_z(seed, _keep_alive=compiled):  # holds the original callbacks' code
        return np.random.default_rng(seed).standard_normal(n_dim)

    return dataclasses.replace(compiled, compiled_logp_func=logp_z,
                               compiled_expand_func=expand_z, initial_point_func=initial_z)
