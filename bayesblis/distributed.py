"""Run independent tasks serially, or on a Dask cluster when asked.

One entry point, `map_tasks(fn, items, scheduler=...)`, used by sweeps (plan, simulate)
and multi-file ingest:

- ``scheduler=None`` (default): a plain loop in this process;
- ``scheduler="local"``: a `dask.distributed.LocalCluster` started for the call;
- ``scheduler="tcp://host:port"``: an existing Dask scheduler.

Results come back in the order of `items`, so the serial and distributed paths return
identical lists for deterministic tasks. `fn` and the items must be picklable
(module-level functions, plain data), and the workers must import the same `bayesblis`
(a LocalCluster's worker processes inherit this process's `sys.path`). The worker
processes are spawned, so a script that uses ``scheduler="local"`` needs the usual
``if __name__ == "__main__":`` guard (the CLI and pytest need nothing).

Users of it: `bayesblis.plan` (one task per deployment option), `io.dataset.ingest`
(one task per source) and `simulate.results.run_scenario` (one task per chunk of draws).
"""

from __future__ import annotations

from typing import Callable, Iterable

from bayesblis.errors import BayesBlisError

SCHEMES = ("tcp://", "tls://", "inproc://", "ucx://")


def check_scheduler(scheduler: str | None) -> str | None:
    """`scheduler` if it is None, 'local' or a Dask address; BayesBlisError otherwise."""
    if scheduler is None or scheduler == "local" or str(scheduler).startswith(SCHEMES):
        return scheduler
    raise BayesBlisError(f"unknown scheduler '{scheduler}': use 'local' or tcp://host:port")


def map_tasks(fn: Callable, items: Iterable, *, scheduler: str | None = None,
              n_workers: int = 2, progress: Callable[[int], None] | None = None,
              timeout_s: float = 10.0) -> list:
    """``[fn(item) for item in items]``, serially or on Dask (see module docstring).

    `progress(i)` is called once per finished task (i = number finished so far);
    `n_workers`: worker processes of a 'local' cluster (one thread each); `timeout_s`:
    how long to try to reach a tcp:// scheduler before giving up with a BayesBlisError.
    """
    check_scheduler(scheduler)
    items = list(items)
    if scheduler is None:
        out = []
        for i, item in enumerate(items):
            out.append(fn(item))
            if progress:
                progress(i + 1)
        return out
    try:
        from dask.distributed import Client, LocalCluster, as_completed
    except ImportError as exc:  # pragma: no cover - dask is a dependency
        raise BayesBlisError("a Dask scheduler was requested but dask.distributed is not "
                             "installed (pip install 'dask[distributed]')") from exc
    cluster = None
    if scheduler == "local":
        cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                               dashboard_address=":0")
        client = Client(cluster)
    else:
        try:
            client = Client(scheduler, timeout=f"{float(timeout_s)}s")
        except (OSError, TimeoutError) as exc:
            raise BayesBlisError(f"cannot reach the Dask scheduler at {scheduler} within "
                                 f"{float(timeout_s):g} s ({exc}); start one with "
                                 f"`dask scheduler` or use --scheduler local") from None
    try:
        futures = client.map(fn, items, pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        results = [None] * len(items)
        for done, future in enumerate(as_completed(futures), start=1):
            results[index[future.key]] = future.result()
            if progress:
                progress(done)
        return results
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
