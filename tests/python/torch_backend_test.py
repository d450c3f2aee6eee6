"""torch.distributed through the `baton` backend, as PyTorch users call it: every collective,
dtype and reduce op against values computed here, subgroups, async work and futures,
non-contiguous tensors, batch_isend_irecv, and the errors (unsupported types, timeouts naming
the peer). Four ranks on two daemons, then torchrun."""

import datetime
import functools
import os
import subprocess
import sys
import tempfile
import time

from baton_testing import LocalCluster, free_port, import_torch_backend, run_ranks

torch = import_torch_backend()
import torch.distributed as dist  # noqa: E402

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int32, torch.int64]


def contribution(rank, n, dtype):
    """Rank `rank`'s input: small integers, exact in every dtype and under every op."""
    values = (torch.arange(n, dtype=torch.int64) * (rank + 2) + rank) % 5 + 1
    return values.to(dtype)


def expected(world, n, dtype, op):
    stack = torch.stack([contribution(r, n, torch.float64) for r in range(world)])
    if op == dist.ReduceOp.SUM:
        out = stack.sum(0)
    elif op == dist.ReduceOp.PRODUCT:
        out = stack.prod(0)
    elif op == dist.ReduceOp.MIN:
        out = stack.min(0).values
    elif op == dist.ReduceOp.MAX:
        out = stack.max(0).values
    else:  # AVG
        out = stack.sum(0) / world
        if not dtype.is_floating_point:
            out = torch.div(stack.sum(0), world, rounding_mode="floor")
    return out.to(dtype)


def check(name, got, want):
    if not torch.equal(got, want):
        raise AssertionError(f"{name}: got {got.tolist()[:16]}, want {want.tolist()[:16]}")


def collectives(rank, world):
    import baton.torch as bt

    n = 37
    ops = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX,
           dist.ReduceOp.AVG]
    for dtype in DTYPES:
        for op in ops:
            if op == dist.ReduceOp.PRODUCT and dtype in (torch.int8, torch.uint8):
                continue  # 5^4 overflows; covered by the wider types
            t = contribution(rank, n, dtype)
            dist.all_reduce(t, op=op)
            check(f"all_reduce {dtype} {op}", t, expected(world, n, dtype, op))

    # bool: SUM is a logical or, PRODUCT a logical and.
    b = torch.tensor([rank == 0, True, False, rank % 2 == 1])
    dist.all_reduce(b)
    check("all_reduce bool sum", b, torch.tensor([True, True, False, True]))
    b = torch.tensor([rank == 0, True, False, rank % 2 == 1])
    dist.all_reduce(b, op=dist.ReduceOp.PRODUCT)
    check("all_reduce bool product", b, torch.tensor([False, True, False, False]))

    # complex: elementwise sums of real and imaginary parts.
    c = torch.tensor([1 + 2j, rank - 1j], dtype=torch.complex64)
    dist.all_reduce(c)
    want_c = torch.tensor([world * (1 + 2j), sum(range(world)) - world * 1j],
                          dtype=torch.complex64)
    check("all_reduce complex64", c, want_c)

    # broadcast from each root; reduce to each root.
    for root in range(world):
        t = torch.full((5,), float(rank * 10))
        dist.broadcast(t, src=root)
        check(f"broadcast root {root}", t, torch.full((5,), float(root * 10)))
        t = contribution(rank, n, torch.float32)
        dist.reduce(t, dst=root, op=dist.ReduceOp.MAX)
        if rank == root:
            check(f"reduce root {root}", t, expected(world, n, torch.float32, dist.ReduceOp.MAX))

    # all_gather (list and into one tensor), gather, scatter.
    mine = torch.arange(6, dtype=torch.float32).reshape(2, 3) + 100 * rank
    outs = [torch.zeros(2, 3) for _ in range(world)]
    dist.all_gather(outs, mine)
    for r in range(world):
        check(f"all_gather from {r}", outs[r], torch.arange(6.0).reshape(2, 3) + 100 * r)
    into = torch.zeros(world * 2, 3)
    dist.all_gather_into_tensor(into, mine)
    check("all_gather_into_tensor", into,
          torch.cat([torch.arange(6.0).reshape(2, 3) + 100 * r for r in range(world)]))
    gathered = [torch.zeros(2, 3) for _ in range(world)] if rank == 1 else None
    dist.gather(mine, gather_list=gathered, dst=1)
    if rank == 1:
        for r in range(world):
            check(f"gather from {r}", gathered[r], torch.arange(6.0).reshape(2, 3) + 100 * r)
    piece = torch.zeros(4, dtype=torch.int64)
    pieces = [torch.full((4,), 7 * r, dtype=torch.int64) for r in range(world)] if rank == 2 \
        else None
    dist.scatter(piece, scatter_list=pieces, src=2)
    check("scatter", piece, torch.full((4,), 7 * rank, dtype=torch.int64))

    # reduce_scatter (list and tensor).
    inputs = [torch.full((3,), float(rank + r)) for r in range(world)]
    out = torch.zeros(3)
    dist.reduce_scatter(out, inputs)
    check("reduce_scatter", out, torch.full((3,), float(sum(q + rank for q in range(world)))))
    big = torch.arange(world * 3, dtype=torch.float32) * (rank + 1)
    out = torch.zeros(3)
    dist.reduce_scatter_tensor(out, big)
    total = sum(q + 1 for q in range(world))
    check("reduce_scatter_tensor", out, torch.arange(rank * 3, rank * 3 + 3.0) * total)

    # all_to_all_single: even, and with split sizes (rank r sends r+1+j rows to rank j).
    send = torch.arange(world * 2, dtype=torch.float32) + 100 * rank
    recv = torch.zeros(world * 2)
    dist.all_to_all_single(recv, send)
    check("all_to_all_single", recv,
          torch.cat([torch.tensor([100.0 * r + 2 * rank, 100.0 * r + 2 * rank + 1])
                     for r in range(world)]))
    in_splits = [rank + 1 + j for j in range(world)]
    out_splits = [r + 1 + rank for r in range(world)]
    send = torch.cat([torch.full((s, 2), float(10 * rank + j)) for j, s in enumerate(in_splits)])
    recv = torch.zeros(sum(out_splits), 2)
    dist.all_to_all_single(recv, send, output_split_sizes=out_splits,
                           input_split_sizes=in_splits)
    check("all_to_all_single splits", recv,
          torch.cat([torch.full((s, 2), float(10 * r + rank)) for r, s in enumerate(out_splits)]))
    # all_to_all (lists of tensors of different sizes).
    send_list = [torch.full((j + 1,), float(rank * 10 + j)) for j in range(world)]
    recv_list = [torch.zeros(rank + 1) for _ in range(world)]
    dist.all_to_all(recv_list, send_list)
    for r in range(world):
        check(f"all_to_all from {r}", recv_list[r], torch.full((rank + 1,), float(r * 10 + rank)))

    # send/recv, and a ring of batch_isend_irecv.
    if rank == 0:
        dist.send(torch.arange(5.0), dst=3)
    elif rank == 3:
        t = torch.zeros(5)
        dist.recv(t, src=0)
        check("send/recv", t, torch.arange(5.0))
    right, left = (rank + 1) % world, (rank - 1) % world
    out_t = torch.full((8,), float(rank))
    in_t = torch.zeros(8)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.irecv, in_t, left),
                                   dist.P2POp(dist.isend, out_t, right)])
    for r in reqs:
        r.wait()
    check("batch_isend_irecv ring", in_t, torch.full((8,), float(left)))

    # async_op, wait and futures.
    t = torch.ones(1000) * rank
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future().then(lambda f: f.value()[0] * 2)
    check("future", fut.wait(), torch.ones(1000) * sum(range(world)) * 2)
    assert work.is_completed() and work.is_success()
    work.wait()
    works = [dist.all_reduce(torch.ones(10) * (i + rank), async_op=True) for i in range(8)]
    for w in works:
        w.wait()

    # Non-contiguous tensors: a transposed view reduced in place, gathers into strided outputs.
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4) * (rank + 1)
    view = base.t()
    assert not view.is_contiguous()
    dist.all_reduce(view)
    check("all_reduce non-contiguous", base, torch.arange(12.0).reshape(3, 4) * total)
    holder = torch.zeros(world, 3, 2)
    outs = [holder[r].t() for r in range(world)]  # (2, 3) views, non-contiguous
    dist.all_gather(outs, torch.ones(2, 3) * rank)
    for r in range(world):
        check(f"all_gather non-contiguous {r}", holder[r].t(), torch.ones(2, 3) * r)

    # Coalesced all_reduce through the coalescing manager.
    from torch.distributed.distributed_c10d import _coalescing_manager
    a, b2 = torch.ones(3) * rank, torch.ones(5) * (rank + 1)
    with _coalescing_manager(async_ops=True) as cm:
        dist.all_reduce(a)
        dist.all_reduce(b2)
    cm.wait()
    check("coalesced a", a, torch.ones(3) * sum(range(world)))
    check("coalesced b", b2, torch.ones(5) * total)

    # Subgroups: even and odd ranks, each its own communicator; and a group of one.
    evens = dist.new_group([r for r in range(world) if r % 2 == 0])
    odds = dist.new_group([r for r in range(world) if r % 2 == 1])
    mine_group = evens if rank % 2 == 0 else odds
    t = torch.tensor([float(rank)])
    dist.all_reduce(t, group=mine_group)
    check("subgroup all_reduce", t,
          torch.tensor([float(sum(r for r in range(world) if r % 2 == rank % 2))]))
    t = torch.tensor([float(rank)])
    dist.broadcast(t, group_src=1, group=mine_group)
    group_ranks = [r for r in range(world) if r % 2 == rank % 2]
    check("subgroup broadcast", t, torch.tensor([float(group_ranks[1])]))
    assert bt.backend_of(mine_group).comm_id != bt.backend_of().comm_id

    # Object collectives (pickled objects through all_gather and broadcast).
    objects = [None] * world
    dist.all_gather_object(objects, {"rank": rank, "name": f"r{rank}"})
    assert objects == [{"rank": r, "name": f"r{r}"} for r in range(world)], objects
    box = [f"from {rank}", rank] if rank == 2 else [None, None]
    dist.broadcast_object_list(box, src=2)
    assert box == ["from 2", 2], box

    # Zero-copy tensors from the daemon's shared memory.
    z = bt.empty(1024, dtype=torch.float32)
    z.fill_(rank + 1)
    dist.all_reduce(z)
    check("shared-memory tensor", z, torch.full((1024,), float(total)))
    dist.barrier()
    return bt.backend_of().operations("all_reduce")


def errors(rank, world, signal_dir):
    """`signal_dir`: an empty directory the ranks share, where rank 0 tells rank 1 when to go."""
    import baton.torch as bt

    # A type Baton does not have: TypeError naming it, and nothing sent.
    try:
        dist.all_reduce(torch.ones(3, dtype=torch.int16))
        raise AssertionError("int16 all_reduce did not fail")
    except TypeError as e:
        assert "Short" in str(e) or "int16" in str(e), str(e)
    # A reduce op Baton does not have.
    try:
        dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist.ReduceOp.BAND)
        raise AssertionError("BAND did not fail")
    except ValueError as e:
        assert "BAND" in str(e), str(e)
    # A tensor on a device other than the CPU or CUDA names the device (called on the backend
    # directly: torch routes only CPU and CUDA tensors to this backend).
    try:
        opts = dist.AllreduceOptions()
        bt.backend_of().allreduce([torch.empty(3, device="meta")], opts)
        raise AssertionError("meta tensor did not fail")
    except ValueError as e:
        assert "meta" in str(e) and "CPU and CUDA tensors only" in str(e), str(e)
    dist.barrier()
    # Work.wait(timeout) gives up on the wait, not the operation: rank 1 joins only once rank 0's
    # wait has given up (rank 0 creates `timed_out` then).
    late = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=30))
    timed_out = os.path.join(signal_dir, "rank 0 gave up waiting")
    # The group's timeout is the operations' deadline: rank 0 waits for a collective rank 1
    # never calls, and fails at the 3 s timeout instead of hanging, naming the node it waited
    # for.
    pair = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=3))
    # Rank 1 stays in `pair` until rank 0 is done with it: a rank that leaves a group fails the
    # others' later collectives there at once, naming it, instead of at their timeout.
    done = dist.new_group([0, 1])
    if rank == 0:
        t = torch.ones(4)
        work = dist.all_reduce(t, group=late, async_op=True)
        try:
            work.wait(timeout=datetime.timedelta(milliseconds=200))
            raise AssertionError("Work.wait(200 ms) did not time out")
        except dist.DistBackendError as e:
            assert "did not complete within" in str(e), str(e)
        finally:
            open(timed_out, "x").close()  # rank 1 may come now (at once if this rank failed)
        work.wait()
        check("all_reduce after a timed-out wait", t, torch.full((4,), 2.0))
        start = time.monotonic()
        try:
            dist.all_reduce(torch.ones(4), group=pair)
            raise AssertionError("the lone all_reduce did not fail")
        except dist.DistBackendError as e:
            took = time.monotonic() - start
            text = str(e)
            assert "DEADLINE_EXCEEDED" in text, text
            assert "node-1" in text, text  # rank 1's daemon, which never sent its part
            assert 2.5 < took < 8, f"failed after {took:.1f} s, not at the 3 s timeout"
        # The failed communicator stays failed, at once, with the same reason.
        try:
            dist.all_reduce(torch.ones(4), group=pair)
            raise AssertionError("an all_reduce on the failed group succeeded")
        except dist.DistBackendError as e:
            assert "node-1" in str(e), str(e)
        dist.barrier(group=done)
    elif rank == 1:
        give_up = time.monotonic() + 60
        while not os.path.exists(timed_out):
            assert time.monotonic() < give_up, "rank 0's Work.wait(200 ms) never gave up"
            time.sleep(0.01)
        t = torch.ones(4)
        dist.all_reduce(t, group=late)
        dist.barrier(group=done)
    dist.barrier(group=dist.new_group([2, 3])) if rank >= 2 else None
    return True


def main():
    with LocalCluster(nodes=2) as cluster:
        start = time.monotonic()
        counts = run_ranks(collectives, 4, cluster.sockets)
        print(f"collectives: ok on 4 ranks, 2 daemons ({time.monotonic() - start:.1f} s); "
              f"all_reduce operations per rank {counts}")
        start = time.monotonic()
        with tempfile.TemporaryDirectory() as signal_dir:
            run_ranks(functools.partial(errors, signal_dir=signal_dir), 4, cluster.sockets)
        print(f"errors: ok ({time.monotonic() - start:.1f} s)")

        # torchrun running the DDP example, which imports only torch: the backend is found
        # through the package's torch.backends entry point.
        example = os.path.join(os.environ.get("BATON_SOURCE_DIR", os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "..", "..")), "examples", "ddp_train.py")
        env = dict(os.environ, BATON_SOCKET=cluster.sockets[0])
        start = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
             f"--master-port={free_port()}", example, "--steps=10", "--width=64"],
            env=env, capture_output=True, text=True, timeout=180)
        if done.returncode != 0 or done.stdout.count("replicas identical") != 2:
            print(done.stdout, done.stderr, file=sys.stderr)
            raise AssertionError(f"torchrun failed ({done.returncode})")
        print(f"torchrun --nproc-per-node=2: ok ({time.monotonic() - start:.1f} s)")
    print("PASS")


if __name__ == "__main__":
    main()
