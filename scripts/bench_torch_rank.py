"""The rank side of scripts/bench_torch.py: what each rank process runs (`bench_torch.py rank`,
`bench_torch.py overhead`'s ranks), and libbaton's C API through ctypes for the "baton-capi"
backend. Imported by bench_torch.py; not run on its own."""

from __future__ import annotations

import json
import statistics
import sys
import time


def log(msg: str) -> None:
    print(f"bench_torch: {msg}", file=sys.stderr, flush=True)


F32, SUM = 8, 0  # BATON_FLOAT32, BATON_SUM (client/include/baton/baton.h)


def load_libbaton(path: str):
    """libbaton's C API through ctypes, with the signatures this script calls."""
    import ctypes

    lib = ctypes.CDLL(path)
    vp, i64, size_t, c_int = ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t, ctypes.c_int
    lib.baton_client_create_comm_id.argtypes = [vp, ctypes.c_char_p, size_t]
    lib.baton_client_join.argtypes = [vp, ctypes.c_char_p, c_int, c_int, i64, ctypes.POINTER(vp)]
    lib.baton_client_alloc.argtypes = [vp, size_t, ctypes.POINTER(vp)]
    lib.baton_all_reduce.argtypes = [vp, vp, vp, size_t, c_int, c_int, vp]
    lib.baton_all_gather.argtypes = [vp, vp, vp, size_t, c_int, vp]
    lib.baton_barrier.argtypes = [vp, vp]
    lib.baton_comm_rank.argtypes = [vp]
    lib.baton_last_error.restype = ctypes.c_char_p

    def ok(code, what):
        if code != 0:
            raise RuntimeError(f"baton {what}: {code} {lib.baton_last_error().decode()}")

    lib.ok = ok
    return lib


class CApiComm:
    """The C API through ctypes from a rank process, on a communicator of its own over the same
    ranks, joined through the backend's client (baton.default_client()): the "baton-capi"
    backend, the c10d path's reference in the same processes. Plain tensors, staged by libbaton
    like the backend's."""

    def __init__(self, libpath: str, rank: int, world: int, share):
        import ctypes

        import baton

        self.lib = lib = load_libbaton(libpath)
        self.client, self.comm = ctypes.c_void_p(baton.default_client().handle), ctypes.c_void_p()
        comm_id = ctypes.create_string_buffer(256)
        if rank == 0:
            lib.ok(lib.baton_client_create_comm_id(self.client, comm_id, 256), "create_comm_id")
        comm_id.value = share(comm_id.value)
        lib.ok(lib.baton_client_join(self.client, comm_id.value, world, rank, 300000,
                                     ctypes.byref(self.comm)), "join")

    def barrier(self):
        self.lib.ok(self.lib.baton_barrier(self.comm, None), "barrier")

    def call(self, op, inp, out):
        if op == "all_reduce":
            p = inp.data_ptr()
            self.lib.ok(self.lib.baton_all_reduce(self.comm, p, p, inp.numel(), F32, SUM, None),
                        "all_reduce")
        else:
            self.lib.ok(self.lib.baton_all_gather(self.comm, inp.data_ptr(), out.data_ptr(),
                                                  inp.numel(), F32, None), "all_gather")


def rank_main(a) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    import baton.torch as bt

    rank, world = a.rank, a.world
    timeout = datetime.timedelta(seconds=a.op_timeout)
    dist.init_process_group("baton", init_method=a.init, rank=rank, world_size=world,
                            timeout=timeout)
    groups = {"baton": dist.group.WORLD, "baton-shm": dist.group.WORLD,
              "gloo": dist.new_group(backend="gloo", timeout=timeout)}
    ctl = groups["gloo"]  # agreements and the times' gathering, never timed
    backends = a.backends.split(",")
    capi = None
    if "baton-capi" in backends:
        def share(value):
            box = [value]
            dist.broadcast_object_list(box, src=0, group=ctl)
            return box[0]

        capi = CApiComm(a.libbaton, rank, world, share)
    ops = a.ops.split(",")
    sizes = [int(s) for s in a.sizes.split(",")]

    def agree_max(values):
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ctl)
        return t.tolist()

    def tensors(backend, op, count):
        """(input, output) for one call; all_gather's input has `count` elements, its output
        count * world. Zeros, so repeated all-reduces stay finite."""
        make = (lambda n: bt.zeros(n)) if backend == "baton-shm" else (lambda n: torch.zeros(n))
        if op == "all_reduce":
            t = make(count)
            return t, t
        return make(count), make(count * world)

    def call(op, group, inp, out):
        if group is None:
            capi.call(op, inp, out)
        elif op == "all_reduce":
            dist.all_reduce(inp, group=group)
        else:
            dist.all_gather_into_tensor(out, inp, group=group)

    def check(op, group, inp, out):
        inp.fill_(rank + 1)
        call(op, group, inp, out)
        if op == "all_reduce":
            wrong = int((out != world * (world + 1) / 2).sum())
        else:
            want = torch.arange(1, world + 1, dtype=out.dtype).repeat_interleave(inp.numel())
            wrong = int((out != want).sum())
        return int(agree_max([wrong])[0])  # the worst rank's count

    def sync(group):
        if group is None:
            capi.barrier()
        else:
            dist.barrier(group=group)

    def measure(backend, op, count):
        group = groups.get(backend)  # None: baton-capi
        inp, out = tensors(backend, op, count)
        # Two warm-up calls; the second's time (the slowest rank's, so that every rank runs the
        # same number) sets how many more warm-up and how many timed iterations fit the budget.
        sync(group)
        call(op, group, inp, out)
        sync(group)
        t0 = time.perf_counter()
        call(op, group, inp, out)
        second = max(agree_max([time.perf_counter() - t0])[0], 1e-9)
        warm = max(0, min(a.warmup, int(a.budget / 4 / second)) - 2)
        iters = max(a.min_iters, min(a.iters, int(a.budget / second)))
        for _ in range(warm):
            if a.barrier:
                sync(group)
            call(op, group, inp, out)
        times = []
        if not a.barrier:
            sync(group)
        cpu0 = time.process_time()
        for _ in range(iters):
            if a.barrier:
                sync(group)
            t0 = time.perf_counter_ns()
            call(op, group, inp, out)
            times.append((time.perf_counter_ns() - t0) * 1e-9)
        cpu = time.process_time() - cpu0  # this process's CPU, all threads, barriers included
        slowest = agree_max(times)
        cpu_ranks = torch.tensor([cpu / iters], dtype=torch.float64)
        dist.all_reduce(cpu_ranks, group=ctl)
        wrong = check(op, group, inp, out)
        del inp, out
        return {"median_s": statistics.median(slowest), "min_s": min(slowest),
                "max_s": max(slowest), "iters": iters, "warmup": warm + 2, "wrong": wrong,
                "own_median_s": statistics.median(times),
                "ranks_cpu_per_iter_s": float(cpu_ranks[0])}

    # Untimed calls of every op and backend at the smallest size first, so that the first size
    # measured does not pay for the first use of the connections (the daemons' links, Gloo's
    # pairs) and of the tuner.
    for op in ops:
        for backend in backends:
            group = groups.get(backend)
            inp, out = tensors(backend, op, 1)
            for _ in range(a.sweep_warmup):
                sync(group)
                call(op, group, inp, out)

    results = []
    for op in ops:
        done = set()
        for k, size in enumerate(sizes):
            # all_gather's size is its output's: world blocks of at least one element each
            elements = max(1, size // 4) if op == "all_reduce" else max(1, size // 4 // world)
            nbytes = elements * 4 * (1 if op == "all_reduce" else world)
            if nbytes in done:
                continue
            done.add(nbytes)
            order = backends if k % 2 == 0 else list(reversed(backends))
            row = {"op": op, "bytes": nbytes, "elements": elements, "by_backend": {}}
            for backend in order:
                row["by_backend"][backend] = measure(backend, op, elements)
            results.append(row)
            if rank == 0:
                log(f"{op} {nbytes} B: " + ", ".join(
                    f"{b} {row['by_backend'][b]['median_s'] * 1e6:.1f} us" for b in backends))
    dist.barrier(group=ctl)
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump({"world": world, "results": results, "torch": torch.__version__}, f,
                      indent=1)
    dist.destroy_process_group()


# ---- the overhead measurement (one process, world 1) --------------------------------------------


def overhead_main(a) -> None:
    import ctypes
    import datetime

    import torch
    import torch.distributed as dist

    import baton
    import baton.torch as bt

    dist.init_process_group("baton", init_method=a.init, rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=60))
    gloo = dist.new_group(backend="gloo")
    pg = dist.group.WORLD
    backend = pg._get_backend(torch.device("cpu"))
    t = torch.zeros(2)  # 8 bytes of float32
    sync = dist.AllreduceOptions()
    sync.asyncOp = False  # as dist.all_reduce(t) sets it: the backend's blocking path
    s = bt.zeros(2)

    # The C API through ctypes, on a communicator of its own (world 1, same daemon).
    lib = load_libbaton(a.libbaton)
    vp, ok = ctypes.c_void_p, lib.ok

    # The backend's own client (one session with the daemon for every variant), so that each
    # call is served by the same daemon threads.
    client, comm, shared = vp(baton.default_client().handle), vp(), vp()
    comm_id = ctypes.create_string_buffer(256)
    ok(lib.baton_client_create_comm_id(client, comm_id, 256), "create_comm_id")
    ok(lib.baton_client_join(client, comm_id.value, 1, 0, 60000, ctypes.byref(comm)), "join")
    ok(lib.baton_client_alloc(client, 8, ctypes.byref(shared)), "alloc")
    plain = (ctypes.c_float * 2)()
    plain_p = ctypes.cast(plain, vp)
    f32, sum_op = F32, SUM

    variants = [
        ("dist.all_reduce(t), baton", lambda: dist.all_reduce(t)),
        ("dist.all_reduce(t), t from baton.torch.zeros", lambda: dist.all_reduce(s)),
        ("ProcessGroup.allreduce([t]).wait()", lambda: pg.allreduce([t], sync).wait()),
        ("BatonBackend.allreduce([t]).wait()", lambda: backend.allreduce([t], sync).wait()),
        ("ctypes baton_all_reduce, plain buffer",
         lambda: lib.baton_all_reduce(comm, plain_p, plain_p, 2, f32, sum_op, None)),
        ("ctypes baton_all_reduce, baton_client_alloc buffer",
         lambda: lib.baton_all_reduce(comm, shared, shared, 2, f32, sum_op, None)),
        ("ctypes baton_all_reduce(NULL comm): returns at once",
         lambda: lib.baton_all_reduce(None, plain_p, plain_p, 2, f32, sum_op, None)),
        ("ctypes baton_comm_rank(comm)", lambda: lib.baton_comm_rank(comm)),
        ("dist.all_reduce(t), gloo (world 1: no peer)", lambda: dist.all_reduce(t, group=gloo)),
        ("empty timed call (the timer itself)", lambda: None),
    ]
    pyclient = baton.default_client()  # the package's binding, on its own communicator
    pycomm = pyclient.join(pyclient.create_comm_id(), 1, 0)
    variants.insert(4, ("baton Communicator.all_reduce(t)", lambda: pycomm.all_reduce(t)))

    # Back to back, a call may find the daemon still spinning for the next one; after a pause
    # (as between the collectives of a training step) it has gone to sleep and must be woken.
    gap_ns = int(a.gap_us * 1000)
    if gap_ns > 0:
        by_name = dict(variants)
        variants[-1:-1] = [
            (f"{name}, after a pause", by_name[name], gap_ns)
            for name in ("dist.all_reduce(t), baton", "ctypes baton_all_reduce, plain buffer")]
    variants = [v if len(v) == 3 else (*v, 0) for v in variants]

    ok(lib.baton_all_reduce(comm, plain_p, plain_p, 2, f32, sum_op, None), "all_reduce")
    samples = {name: [] for name, _, _ in variants}
    round_medians = {name: [] for name, _, _ in variants}
    pc = time.perf_counter_ns
    for name, fn, _ in variants:  # warm-up
        for _ in range(a.warmup):
            fn()
    for _ in range(a.rounds):  # the variants take turns, a.calls calls each per round
        for name, fn, gap in variants:
            mine = [0] * a.calls
            for i in range(a.calls):
                if gap:
                    until = pc() + gap
                    while pc() < until:  # busy: a sleep would give the CPU away
                        pass
                t0 = pc()
                fn()
                mine[i] = pc() - t0
            samples[name].extend(mine)
            round_medians[name].append(statistics.median(mine) / 1e3)
    out = {"variants": [], "torch": torch.__version__}
    for name, _, _ in variants:
        xs = sorted(samples[name])
        out["variants"].append({
            "name": name, "median_us": statistics.median(xs) / 1e3,
            "p90_us": xs[int(len(xs) * 0.9)] / 1e3, "p99_us": xs[int(len(xs) * 0.99)] / 1e3,
            "mean_us": statistics.fmean(xs) / 1e3,
            "round_medians_us": round_medians[name], "calls": len(xs)})
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    dist.destroy_process_group()


# ---- the driver ---------------------------------------------------------------------------------
