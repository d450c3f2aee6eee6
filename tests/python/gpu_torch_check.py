"""torch.distributed through the `baton` backend on CUDA tensors, for a machine with a GPU.

Usage (every rank process shares GPU 0 when there is one GPU):

    BATOND=<path to batond> PYTHONPATH=<folder holding the built `baton` package> \\
        <python with torch> tests/python/gpu_torch_check.py [--device cuda|cpu]
        [--batond PATH] [--daemon-device auto|cuda|none|fake] [--worlds 2,4] [--no-ddp]

    # here, from the repository root, the same checks on CPU tensors:
    PYTHONPATH=build/python ~/.cache/baton/venv/bin/python tests/python/gpu_torch_check.py \\
        --device cpu --batond build/bin/batond

It starts its own daemons (batond, without TLS, in a temporary folder): one for 2 ranks, two
for 4 ranks (ranks alternate between them), and runs, in rank processes spawned per world size:

  - every collective the backend implements (all_reduce with SUM, PRODUCT, MIN, MAX and AVG,
    reduce, broadcast, all_gather, all_gather_into_tensor, reduce_scatter,
    reduce_scatter_tensor, all_to_all, all_to_all_single with and without split sizes, gather,
    scatter, send/recv, batch_isend_irecv) for float32, float16, bfloat16, float64, int32, int64
    and uint8, each against values computed on the CPU; a 16 MiB all_reduce, barrier,
    non-contiguous tensors, async work and futures, coalesced blocks, a subgroup and an object
    collective;
  - CUDA only: stream order (a GPU computation queued behind a long torch.cuda._sleep, then
    all_reduce, then a computation reading its result, with no host synchronisation between:
    the values are right, and the host returned from all_reduce while the GPU was still
    sleeping), the same on a side stream consumed on the default stream after Work.wait(), and
    the error for CPU and CUDA tensors in one call;
  - DDP: a few training steps of a small model on 2 ranks, whose parameters and gradients must
    be identical on both ranks and match a single-process reference on the CPU.

It prints one line per check (PASS, FAIL with the first failing rank's reason, or SKIP for
CUDA-only checks with --device cpu) and a summary. Exit status: 0 when every check passed, 1
when one failed, 2 for a usage or setup error (no batond, no baton package), 77 when --device
cuda (the default) finds no CUDA device: nothing was checked.
"""

from __future__ import annotations

import argparse
import datetime
import os
import pickle
import queue as queue_module
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback

SKIPPED = 77
USAGE_ERROR = 2

DTYPE_NAMES = ["float32", "float16", "bfloat16", "float64", "int32", "int64", "uint8"]
REDUCE_OPS = ["SUM", "PRODUCT", "MIN", "MAX", "AVG"]
MAX_WORLD = 8  # the reference values stay exact in uint8 and bfloat16 up to here

# Element counts: odd, so no size lines up with a vector width or a chunk.
N = 1031
LARGE_N = 1 << 22  # 16 MiB of float32

# How long the GPU is held back before the stream-ordered all_reduce, and the most of it the
# host may spend in the call for the check to count it as having returned before the GPU got
# there.
SLEEP_MS = 400.0
RETURNED_MS = SLEEP_MS / 2

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ---- Reference values (plain torch on the CPU; no process group) ----------------------------


def dtype_of(name):
    import torch

    return getattr(torch, name)


def contribution(rank, n, dtype, op):
    """Rank `rank`'s all_reduce input for `op`: small integers, exact in every checked dtype
    under every op (PRODUCT gets 1s and 2s, so 2^world stays exact in uint8 and bfloat16)."""
    import torch

    i = torch.arange(n, dtype=torch.int64)
    if op == "PRODUCT":
        values = (i + rank) % 2 + 1
    else:
        values = (i * (rank + 2) + rank) % 5 + 1
    return values.to(dtype)


def expected_reduce(world, n, dtype, op):
    """op over the contributions of ranks 0..world-1, as Baton computes it (integer AVG rounds
    down)."""
    import torch

    stack = torch.stack([contribution(r, n, torch.float64, op) for r in range(world)])
    if op == "SUM":
        out = stack.sum(0)
    elif op == "PRODUCT":
        out = stack.prod(0)
    elif op == "MIN":
        out = stack.min(0).values
    elif op == "MAX":
        out = stack.max(0).values
    elif op == "AVG":
        if dtype.is_floating_point:
            out = stack.sum(0) / world
        else:
            out = torch.div(stack.sum(0), world, rounding_mode="floor")
    else:
        raise ValueError(f"unknown reduce op {op}")
    return out.to(dtype)


def values(seed, n, dtype):
    """Small non-negative integers (below 30) that depend on `seed`: sums of up to MAX_WORLD of
    them stay exact in uint8 and bfloat16."""
    import torch

    return ((torch.arange(n, dtype=torch.int64) * 3 + seed * 7) % 30).to(dtype)


def mismatch(got, want):
    """None if `got` equals `want` (same dtype and shape; floats compared exactly unless
    `want` is a float AVG), else a description of the first difference."""
    import torch

    got = got.detach().cpu()
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"got {got.dtype} {tuple(got.shape)}, want {want.dtype} {tuple(want.shape)}"
    if torch.equal(got, want):
        return None
    diff = (got != want).flatten().nonzero()
    first = int(diff[0]) if diff.numel() else 0
    return (f"{diff.numel()} of {want.numel()} elements differ, first at {first}: "
            f"got {got.flatten()[first].item()}, want {want.flatten()[first].item()}")


def close_mismatch(got, want, rtol, atol):
    import torch

    got = got.detach().cpu()
    if got.shape != want.shape:
        return f"got shape {tuple(got.shape)}, want {tuple(want.shape)}"
    if torch.allclose(got.double(), want.double(), rtol=rtol, atol=atol):
        return None
    worst = (got.double() - want.double()).abs().max().item()
    return f"largest difference {worst:.3g} (rtol {rtol}, atol {atol})"


def sleep_cycles(cycles_per_ms, ms):
    """torch.cuda._sleep's argument for `ms` milliseconds at the measured clock."""
    if cycles_per_ms <= 0:
        raise ValueError(f"bad clock measurement: {cycles_per_ms} cycles per ms")
    return max(1, int(cycles_per_ms * ms))


# ---- DDP: the model, its data and the single-process reference ------------------------------

DDP_STEPS = 5
DDP_BATCH = 8
DDP_LR = 0.1


def ddp_model():
    import torch

    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))


def ddp_batch(step, rank):
    import torch

    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(DDP_BATCH, 16, generator=g), torch.randn(DDP_BATCH, 4, generator=g)


def ddp_reference(world):
    """The model trained in one process on every rank's batch at once: with equal batches and a
    mean loss, DDP's averaged gradients are this batch's gradients. Returns (parameters,
    gradients of the last step), CPU float32."""
    import torch

    model = ddp_model()
    opt = torch.optim.SGD(model.parameters(), lr=DDP_LR)
    for step in range(DDP_STEPS):
        xs, ys = zip(*(ddp_batch(step, r) for r in range(world)))
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(torch.cat(xs)), torch.cat(ys)).backward()
        opt.step()
    return ([p.detach().clone() for p in model.parameters()],
            [p.grad.detach().clone() for p in model.parameters()])


# ---- In the rank processes ------------------------------------------------------------------


class Recorder:
    """Each check's outcome on this rank, in order: None, or the first failure's reason."""

    def __init__(self):
        self.results = {}

    def run(self, name, fn, label=""):
        self.results.setdefault(name, None)
        try:
            problem = fn()
        except Exception as e:  # noqa: BLE001 - a failed check, reported by name
            problem = f"{type(e).__name__}: {e}".strip()
        if problem is not None and self.results[name] is None:
            prefix = f"{label}: " if label else ""
            self.results[name] = (prefix + problem)[:400]


def collective_checks(rec, rank, world, device):
    import torch
    import torch.distributed as dist

    def on(t):
        return t.to(device)

    for op_name in REDUCE_OPS:
        op = getattr(dist.ReduceOp, op_name)
        for name in DTYPE_NAMES:
            dtype = dtype_of(name)

            def all_reduce(op_name=op_name, op=op, dtype=dtype):
                t = on(contribution(rank, N, dtype, op_name))
                dist.all_reduce(t, op=op)
                want = expected_reduce(world, N, dtype, op_name)
                if op_name == "AVG" and dtype.is_floating_point:
                    return close_mismatch(t, want, rtol=1e-2, atol=0)
                return mismatch(t, want)

            rec.run(f"all_reduce {op_name}", all_reduce, name)

    def large():
        t = on((torch.arange(LARGE_N) % 7 + rank).to(torch.float32))
        dist.all_reduce(t)
        want = ((torch.arange(LARGE_N) % 7) * world + sum(range(world))).to(torch.float32)
        return mismatch(t, want)

    rec.run("all_reduce 16 MiB float32", large)

    root = world - 1
    for name in DTYPE_NAMES:
        dtype = dtype_of(name)

        def reduce(dtype=dtype):
            t = on(contribution(rank, N, dtype, "MAX"))
            dist.reduce(t, dst=root, op=dist.ReduceOp.MAX)
            return mismatch(t, expected_reduce(world, N, dtype, "MAX")) if rank == root else None

        def broadcast(dtype=dtype):
            src = 1 % world
            t = on(values(rank, N, dtype))
            dist.broadcast(t, src=src)
            return mismatch(t, values(src, N, dtype))

        def all_gather(dtype=dtype):
            outs = [on(torch.zeros(N, dtype=dtype)) for _ in range(world)]
            dist.all_gather(outs, on(values(rank, N, dtype)))
            for q in range(world):
                problem = mismatch(outs[q], values(q, N, dtype))
                if problem:
                    return f"block of rank {q}: {problem}"
            return None

        def all_gather_into_tensor(dtype=dtype):
            out = on(torch.zeros(world * N, dtype=dtype))
            dist.all_gather_into_tensor(out, on(values(rank, N, dtype)))
            return mismatch(out, torch.cat([values(q, N, dtype) for q in range(world)]))

        def reduce_scatter(dtype=dtype):
            # Rank p's piece for rank q is values(p + q): rank q gets the sum over p.
            inputs = [on(values(rank + q, N, dtype)) for q in range(world)]
            out = on(torch.zeros(N, dtype=dtype))
            dist.reduce_scatter(out, inputs)
            want = sum(values(p + rank, N, torch.int64) for p in range(world)).to(dtype)
            return mismatch(out, want)

        def reduce_scatter_tensor(dtype=dtype):
            big = on(torch.cat([values(rank + q, N, dtype) for q in range(world)]))
            out = on(torch.zeros(N, dtype=dtype))
            dist.reduce_scatter_tensor(out, big)
            want = sum(values(p + rank, N, torch.int64) for p in range(world)).to(dtype)
            return mismatch(out, want)

        def all_to_all_single(dtype=dtype):
            m = 7  # elements per block; rank r's block for q is values(r * world + q)
            send = on(torch.cat([values(rank * world + q, m, dtype) for q in range(world)]))
            recv = on(torch.zeros(world * m, dtype=dtype))
            dist.all_to_all_single(recv, send)
            return mismatch(recv, torch.cat([values(q * world + rank, m, dtype)
                                             for q in range(world)]))

        def all_to_all_single_splits(dtype=dtype):
            # Rank r sends r + 1 + j rows of 2 to rank j, valued (10 r + j) % 30.
            in_splits = [rank + 1 + j for j in range(world)]
            out_splits = [q + 1 + rank for q in range(world)]
            send = on(torch.cat([torch.full((s, 2), (10 * rank + j) % 30, dtype=dtype)
                                 for j, s in enumerate(in_splits)]))
            recv = on(torch.zeros(sum(out_splits), 2, dtype=dtype))
            dist.all_to_all_single(recv, send, output_split_sizes=out_splits,
                                   input_split_sizes=in_splits)
            return mismatch(recv, torch.cat([torch.full((s, 2), (10 * q + rank) % 30, dtype=dtype)
                                             for q, s in enumerate(out_splits)]))

        def all_to_all(dtype=dtype):
            send = [on(values(rank * world + j, j + 1, dtype)) for j in range(world)]
            recv = [on(torch.zeros(rank + 1, dtype=dtype)) for _ in range(world)]
            dist.all_to_all(recv, send)
            for q in range(world):
                problem = mismatch(recv[q], values(q * world + rank, rank + 1, dtype))
                if problem:
                    return f"from rank {q}: {problem}"
            return None

        def gather(dtype=dtype):
            outs = [on(torch.zeros(N, dtype=dtype)) for _ in range(world)] if rank == 0 else None
            dist.gather(on(values(rank, N, dtype)), gather_list=outs, dst=0)
            if rank != 0:
                return None
            for q in range(world):
                problem = mismatch(outs[q], values(q, N, dtype))
                if problem:
                    return f"from rank {q}: {problem}"
            return None

        def scatter(dtype=dtype):
            src = world - 1
            pieces = ([on(values(q + 11, N, dtype)) for q in range(world)] if rank == src
                      else None)
            out = on(torch.zeros(N, dtype=dtype))
            dist.scatter(out, scatter_list=pieces, src=src)
            return mismatch(out, values(rank + 11, N, dtype))

        def send_recv(dtype=dtype):
            # A ring in one direction: rank 0 sends first, every other rank receives first, so
            # the messages match in order.
            right, left = (rank + 1) % world, (rank - 1) % world
            buf = on(torch.zeros(N, dtype=dtype))
            if rank == 0:
                dist.send(on(values(rank, N, dtype)), dst=right)
                dist.recv(buf, src=left)
            else:
                dist.recv(buf, src=left)
                dist.send(on(values(rank, N, dtype)), dst=right)
            return mismatch(buf, values(left, N, dtype))

        def batch_isend_irecv(dtype=dtype):
            right, left = (rank + 1) % world, (rank - 1) % world
            buf = on(torch.zeros(N, dtype=dtype))
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.irecv, buf, left),
                                           dist.P2POp(dist.isend, on(values(rank, N, dtype)),
                                                      right)])
            for r in reqs:
                r.wait()
            return mismatch(buf, values(left, N, dtype))

        for check in (reduce, broadcast, all_gather, all_gather_into_tensor, reduce_scatter,
                      reduce_scatter_tensor, all_to_all_single, all_to_all_single_splits,
                      all_to_all, gather, scatter, send_recv, batch_isend_irecv):
            rec.run(check.__name__, check, name)

    def barrier():
        # A barrier that did not wait would let ranks see rank 0's key missing: rank 0 is late.
        store = dist.distributed_c10d._get_default_store()
        if rank == 0:
            time.sleep(0.3)
        store.set(f"gpu-check/barrier/{rank}", "1")
        dist.barrier()
        missing = [q for q in range(world) if not store.check([f"gpu-check/barrier/{q}"])]
        return f"ranks {missing} had not reached the barrier" if missing else None

    def non_contiguous():
        base = on(torch.arange(12, dtype=torch.float32).reshape(3, 4) * (rank + 1))
        dist.all_reduce(base.t())
        total = sum(q + 1 for q in range(world))
        problem = mismatch(base, torch.arange(12, dtype=torch.float32).reshape(3, 4) * total)
        if problem:
            return f"all_reduce of a transposed view: {problem}"
        holder = on(torch.zeros(world, 3, 2))
        dist.all_gather([holder[q].t() for q in range(world)], on(torch.ones(2, 3) * rank))
        for q in range(world):
            problem = mismatch(holder[q].t(), torch.ones(2, 3) * q)
            if problem:
                return f"all_gather into transposed views, block {q}: {problem}"
        return None

    def async_and_future():
        t = on(torch.ones(1000) * rank)
        work = dist.all_reduce(t, async_op=True)
        doubled = work.get_future().then(lambda f: f.value()[0] * 2).wait()
        total = sum(range(world))
        problem = mismatch(doubled, torch.ones(1000) * total * 2)
        if problem:
            return f"future: {problem}"
        work.wait()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if not (work.is_completed() and work.is_success()):
            return "work not completed and successful after wait (and a device synchronize)"
        works = [dist.all_reduce(on(torch.ones(10) * (i + rank)), async_op=True)
                 for i in range(12)]
        for w in works:
            w.wait()
        return mismatch(t, torch.ones(1000) * total)

    def coalesced():
        from torch.distributed.distributed_c10d import _coalescing_manager

        a, b = on(torch.ones(3) * rank), on(torch.ones(5) * (rank + 1))
        with _coalescing_manager(device=device, async_ops=True) as cm:
            dist.all_reduce(a)
            dist.all_reduce(b)
        cm.wait()
        problem = (mismatch(a, torch.ones(3) * sum(range(world)))
                   or mismatch(b, torch.ones(5) * sum(q + 1 for q in range(world))))
        if problem:
            return f"all_reduce: {problem}"
        outs = [on(torch.zeros(world * 4)) for _ in range(2)]
        ins = [on(torch.full((4,), float(rank + 10 * i))) for i in range(2)]
        with _coalescing_manager(device=device, async_ops=True) as cm:
            for out, x in zip(outs, ins):
                dist.all_gather_into_tensor(out, x)
        cm.wait()
        for i in range(2):
            want = torch.cat([torch.full((4,), float(q + 10 * i)) for q in range(world)])
            problem = mismatch(outs[i], want)
            if problem:
                return f"all_gather_into_tensor {i}: {problem}"
        return None

    def subgroup():
        evens = dist.new_group([r for r in range(world) if r % 2 == 0])
        odds = dist.new_group([r for r in range(world) if r % 2 == 1])
        mine = evens if rank % 2 == 0 else odds
        t = on(torch.tensor([float(rank)]))
        dist.all_reduce(t, group=mine)
        return mismatch(t, torch.tensor([float(sum(r for r in range(world)
                                                   if r % 2 == rank % 2))]))

    def object_collective():
        objects = [None] * world
        dist.all_gather_object(objects, {"rank": rank})
        want = [{"rank": q} for q in range(world)]
        return None if objects == want else f"got {objects}"

    for check in (barrier, non_contiguous, async_and_future, coalesced, subgroup,
                  object_collective):
        rec.run(check.__name__, check)


def stream_checks(rec, rank, world, device):
    """CUDA only: the calls are ordered on the current stream and the host does not wait."""
    import torch
    import torch.distributed as dist

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(device)
    start.record()
    torch.cuda._sleep(20_000_000)
    end.record()
    end.synchronize()
    cycles = sleep_cycles(20_000_000 / max(start.elapsed_time(end), 1e-3), SLEEP_MS)

    x = torch.zeros(1 << 20, device=device)
    dist.all_reduce(x)  # registers the memory and this stream's events: not timed
    torch.cuda.synchronize(device)
    total = float(sum(q + 1 for q in range(world)))

    def stream_order():
        t0 = time.perf_counter()
        torch.cuda._sleep(cycles)
        x.fill_(rank + 1)  # the GPU computation the all_reduce must follow
        dist.all_reduce(x)
        returned_ms = (time.perf_counter() - t0) * 1000
        y = x * 2 + 1  # reads the result, on the stream
        torch.cuda.synchronize(device)
        gpu_ms = (time.perf_counter() - t0) * 1000
        problem = mismatch(y, torch.full((1 << 20,), 2 * total + 1))
        if problem:
            return f"values: {problem}"
        if gpu_ms < SLEEP_MS / 2:
            return (f"the GPU was done after {gpu_ms:.0f} ms, not held back {SLEEP_MS:.0f} ms: "
                    "the timing proves nothing (torch.cuda._sleep calibration)")
        if returned_ms > RETURNED_MS:
            return (f"the host spent {returned_ms:.0f} ms in sleep + all_reduce: it waited for "
                    f"the GPU (done after {gpu_ms:.0f} ms)")
        return None

    def async_stream_order():
        t0 = time.perf_counter()
        torch.cuda._sleep(cycles)
        x.fill_(rank + 2)
        work = dist.all_reduce(x, async_op=True)
        early = work.is_completed()
        work.wait()  # never waits for the GPU
        returned_ms = (time.perf_counter() - t0) * 1000
        y = x * 3
        if early:
            return "is_completed() was true while the GPU was still asleep before the call"
        if returned_ms > RETURNED_MS:
            return f"all_reduce + wait() took {returned_ms:.0f} ms of the host: it waited"
        torch.cuda.synchronize(device)
        if not work.is_completed():
            return "is_completed() false after a device synchronize"
        value = work.get_future().wait()[0]
        return (mismatch(y, torch.full((1 << 20,), 3 * (total + world)))
                or mismatch(value, torch.full((1 << 20,), total + world)))

    def side_stream():
        # A call on a side stream, consumed on the default stream after Work.wait(): wait()
        # makes the current stream wait for the work.
        side = torch.cuda.Stream(device=device)
        z = torch.zeros(1 << 20, device=device)
        torch.cuda.synchronize(device)
        with torch.cuda.stream(side):
            torch.cuda._sleep(cycles)
            z.fill_(rank + 3)
            work = dist.all_reduce(z, async_op=True)
        work.wait()
        w = z * 5  # on the default stream
        torch.cuda.synchronize(device)
        return mismatch(w, torch.full((1 << 20,), 5 * (total + 2 * world)))

    def mixed_devices():
        try:
            dist.all_gather_into_tensor(torch.zeros(world * 4), torch.ones(4, device=device))
        except ValueError as e:
            return None if "same device" in str(e) else f"unexpected message: {e}"
        return "a call with a CPU output and a CUDA input did not fail"

    for check in (stream_order, async_stream_order, side_stream, mixed_devices):
        rec.run(check.__name__, check)


def ddp_run(rank, world, device):
    import torch
    from torch.nn.parallel import DistributedDataParallel

    import baton.torch as bt

    model = ddp_model().to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda"
                                  else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=DDP_LR)
    for step in range(DDP_STEPS):
        x, y = ddp_batch(step, rank)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x.to(device)), y.to(device)).backward()
        opt.step()
    params = [p.detach().cpu() for p in model.parameters()]
    grads = [p.grad.detach().cpu() for p in model.parameters()]
    return params, grads, bt.backend_of().operations("all_reduce")


def rank_main(phase, rank, world, socket_path, init_method, device_kind, results):
    os.environ["BATON_SOCKET"] = socket_path
    try:
        import torch
        import torch.distributed as dist

        import baton.torch  # noqa: F401 - registers the backend

        kwargs = {}
        if device_kind == "cuda":
            device = torch.device("cuda", rank % torch.cuda.device_count())
            torch.cuda.set_device(device)
            kwargs["device_id"] = device
        else:
            device = torch.device("cpu")
        dist.init_process_group("baton", init_method=init_method, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=30), **kwargs)
        if phase == "ddp":
            value = ddp_run(rank, world, device)
        else:
            rec = Recorder()
            collective_checks(rec, rank, world, device)
            if device_kind == "cuda":
                stream_checks(rec, rank, world, device)
            value = rec.results
        dist.destroy_process_group()
        results.put((rank, "ok", pickle.dumps(value)))
    except BaseException:  # noqa: BLE001 - reported to the parent as this rank's failure
        results.put((rank, "error", traceback.format_exc()))


# ---- The parent: daemons, rank processes, the report ----------------------------------------


class Daemons:
    """`nodes` batond processes on 127.0.0.1 (no TLS) in a temporary folder, stopped on exit.
    sockets[i] is node-i's session socket."""

    def __init__(self, batond, nodes, device):
        self.batond = batond
        self.nodes = nodes
        self.device = device
        self.procs = []
        self.dir = None
        self.sockets = []

    def __enter__(self):
        self.dir = tempfile.mkdtemp(prefix="baton-gpu-check-")
        try:
            ready = []
            for i in range(self.nodes):
                name = f"node-{i}"
                sock = os.path.join(self.dir, f"{name}.sock")
                ready.append(os.path.join(self.dir, f"{name}.ready"))
                with open(os.path.join(self.dir, f"{name}.log"), "w") as log:
                    self.procs.append(subprocess.Popen(
                        [self.batond, f"--node-name={name}", f"--socket={sock}",
                         "--peer-listen=127.0.0.1:0", "--data-listen=127.0.0.1:0",
                         "--metrics-listen=127.0.0.1:0", "--advertise-host=127.0.0.1",
                         f"--ready-file={ready[-1]}", f"--device={self.device}"],
                        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
                self.sockets.append(sock)
            deadline = time.monotonic() + 30
            for i, path in enumerate(ready):
                while not os.path.exists(path):
                    if self.procs[i].poll() is not None:
                        raise RuntimeError(f"node-{i} exited ({self.procs[i].returncode}) during "
                                           f"start:\n{self.log_tail(i)}")
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"node-{i} was not ready within 30 s:\n"
                                           f"{self.log_tail(i)}")
                    time.sleep(0.02)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def log_tail(self, i, chars=3000):
        try:
            with open(os.path.join(self.dir, f"node-{i}.log"), errors="replace") as f:
                return f.read()[-chars:]
        except OSError as e:
            return f"(no log: {e})"

    def __exit__(self, *exc):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        return False


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_ranks(phase, world, sockets, device_kind, deadline_s):
    """Runs rank_main for ranks 0..world-1 (rank r on daemon sockets[r % len(sockets)]).
    Returns (values by rank, None entries for ranks that failed; list of error texts)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    init_method = f"tcp://127.0.0.1:{free_port()}"
    procs = [ctx.Process(target=rank_main,
                         args=(phase, r, world, sockets[r % len(sockets)], init_method,
                               device_kind, results))
             for r in range(world)]
    for p in procs:
        p.start()
    values_by_rank = [None] * world
    errors = []
    end = time.monotonic() + deadline_s
    for _ in range(world):
        try:
            rank, status, value = results.get(timeout=max(end - time.monotonic(), 0.1))
        except queue_module.Empty:
            errors.append(f"ranks did not all finish within {deadline_s} s")
            break
        if status == "ok":
            values_by_rank[rank] = pickle.loads(value)
        else:
            errors.append(f"rank {rank}:\n{value}")
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
            p.join()
    return values_by_rank, errors


class Report:
    def __init__(self):
        self.passed = self.failed = self.skipped = 0

    def line(self, status, name, detail=""):
        if status == "PASS":
            self.passed += 1
        elif status == "FAIL":
            self.failed += 1
        else:
            self.skipped += 1
        print(f"{status} {name}{': ' + detail if detail else ''}", flush=True)

    def merge(self, prefix, per_rank):
        """One line per check named by every rank: PASS if it passed on all."""
        names = []
        for results in per_rank:
            for name in results or {}:
                if name not in names:
                    names.append(name)
        for name in names:
            failures = [(r, results.get(name)) for r, results in enumerate(per_rank)
                        if results is not None and results.get(name) is not None]
            if failures:
                rank, why = failures[0]
                more = f" (and {len(failures) - 1} more ranks)" if len(failures) > 1 else ""
                self.line("FAIL", f"{prefix} {name}", f"rank {rank}: {why}{more}")
            else:
                self.line("PASS", f"{prefix} {name}")


def check_ddp(report, prefix, per_rank, world):
    import torch

    ref_params, ref_grads = ddp_reference(world)
    params0, grads0, _ = per_rank[0]
    same = all(torch.equal(a, b) for r in range(1, world)
               for a, b in zip(params0 + grads0, per_rank[r][0] + per_rank[r][1]))
    report.line("PASS" if same else "FAIL", f"{prefix} ddp parameters and gradients identical "
                "on every rank")
    worst = max((a - b).abs().max().item() for a, b in zip(params0 + grads0,
                                                          ref_params + ref_grads))
    close = all(torch.allclose(a, b, rtol=1e-4, atol=1e-5)
                for a, b in zip(params0 + grads0, ref_params + ref_grads))
    report.line("PASS" if close else "FAIL",
                f"{prefix} ddp {DDP_STEPS} steps equal the single-process reference",
                f"largest difference {worst:.2e}")
    counts = [p[2] for p in per_rank]
    report.line("PASS" if all(c >= DDP_STEPS for c in counts) else "FAIL",
                f"{prefix} ddp gradients all-reduced through baton",
                f"all_reduce operations per rank {counts}")


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="gpu_torch_check.py",
        usage="BATOND=<batond> PYTHONPATH=<folder holding the built baton package> "
              "<python with torch> tests/python/gpu_torch_check.py [options]",
        description="torch.distributed through the baton backend on CUDA tensors (exit 0: "
                    "all passed, 1: a check failed, 2: usage or setup error, 77: no CUDA "
                    "device, nothing checked).")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="tensors to check (cpu runs the same checks without the CUDA-only "
                             "ones; default cuda)")
    parser.add_argument("--batond", default=os.environ.get("BATOND") or
                        os.path.join(ROOT, "build", "bin", "batond"),
                        help="the daemon binary (default $BATOND, else build/bin/batond)")
    parser.add_argument("--daemon-device", choices=["auto", "cuda", "none", "fake"],
                        default="auto", help="batond's --device (default auto)")
    parser.add_argument("--worlds", default="2,4",
                        help="world sizes, comma-separated (default 2,4; 2 ranks use one "
                             "daemon, more use two)")
    parser.add_argument("--deadline", type=float, default=120,
                        help="seconds each world size's rank processes may take (default 120)")
    parser.add_argument("--no-ddp", action="store_true", help="skip the DDP check")
    args = parser.parse_args(argv)
    try:
        args.worlds = [int(w) for w in args.worlds.split(",") if w.strip()]
    except ValueError:
        parser.error(f"--worlds: not a list of integers: {args.worlds!r}")
    if not args.worlds or any(w < 2 or w > MAX_WORLD for w in args.worlds):
        parser.error(f"--worlds: each world size must be between 2 and {MAX_WORLD}")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        import torch
    except ImportError as e:
        print(f"setup error: torch does not import ({e})", file=sys.stderr)
        return USAGE_ERROR
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"SKIP: CUDA is not available (torch {torch.__version__}, built for CUDA "
              f"{torch.version.cuda}, {torch.cuda.device_count()} devices): nothing checked")
        return SKIPPED
    try:
        import baton.torch  # noqa: F401
    except ImportError as e:
        print(f"setup error: the baton package or its torch backend does not import ({e}); "
              "set PYTHONPATH to the folder holding the built package", file=sys.stderr)
        return USAGE_ERROR
    if not os.access(args.batond, os.X_OK):
        print(f"setup error: no batond at {args.batond} (set BATOND or --batond)",
              file=sys.stderr)
        return USAGE_ERROR

    start = time.monotonic()
    gpu = torch.cuda.get_device_name(0) if args.device == "cuda" else "none"
    print(f"gpu_torch_check: torch {torch.__version__}, device {args.device} (GPU: {gpu}), "
          f"batond {args.batond} --device={args.daemon_device}", flush=True)
    report = Report()
    phases = [("collectives", w) for w in args.worlds]
    if not args.no_ddp:
        phases.append(("ddp", 2))
    for phase, world in phases:
        nodes = 1 if world == 2 else 2
        prefix = f"world={world} daemons={nodes}"
        began = time.monotonic()
        try:
            with Daemons(args.batond, nodes, args.daemon_device) as daemons:
                per_rank, errors = spawn_ranks(phase, world, daemons.sockets, args.device,
                                               args.deadline)
                if errors:
                    for i in range(nodes):
                        print(f"---- node-{i}.log (tail) ----\n{daemons.log_tail(i)}",
                              file=sys.stderr)
        except RuntimeError as e:
            report.line("FAIL", f"{prefix} daemons", str(e))
            continue
        for error in errors:
            report.line("FAIL", f"{prefix} {phase}", error.strip().replace("\n", "\n    "))
        if phase == "ddp":
            if not errors:
                check_ddp(report, prefix, per_rank, world)
        else:
            report.merge(prefix, per_rank)
            if args.device != "cuda":
                report.line("SKIP", f"{prefix} stream order, side stream, mixed devices",
                            "need CUDA")
        print(f"-- {prefix} {phase}: {time.monotonic() - began:.1f} s", flush=True)
    print(f"gpu_torch_check: {report.passed} passed, {report.failed} failed, {report.skipped} "
          f"skipped in {time.monotonic() - start:.1f} s")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
