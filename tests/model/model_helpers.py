"""Helpers shared by the model tests (imported by name: tests/model is on sys.path).

The generator lives in the package (`bayesblis.model.synthetic_steps`, also used by the
benchmarks); it is re-exported here for the tests."""

from bayesblis.model.synthetic_steps import FEATURES, LAYERS, synthetic_data  # noqa: F401


def tiny_fleet():
    """The synthetic data of the shared tiny fit (conftest.py `tiny_fit`): 4 configurations,
    2 GPUs (H100, A100) x a dense and a MoE family (llama, mixtral) at TP 2, 30 steps each;
    the last one (A100, mixtral) held out, every level of it seen in the other three.

    (training ModelData, {config: true beta} of its configurations, held-out configuration
    row, its true beta)."""
    from bayesblis.model.data import ModelData

    data, truth = synthetic_data(n_obs=30, families=(("llama", "dense"), ("mixtral", "moe")),
                                 tps=(2,))
    held = data.configs.iloc[-1].to_dict()
    keep = data.configs[data.configs["config"] != held["config"]]
    train = ModelData(keep, data.obs[data.obs["config"].isin(keep["config"])])
    return (train, {k: truth[k] for k in keep["config"]}, held, truth[held["config"]])


def fits_in_terminals(*argvs, timeout_s: float = 600):
    """Run `bayesblis <argv>` for each argument list side by side, each with stdout and
    stderr on its own pseudo-terminal (independent processes: their imports and compiling
    overlap); return their outputs in order (each process must exit 0)."""
    import os
    import pty
    import selectors
    import subprocess
    import sys
    import time

    env = {k: v for k, v in os.environ.items() if k != "CI"}
    started = []
    for argv in argvs:
        main, child = pty.openpty()
        proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from bayesblis.cli import main; sys.exit(main())",
             *map(str, argv)],
            stdout=child, stderr=child, stdin=subprocess.DEVNULL, env=env)
        os.close(child)
        started.append((proc, main))
    chunks = {fd: [] for _, fd in started}
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as sel:
        for _, fd in started:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            ready = sel.select(timeout=max(0.0, deadline - time.monotonic()))
            assert ready or time.monotonic() < deadline, f"not finished in {timeout_s:.0f} s"
            for key, _ in ready:
                try:
                    data = os.read(key.fd, 65536)
                except OSError:  # the child closed the terminal
                    data = b""
                if data:
                    chunks[key.fd].append(data)
                else:
                    sel.unregister(key.fd)
                    os.close(key.fd)
    outputs = []
    for proc, fd in started:
        text = b"".join(chunks[fd]).decode(errors="replace")
        assert proc.wait(timeout=timeout_s) == 0, text
        outputs.append(text)
    return outputs
