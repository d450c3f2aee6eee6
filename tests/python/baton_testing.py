"""Test support for the Python package's tests: a throwaway local cluster of daemons.

The tests run with PYTHONPATH holding the build tree's python/ (the `baton` package as the build
assembled it) and this directory, and with BATON_BIN_DIR naming the build's bin/ (ctest sets
both, tests/python/CMakeLists.txt). A test skips (exit 77) when what it needs was not built.
"""

import os
import shutil
import subprocess
import sys
import tempfile

SKIP = 77


def skip(why: str) -> None:
    print(f"SKIP: {why}")
    sys.exit(SKIP)


def import_baton():
    try:
        import baton  # noqa: F401
        from baton import _C  # noqa: F401
    except ImportError as e:
        skip(f"the baton package was not built ({e})")
    return baton


def import_torch_backend():
    """Imports torch and baton.torch (registering the backend), or skips."""
    try:
        import torch  # noqa: F401
    except ImportError as e:
        skip(f"torch is not installed ({e})")
    import_baton()
    try:
        import baton.torch  # noqa: F401
    except ImportError as e:
        skip(f"the PyTorch backend was not built ({e})")
    return torch


def baton_cli() -> str:
    bin_dir = os.environ.get("BATON_BIN_DIR")
    if not bin_dir:
        skip("BATON_BIN_DIR is not set (run through ctest)")
    return os.path.join(bin_dir, "baton")


class LocalCluster:
    """`baton local up --nodes N` in a fresh directory; `down` (and the directory removed) on
    exit. sockets[i] is node-i's session socket."""

    def __init__(self, nodes: int = 2, daemon_args: str = "", tls: bool = True):
        self.nodes = nodes
        self.daemon_args = daemon_args
        self.tls = tls
        self.dir = None

    def __enter__(self):
        self.dir = tempfile.mkdtemp(prefix="baton-pytest-")
        cmd = [baton_cli(), "local", "up", f"--nodes={self.nodes}", f"--dir={self.dir}",
               f"--tls={'true' if self.tls else 'false'}"]
        if self.daemon_args:
            cmd.append(f"--daemon_args={self.daemon_args}")
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        self.sockets = [os.path.join(self.dir, f"node-{i}.sock") for i in range(self.nodes)]
        return self

    def __exit__(self, *exc):
        subprocess.run([baton_cli(), "local", "down", f"--dir={self.dir}"],
                       stdout=subprocess.DEVNULL, check=False)
        if exc[0] is not None:
            self.dump_logs()
        shutil.rmtree(self.dir, ignore_errors=True)
        return False

    def dump_logs(self) -> None:
        for name in sorted(os.listdir(self.dir)):
            if name.endswith(".log"):
                with open(os.path.join(self.dir, name), errors="replace") as f:
                    tail = f.read()[-4000:]
                print(f"---- {name} (tail) ----\n{tail}", file=sys.stderr)


def free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(fn, rank, world_size, socket_path, backend, init_method, timeout_s, results):
    import datetime
    import pickle
    import traceback

    os.environ["BATON_SOCKET"] = socket_path
    try:
        import torch.distributed as dist

        dist.init_process_group(backend, init_method=init_method, rank=rank,
                                world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout_s))
        value = fn(rank, world_size)
        dist.destroy_process_group()
        # Plain pickle: the queue's own pickler would pass tensors as shared memory whose
        # owner (this process) may have exited before the parent reads them.
        results.put((rank, "ok", pickle.dumps(value)))
    except BaseException:  # noqa: BLE001 - reported to the parent, which fails the test
        results.put((rank, "error", traceback.format_exc()))


def run_ranks(fn, world_size, sockets, backend="baton", timeout_s=60, deadline_s=240):
    """Runs fn(rank, world_size) in `world_size` spawned processes after
    init_process_group(backend); rank r talks to the daemon sockets[r % len(sockets)]. Returns
    the list of fn's return values by rank; raises AssertionError with every failing rank's
    traceback if any rank failed or did not finish within deadline_s."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    init_method = f"tcp://127.0.0.1:{free_port()}"
    procs = [ctx.Process(target=_rank_main,
                         args=(fn, r, world_size, sockets[r % len(sockets)], backend,
                               init_method, timeout_s, results))
             for r in range(world_size)]
    for p in procs:
        p.start()
    values = [None] * world_size
    errors = []
    import queue as queue_module

    for _ in range(world_size):
        try:
            rank, status, value = results.get(timeout=deadline_s)
        except queue_module.Empty:
            errors.append(f"ranks did not finish within {deadline_s} s")
            break
        if status == "ok":
            import pickle

            values[rank] = pickle.loads(value)
        else:
            errors.append(f"rank {rank}:\n{value}")
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
    if errors:
        raise AssertionError("\n".join(errors))
    return values
