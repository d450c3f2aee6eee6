"""The binding (baton._C, through the package) against a local cluster of two daemons with two
ranks on each, every rank a spawned process: each collective's values checked against numpy
over several element types and every reduce op; async requests and what they keep alive;
SharedBuffer (zero-copy views, freeing, closing its client); groups; split; the errors (argument
checks, a mismatch between ranks, a deadline); CPU torch tensors; and `python -m baton status`
against the cluster.

Exit 0: pass; 1: fail; 77: skip (the package was not built).
"""

import gc
import json
import multiprocessing
import os
import queue
import re
import subprocess
import sys
import time
import traceback
import weakref

import baton_testing

baton = baton_testing.import_baton()
import numpy as np  # noqa: E402

WORLD = 4  # ranks 0 and 1 on node-0, 2 and 3 on node-1
CALL_TIMEOUT = 30.0  # seconds per call: a hang fails well before ctest's limit
N = 37  # elements per rank: odd, and not a multiple of the world size


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def check_equal(got, want, what):
    got = np.asarray(got)
    want = np.asarray(want)
    if got.shape != want.shape or not np.array_equal(got, want):
        raise AssertionError(f"{what}:\n  got  {got!r}\n  want {want!r}")


def raises(kind, call, *, contains=(), code_name=None):
    """Runs call(); returns the `kind` it raised, checking its message and code name."""
    try:
        call()
    except kind as e:
        for text in contains:
            check(text in str(e), f"{kind.__name__} message {str(e)!r} lacks {text!r}")
        if code_name is not None:
            check(e.code_name == code_name, f"code_name {e.code_name}, want {code_name}")
            check(str(e).startswith(code_name + ": "), f"str(e) = {str(e)!r}")
        return e
    raise AssertionError(f"{call} did not raise {kind.__name__}")


def to_bf16(values):
    """float32 values (exact in bfloat16) as bfloat16 bits."""
    return (np.asarray(values, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def from_bf16(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


class Rank:
    def __init__(self, rank, client, comm, sockets):
        self.rank = rank
        self.world = WORLD
        self.client = client
        self.comm = comm
        self.sockets = sockets
        self.dup = None  # a second communicator of every rank (test_split makes it)


# ---- Basics ----------------------------------------------------------------------------------

def test_basics(r):
    comm = r.comm
    check(comm.rank == r.rank and comm.world_size == WORLD, f"{comm}")
    check(comm.daemon_count == 2, f"daemon_count {comm.daemon_count}")
    check(r.client.node_name == f"node-{r.rank // 2}", r.client.node_name)
    check(baton.default_client() is r.client, "default_client() is one client per process")
    check(baton.default_socket_path() == r.sockets[r.rank // 2], baton.default_socket_path())
    check(isinstance(r.client.handle, int) and r.client.handle != 0, "client handle")
    check(isinstance(comm.handle, int) and comm.handle != 0, "communicator handle")
    for d in baton.DType:
        check(baton._C.dtype_name(d) == d.name.lower(), f"{d} is {baton._C.dtype_name(d)}")
    check(baton.DType.BFLOAT16.itemsize == 2 and baton.DType.FLOAT64.itemsize == 8, "itemsize")
    for op in baton.ReduceOp:
        check(baton._C.reduce_op_name(op) == op.name.lower(), f"{op}")
    for a in baton.Algorithm:
        check(baton._C.algorithm_name(a) == a.name.lower(), f"{a}")
    check(baton.__version__ == baton._C.version(), baton.__version__)
    check(isinstance(baton.TimeoutError("x"), TimeoutError), "baton.TimeoutError is a TimeoutError")
    check(issubclass(baton.InvalidArgumentError, ValueError), "InvalidArgumentError")
    check(issubclass(baton.BatonError, RuntimeError), "BatonError")


# ---- Collectives -----------------------------------------------------------------------------

def rank_values(rank, n, kind):
    """Small integers, exact in every type and under every op with four ranks."""
    i = np.arange(n)
    if kind == "unsigned":
        return (i * 5 + rank * 3) % 4  # 0..3: products up to 81
    return (i * 7 + rank * 3) % 7 - 3  # -3..3


def expected(op, inputs, integer):
    stack = np.stack(inputs).astype(np.float64)
    if op == "sum":
        return stack.sum(0)
    if op == "prod":
        return stack.prod(0)
    if op == "min":
        return stack.min(0)
    if op == "max":
        return stack.max(0)
    mean = stack.sum(0) / len(inputs)
    return np.trunc(mean) if integer else mean  # integers divide with truncation


TYPES = [  # (numpy storage type, dtype= argument, value kind)
    (np.int8, None, "signed"), (np.uint8, None, "unsigned"), (np.int32, None, "signed"),
    (np.uint32, None, "unsigned"), (np.int64, None, "signed"), (np.uint64, None, "unsigned"),
    (np.float16, None, "signed"), (np.float32, None, "signed"), (np.float64, None, "signed"),
    (np.uint16, "bfloat16", "signed"),
]
OPS = ["sum", "prod", "min", "max", "avg"]


def test_all_reduce_types_and_ops(r):
    for t, (storage, dtype, kind) in enumerate(TYPES):
        for o, op in enumerate(OPS):
            inputs = [rank_values(q, N, kind) for q in range(WORLD)]
            if dtype == "bfloat16":
                send = to_bf16(inputs[r.rank])
            else:
                send = inputs[r.rank].astype(storage)
            want = expected(op, inputs, np.issubdtype(storage, np.integer) and dtype is None)
            # Alternate in place and out of place, names and enums.
            op_arg = op if o % 2 == 0 else baton.ReduceOp[op.upper()]
            dtype_arg = dtype if (t % 2 == 0 or dtype is None) else baton.DType.BFLOAT16
            if (t + o) % 2 == 0:
                recv = send
                r.comm.all_reduce(send, op=op_arg, dtype=dtype_arg, timeout=CALL_TIMEOUT)
            else:
                recv = np.zeros_like(send)
                r.comm.all_reduce(send, recv, op_arg, dtype=dtype_arg, timeout=CALL_TIMEOUT)
            got = from_bf16(recv) if dtype == "bfloat16" else recv
            check_equal(got.astype(np.float64), want, f"all_reduce {op} {dtype or storage.__name__}")


def test_forced_algorithms(r):
    for algorithm in ["ring", "tree", baton.Algorithm.DOUBLING, "halving_doubling"]:
        x = np.arange(N, dtype=np.float32) * (r.rank + 1)
        r.comm.all_reduce(x, algorithm=algorithm, timeout=CALL_TIMEOUT)
        check_equal(x, np.arange(N, dtype=np.float32) * 10, f"all_reduce with {algorithm}")
        want = algorithm if isinstance(algorithm, str) else algorithm.name.lower()
        check(r.comm.last_algorithm == want, f"last_algorithm {r.comm.last_algorithm}, {want}")
    r.comm.barrier(algorithm="direct", timeout=CALL_TIMEOUT)
    check(r.comm.last_algorithm == "direct", r.comm.last_algorithm)
    # A refused collective fails its communicator from there on: refused on one of its own.
    with r.comm.split(0, timeout=CALL_TIMEOUT) as scratch:
        raises(baton.InvalidArgumentError, lambda: scratch.all_to_all(
            np.zeros(WORLD, np.float32), algorithm="ring"), code_name="INVALID_ARGUMENT")
        raises(baton.BatonError, lambda: scratch.barrier(timeout=CALL_TIMEOUT),
               contains=("was refused",), code_name="ABORTED")


def block(rank, n, salt=0):
    return np.arange(n, dtype=np.float32) + 1000 * rank + salt


def test_collectives(r):
    comm, rank, world = r.comm, r.rank, WORLD
    # reduce_scatter: block `rank` of the sum of every rank's send.
    sends = [np.concatenate([block(q, N, j) for j in range(world)]) for q in range(world)]
    recv = np.zeros(N, np.float32)
    comm.reduce_scatter(sends[rank], recv, timeout=CALL_TIMEOUT)
    check_equal(recv, sum(s[rank * N:(rank + 1) * N] for s in sends), "reduce_scatter")
    comm.reduce_scatter(sends[rank].astype(np.int32), recv.view(np.int32), "max",
                        timeout=CALL_TIMEOUT)
    want = np.max([s[rank * N:(rank + 1) * N] for s in sends], axis=0).astype(np.int32)
    check_equal(recv.view(np.int32), want, "reduce_scatter max int32")

    # all_gather: every rank's block in rank order.
    gathered = np.zeros(world * N, np.float32)
    comm.all_gather(block(rank, N), gathered, timeout=CALL_TIMEOUT)
    check_equal(gathered, np.concatenate([block(q, N) for q in range(world)]), "all_gather")

    # broadcast: in place from rank 1; from rank 2's send into recv (send None elsewhere).
    x = block(rank, N)
    comm.broadcast(x, 1, timeout=CALL_TIMEOUT)
    check_equal(x, block(1, N), "broadcast in place")
    y = np.zeros(N, np.float32)
    comm.broadcast(block(2, N, 7) if rank == 2 else None, root=2, recv=y, timeout=CALL_TIMEOUT)
    check_equal(y, block(2, N, 7), "broadcast send/recv")

    # reduce: max into rank 3's recv; sum in place into rank 0's send.
    out = np.full(N, -1, np.float32)
    comm.reduce(block(rank, N), out if rank == 3 else None, "max", 3, timeout=CALL_TIMEOUT)
    check_equal(out, block(3, N) if rank == 3 else np.full(N, -1, np.float32), "reduce max")
    z = block(rank, N)
    comm.reduce(z, op="sum", root=0, timeout=CALL_TIMEOUT)
    if rank == 0:
        check_equal(z, sum(block(q, N) for q in range(world)), "reduce in place")

    # all_to_all: block j of rank i's send lands as block i of rank j's recv; also in place.
    send = np.concatenate([block(rank, N, 100 * j) for j in range(world)])
    recv = np.zeros_like(send)
    comm.all_to_all(send, recv, timeout=CALL_TIMEOUT)
    want = np.concatenate([block(i, N, 100 * rank) for i in range(world)])
    check_equal(recv, want, "all_to_all")
    comm.all_to_all(send, timeout=CALL_TIMEOUT)
    check_equal(send, want, "all_to_all in place")

    # all_to_all_v: rank i sends (i + j) % 3 + 1 elements to rank j; packed, then with gaps.
    def share(i, j):
        return np.full((i + j) % 3 + 1, 10 * i + j, np.int64)
    send_counts = [(rank + j) % 3 + 1 for j in range(world)]
    recv_counts = [(i + rank) % 3 + 1 for i in range(world)]
    send = np.concatenate([share(rank, j) for j in range(world)])
    recv = np.zeros(sum(recv_counts), np.int64)
    comm.all_to_all_v(send, send_counts, None, recv, recv_counts, None, timeout=CALL_TIMEOUT)
    check_equal(recv, np.concatenate([share(i, rank) for i in range(world)]), "all_to_all_v")
    gap = 5
    recv_displs = [i * gap for i in range(world)]
    spaced = np.full(world * gap, -1, np.int64)
    comm.all_to_all_v(send, np.array(send_counts), np.cumsum([0] + send_counts[:-1]), spaced,
                      recv_counts, recv_displs, timeout=CALL_TIMEOUT)
    for i in range(world):
        check_equal(spaced[i * gap:i * gap + recv_counts[i]], share(i, rank),
                    f"all_to_all_v block from {i}")
        check((spaced[i * gap + recv_counts[i]:(i + 1) * gap] == -1).all(), "gaps untouched")

    # gather into rank 2 (recv None elsewhere); scatter from rank 1 (send None elsewhere).
    into = np.zeros(world * N, np.float32) if rank == 2 else None
    comm.gather(block(rank, N), into, 2, timeout=CALL_TIMEOUT)
    if rank == 2:
        check_equal(into, np.concatenate([block(q, N) for q in range(world)]), "gather")
    part = np.zeros(N, np.float64)
    whole = np.arange(world * N, dtype=np.float64) if rank == 1 else None
    comm.scatter(whole, part, root=1, timeout=CALL_TIMEOUT)
    check_equal(part, np.arange(rank * N, (rank + 1) * N, dtype=np.float64), "scatter")

    # send/recv: even ranks to the next odd one, then back (a send never waits for its recv).
    peer = rank + 1 if rank % 2 == 0 else rank - 1
    got = np.zeros(N, np.float32)
    for _ in range(2):
        if rank % 2 == 0:
            comm.send(block(rank, N), peer, timeout=CALL_TIMEOUT)
            comm.recv(got, peer, timeout=CALL_TIMEOUT)
        else:
            comm.recv(got, peer, timeout=CALL_TIMEOUT)
            comm.send(block(rank, N), peer, timeout=CALL_TIMEOUT)
        check_equal(got, block(peer, N), "send/recv")
    comm.barrier(timeout=CALL_TIMEOUT)

    # Other buffer kinds: bytes as send, bytearray and memoryview as recv (uint8).
    into = bytearray(3)
    comm.all_reduce(bytes([1, 2, rank]), into, timeout=CALL_TIMEOUT)
    check(list(into) == [4, 8, 6], f"bytes all_reduce {list(into)}")
    view = memoryview(bytearray(8)).cast("B")
    comm.all_gather(bytes([rank, rank + 10]), view, timeout=CALL_TIMEOUT)
    check(list(view) == [0, 10, 1, 11, 2, 12, 3, 13], f"memoryview all_gather {list(view)}")


def test_float16_and_bfloat16_collectives(r):
    half = np.arange(N, dtype=np.float16) + r.rank
    gathered = np.zeros(WORLD * N, np.float16)
    r.comm.all_gather(half, gathered, timeout=CALL_TIMEOUT)
    want = np.concatenate([np.arange(N, dtype=np.float16) + q for q in range(WORLD)])
    check_equal(gathered, want, "all_gather float16")
    values = np.arange(WORLD * N, dtype=np.float32) % 16  # sums up to 150: exact in bfloat16
    out = np.zeros(N, np.uint16)
    r.comm.reduce_scatter(to_bf16(values * (r.rank + 1)), out, "sum", dtype="bfloat16",
                          timeout=CALL_TIMEOUT)
    check_equal(from_bf16(out), values[r.rank * N:(r.rank + 1) * N] * 10, "reduce_scatter bf16")


# ---- Async requests --------------------------------------------------------------------------

def test_async(r):
    comm, rank = r.comm, r.rank
    arrays = [np.full(N, rank + k, np.float64) for k in range(4)]
    requests = [comm.all_reduce(a, async_op=True, timeout=CALL_TIMEOUT) for a in arrays]
    check(all(isinstance(q, baton.Request) for q in requests), "async_op returns Requests")
    for k, q in reversed(list(enumerate(requests))):
        q.wait()
        check(q.done and q.test(), "done after wait")
        check_equal(arrays[k], np.full(N, 6 + 4 * k, np.float64), f"async all_reduce {k}")
    q = comm.barrier(async_op=True)
    q.wait(timeout=CALL_TIMEOUT)

    # A request keeps its buffer alive, and lets go of it once complete.
    def submit():
        a = np.full(N, rank, np.float32)
        return comm.all_reduce(a, async_op=True), weakref.ref(a)
    q, alive = submit()
    gc.collect()
    check(alive() is not None, "the request keeps its buffer alive")
    result = alive()
    q.wait(timeout=CALL_TIMEOUT)
    check_equal(result, np.full(N, 6, np.float32), "async result in the dropped array")
    del result
    gc.collect()
    check(alive() is None, "released once complete")

    # wait(timeout) on a request still running: rank 0 receives what rank 1 sends only after a
    # barrier on another communicator (operations on one communicator run in order).
    if rank == 0:
        got = np.zeros(N, np.float32)
        q = comm.recv(got, 1, async_op=True, timeout=CALL_TIMEOUT)
        check(not q.test() and not q.done, "pending before the send")
        start = time.monotonic()
        e = raises(baton.TimeoutError, lambda: q.wait(timeout=0.2), code_name="DEADLINE_EXCEEDED")
        check(isinstance(e, TimeoutError), "baton.TimeoutError is the builtin TimeoutError too")
        check(time.monotonic() - start < 2.0, "wait(timeout) returns at its timeout")
        r.dup.barrier(timeout=CALL_TIMEOUT)
        q.wait(timeout=CALL_TIMEOUT)
        check_equal(got, block(1, N), "recv after the send")
        # A dropped request keeps its buffer until its operation completes.
        into = np.zeros(N, np.float32)
        kept = weakref.ref(into)
        q = comm.recv(into, 1, async_op=True, timeout=CALL_TIMEOUT)
        pending = weakref.ref(q)
        del q, into
        gc.collect()
        check(pending() is None and kept() is not None, "the buffer outlives its request")
        r.dup.barrier(timeout=CALL_TIMEOUT)
        comm.barrier(timeout=CALL_TIMEOUT)  # runs after the receive
        comm.barrier(timeout=CALL_TIMEOUT)  # submitting it lets go of the finished receive
        gc.collect()
        check(kept() is None, "let go of once the receive completed")
    else:
        r.dup.barrier(timeout=CALL_TIMEOUT)
        if rank == 1:
            comm.send(block(1, N), 0, timeout=CALL_TIMEOUT)
        r.dup.barrier(timeout=CALL_TIMEOUT)
        if rank == 1:
            comm.send(block(1, N), 0, timeout=CALL_TIMEOUT)
        comm.barrier(timeout=CALL_TIMEOUT)
        comm.barrier(timeout=CALL_TIMEOUT)


# ---- Shared buffers --------------------------------------------------------------------------

def test_shared_buffer(r):
    comm, rank, client = r.comm, r.rank, r.client
    buf = client.allocate(N * 4)
    check(isinstance(buf, baton.SharedBuffer) and buf.nbytes == N * 4 and len(buf) == N * 4, buf)
    a = np.frombuffer(buf, np.float32)
    check(a.flags.writeable, "a writable view")
    check(a.__array_interface__["data"][0] == buf.address, "numpy views it without a copy")
    check(baton._C._describe_buffer(a)[0] == buf.address, "the binding passes its pointer")
    a[:] = np.arange(N) + rank
    comm.all_reduce(a, timeout=CALL_TIMEOUT)  # in place in shared memory
    check_equal(a, np.arange(N, dtype=np.float32) * 4 + 6, "all_reduce in a shared buffer")

    # The buffer itself as send (bytes: dtype= says float32); a view of another as recv.
    other = client.allocate(N * 4)
    into = np.frombuffer(other, np.float32)
    comm.all_reduce(buf, into, "max", dtype="float32", timeout=CALL_TIMEOUT)
    check_equal(into, np.arange(N, dtype=np.float32) * 4 + 6, "SharedBuffer as send")
    mv = memoryview(buf)
    check(not mv.readonly and mv.nbytes == N * 4 and buf.exports == 2, f"exports {buf.exports}")

    # Freed only once no view is left.
    raises(BufferError, buf.free, contains=("views",))
    del a, mv
    check(buf.exports == 0, f"exports {buf.exports}")
    buf.free()
    check(buf.freed and buf.address == 0, "freed")
    buf.free()  # idempotent
    raises(BufferError, lambda: np.frombuffer(buf, np.uint8), contains=("freed",))
    raises(BufferError, lambda: comm.all_reduce(buf, dtype="float32"), contains=("freed",))
    raises(baton.InvalidArgumentError, lambda: client.allocate(0), code_name="INVALID_ARGUMENT")
    with client.allocate(16) as scoped:
        check(not scoped.freed, "open in its with block")
    check(scoped.freed, "freed by its with block")

    # Closing its client makes its buffers unusable, but what still views them keeps working.
    mine = baton.Client(r.sockets[rank // 2])
    kept = mine.allocate(64)
    unviewed = mine.allocate(64)
    view = np.frombuffer(kept, np.uint8)
    view[:] = 7
    mine.close()
    check(mine.closed and kept.freed and unviewed.freed, "unusable once the client closed")
    check(int(view.sum()) == 7 * 64, "a view still reads the memory")
    view[:] = 1  # and may write it
    raises(BufferError, lambda: np.frombuffer(kept, np.uint8), contains=("client",))
    raises(BufferError, lambda: comm.all_reduce(unviewed, dtype="float32"), contains=("client",))
    e = raises(baton.BatonError, lambda: mine.allocate(8), code_name="FAILED_PRECONDITION")
    check("closed" in e.message, e.message)
    del view
    check(kept.exports == 0, "no views left")
    unviewed.free()  # frees it at once; `kept` goes with its object


# ---- Groups and split ------------------------------------------------------------------------

def test_split(r):
    comm, rank = r.comm, r.rank
    sub = comm.split(rank % 2, key=-rank, timeout=CALL_TIMEOUT)
    # Colour 0 holds ranks 0 and 2, colour 1 ranks 1 and 3; key -rank puts the higher first.
    check(sub.world_size == 2 and sub.rank == (0 if rank >= 2 else 1), f"{sub}")
    check(sub.daemon_count == 2, f"daemon_count {sub.daemon_count}")
    x = np.array([rank], np.int64)
    sub.all_reduce(x, timeout=CALL_TIMEOUT)
    check(int(x[0]) == (2 if rank % 2 == 0 else 4), f"sum over the colour: {x}")
    sub.close()
    check(sub.closed, "closed")
    raises(baton.BatonError, sub.barrier, code_name="FAILED_PRECONDITION")
    # A negative colour joins none.
    three = comm.split(-1 if rank == 3 else 0, timeout=CALL_TIMEOUT)
    if rank == 3:
        check(three is None, "a negative colour gets None")
    else:
        check(three.world_size == 3 and three.rank == rank, f"{three}")
        with three:
            three.barrier(timeout=CALL_TIMEOUT)
    r.dup = comm.split(0, timeout=CALL_TIMEOUT)
    check(r.dup.world_size == WORLD and r.dup.rank == rank, f"{r.dup}")


def test_group(r):
    comm, rank, world = r.comm, r.rank, WORLD
    got = np.zeros(N, np.int64)
    with baton.group():
        # Temporaries: the group holds them until it has run their operations.
        comm.recv(got, (rank - 1) % world, timeout=CALL_TIMEOUT)
        comm.send(np.full(N, rank, np.int64), (rank + 1) % world, timeout=CALL_TIMEOUT)
    check_equal(got, np.full(N, (rank - 1) % world, np.int64), "group ring")

    left = np.zeros(N, np.float32)
    with baton.group():
        request = comm.recv(left, (rank + 1) % world, async_op=True)
        raises(baton.BatonError, lambda: request.wait(timeout=1), code_name="FAILED_PRECONDITION")
        with baton.group():  # nested: only the outermost end acts
            comm.send(block(rank, N), (rank - 1) % world)
    request.wait(timeout=CALL_TIMEOUT)
    check_equal(left, block((rank + 1) % world, N), "async recv in a group")

    # An argument error inside a group is raised at once; the body's error ends the group.
    with baton.group():
        raises(baton.InvalidArgumentError, lambda: comm.send(np.zeros(4)[::2], 0))
    raises(ZeroDivisionError, lambda: _group_with_error())
    raises(baton.BatonError, baton._C.group_end, code_name="FAILED_PRECONDITION")


def _group_with_error():
    with baton.group():
        1 / 0  # noqa: B018


# ---- Errors ----------------------------------------------------------------------------------

def test_argument_errors(r):
    # A collective refused by libbaton fails its communicator from there on (the other ranks
    # would wait for it): these run on one of their own.
    with r.comm.split(0, timeout=CALL_TIMEOUT) as comm:
        argument_errors(comm, r.rank)  # the same ranks, in the same order


def argument_errors(comm, rank):
    x = np.zeros(8, np.float32)
    raises(ValueError, lambda: comm.all_reduce(np.zeros(16, np.float32)[::2]),
           contains=("C-contiguous",), code_name="INVALID_ARGUMENT")
    raises(baton.InvalidArgumentError, lambda: comm.all_reduce(x, np.zeros((4, 4), np.float32).T))
    frozen = np.zeros(8, np.float32)
    frozen.flags.writeable = False
    raises(ValueError, lambda: comm.all_reduce(x, frozen), contains=("recv", "read-only"))
    raises(ValueError, lambda: comm.all_reduce(frozen), contains=("read-only",))
    raises(ValueError, lambda: comm.all_reduce(x, np.zeros(7, np.float32)),
           contains=("7", "8", "recv"))
    raises(ValueError, lambda: comm.all_gather(x, np.zeros(8, np.float32)),
           contains=("8", "32"))
    raises(ValueError, lambda: comm.all_reduce(x, np.zeros(8, np.float64)),
           contains=("float32", "float64"))
    raises(ValueError, lambda: comm.all_reduce(np.zeros(4, np.int16)), contains=("dtype=",))
    raises(ValueError, lambda: comm.all_reduce(np.zeros(3, np.uint8), dtype="float32"),
           contains=("3 bytes",))
    raises(ValueError, lambda: comm.all_reduce(x, op="nope"), contains=("nope",))
    raises(ValueError, lambda: comm.all_reduce(x, dtype="float128"), contains=("float128",))
    raises(ValueError, lambda: comm.all_reduce(x, algorithm="fastest"), contains=("fastest",))
    raises(ValueError, lambda: comm.all_reduce(x, timeout=0), contains=("timeout",))
    raises(TypeError, lambda: comm.all_reduce(x, op=True))
    raises(TypeError, lambda: comm.all_reduce([1.0, 2.0]), contains=("buffer protocol",))
    raises(ValueError, lambda: comm.all_to_all(np.zeros(6, np.float32)), contains=("multiple",))
    raises(ValueError, lambda: comm.all_to_all_v(x, [1, 1, 1], None, x, [1] * 4, None),
           contains=("3 entries",))
    raises(ValueError, lambda: comm.all_to_all_v(x, [2] * 4, [0, 2, 4, 7], x, [2] * 4, None),
           contains=("send_displs[3]",))
    raises(ValueError, lambda: comm.gather(x, None, root=rank), contains=("root",))
    raises(ValueError, lambda: comm.scatter(None, x, root=rank), contains=("root",))
    # Refused by libbaton (a root out of range), like some above: the communicator has failed.
    raises(baton.InvalidArgumentError, lambda: comm.broadcast(x, root=WORLD),
           contains=("root",), code_name="INVALID_ARGUMENT")
    raises(baton.BatonError, lambda: comm.barrier(timeout=CALL_TIMEOUT),
           contains=("was refused",), code_name="ABORTED")


def test_errors_between_ranks(r):
    comm, rank = r.comm, r.rank
    # Counts that differ between ranks: every rank fails, naming the disagreement.
    with comm.split(0, timeout=CALL_TIMEOUT) as odd:
        e = raises(baton.BatonError, lambda: odd.all_reduce(
            np.zeros(4 + rank % 2, np.float32), timeout=10))
        check(e.code_name in ("FAILED_PRECONDITION", "INVALID_ARGUMENT", "ABORTED"), str(e))
        check(baton._C.code_name(e.code) == e.code_name, f"code {e.code} is {e.code_name}")
    # A receive from a rank that never sends ends at its deadline.
    late = comm.split(0, timeout=CALL_TIMEOUT)
    if rank == 0:
        start = time.monotonic()
        e = raises(baton.TimeoutError, lambda: late.recv(np.zeros(4, np.float32), 1, timeout=1),
                   code_name="DEADLINE_EXCEEDED")
        took = time.monotonic() - start
        check(isinstance(e, TimeoutError) and e.code == 4, f"{e!r}")
        check(0.8 < took < 6, f"the receive took {took:.1f} s with timeout=1")
    comm.barrier(timeout=CALL_TIMEOUT)
    late.close()
    late.close()  # idempotent
    raises(baton.BatonError, late.barrier, code_name="FAILED_PRECONDITION",
           contains=("communicator is closed",))


# ---- torch -----------------------------------------------------------------------------------

def test_torch(r):
    try:
        import torch
    except ImportError:
        print(f"rank {r.rank}: torch is not installed; its checks are skipped", flush=True)
        return
    comm, rank = r.comm, r.rank
    t = torch.arange(N, dtype=torch.float32) + rank
    check(baton._C._describe_buffer(t)[0] == t.data_ptr(), "a tensor's own memory is passed")
    comm.all_reduce(t, timeout=CALL_TIMEOUT)
    check_equal(t.numpy(), np.arange(N, dtype=np.float32) * 4 + 6, "torch float32 all_reduce")

    b = torch.full((N,), rank + 1, dtype=torch.bfloat16)
    address, nbytes, dtype = baton._C._describe_buffer(b)
    check(address == b.data_ptr() and nbytes == 2 * N and dtype == "bfloat16", f"{dtype}")
    comm.all_reduce(b, op="max", timeout=CALL_TIMEOUT)
    check_equal(b.float().numpy(), np.full(N, 4, np.float32), "torch bfloat16 all_reduce")
    gathered = torch.zeros(WORLD * N, dtype=torch.bfloat16)
    q = comm.all_gather(torch.arange(N, dtype=torch.bfloat16) * (rank + 1), gathered,
                        async_op=True)
    q.wait(timeout=CALL_TIMEOUT)
    want = np.concatenate([np.arange(N, dtype=np.float32) * (q + 1) for q in range(WORLD)])
    check_equal(gathered.float().numpy(), from_bf16(to_bf16(want)), "torch bfloat16 all_gather")

    # requires_grad and 2-D tensors; a non-contiguous one is refused.
    w = torch.ones(3, 5, requires_grad=True)
    comm.all_reduce(w, timeout=CALL_TIMEOUT)
    check_equal(w.detach().numpy(), np.full((3, 5), 4, np.float32), "2-D, requires_grad")
    raises(ValueError, lambda: comm.all_reduce(torch.ones(4, 4).t()), contains=("contiguous",))

    # A tensor over a shared buffer: zero copies all the way.
    buf = r.client.allocate(N * 4)
    s = torch.frombuffer(buf, dtype=torch.float32)
    check(s.data_ptr() == buf.address, "torch.frombuffer views the shared buffer")
    s.fill_(rank)
    comm.all_reduce(s, op="avg", timeout=CALL_TIMEOUT)
    check_equal(s.numpy(), np.full(N, 1.5, np.float32), "avg over a shared-buffer tensor")
    # torch.frombuffer holds the buffer object, not a view: closing the client under such a
    # tensor leaves its memory mapped.
    mine = baton.Client(r.sockets[rank // 2])
    held = torch.frombuffer(mine.allocate(4096), dtype=torch.int32)
    held.fill_(rank)
    mine.close()
    gc.collect()
    check(int(held.sum()) == rank * 1024, "the tensor still reads its memory")
    held += 1
    del s, held
    buf.free()


# ---- Status ----------------------------------------------------------------------------------

def test_status(r):
    """Rank 0 asks its daemon while the others wait: the communicator shows."""
    if r.rank == 0:
        out = subprocess.run(
            [sys.executable, "-m", "baton", "status", "--json", "--socket", r.sockets[0]],
            capture_output=True, text=True, timeout=60)
        check(out.returncode == 0, f"python -m baton status --json: {out.stderr}")
        status = json.loads(out.stdout)
        check(status["node_name"] == "node-0", status["node_name"])
        check(int(status["sessions"]) >= 2, f"sessions {status['sessions']}")
        ours = [c for c in status["communicators"]
                if c["world_size"] == WORLD and sorted(c["local_ranks"]) == [0, 1]
                and c["daemon_count"] == 2 and int(c["ops_completed"]) > 0]
        check(ours, f"no communicator of 4 ranks with ranks 0 and 1 here: {status}")
        check(len(status["links"]) >= 1, f"links {status['links']}")
        check(baton.daemon_status(r.sockets[0])["pid"] == status["pid"], "daemon_status()")
    r.comm.barrier(timeout=CALL_TIMEOUT)


TESTS = [
    test_basics,
    test_all_reduce_types_and_ops,
    test_forced_algorithms,
    test_collectives,
    test_float16_and_bfloat16_collectives,
    test_split,
    test_async,
    test_shared_buffer,
    test_group,
    test_argument_errors,
    test_torch,
    test_status,
    test_errors_between_ranks,
]


def rank_main(rank, sockets, comm_id, results):
    os.environ["BATON_SOCKET"] = sockets[rank // 2]
    failures = []
    timings = []
    try:
        client = baton.default_client()
        comm = client.join(comm_id, WORLD, rank, timeout=CALL_TIMEOUT)
    except Exception:
        results.put((rank, [f"join: {traceback.format_exc()}"], timings))
        return
    r = Rank(rank, client, comm, sockets)
    for test in TESTS:
        start = time.monotonic()
        try:
            test(r)
        except BaseException:
            failures.append(f"{test.__name__}: {traceback.format_exc()}")
            # Fail the other ranks' operations at once rather than at their deadlines.
            for c in (comm, r.dup):
                if c is not None:
                    try:
                        c.abort(f"rank {rank} failed {test.__name__}")
                    except baton.BatonError:
                        pass
            break
        timings.append((test.__name__, time.monotonic() - start))
    comm.close()
    if r.dup is not None:
        r.dup.close()
    results.put((rank, failures, timings))


# ---- The main process ------------------------------------------------------------------------

def mask(text):
    """`baton status` text with what changes from one moment to the next blanked."""
    text = re.sub(r"up \d+ s\)", "up N s)", text)
    return re.sub(r"tx .* rx .*  errors", "tx - rx -  errors", text)


def check_status_commands(cluster, failures):
    cli = baton_testing.baton_cli()
    for socket in cluster.sockets:
        ours = subprocess.run([sys.executable, "-m", "baton", "status", f"--socket={socket}"],
                              capture_output=True, text=True, timeout=60)
        theirs = subprocess.run([cli, "status", "--socket", socket], capture_output=True,
                                text=True, timeout=60)
        if ours.returncode != 0 or mask(ours.stdout) != mask(theirs.stdout):
            failures.append(f"python -m baton status differs from baton status:\n"
                            f"{ours.stdout}{ours.stderr}---\n{theirs.stdout}")
    missing = os.path.join(cluster.dir, "nobody.sock")
    out = subprocess.run([sys.executable, "-m", "baton", "status", "--socket", missing,
                          "--timeout", "1"], capture_output=True, text=True, timeout=60)
    if out.returncode != 1 or "baton status: cannot reach batond at" not in out.stderr:
        failures.append(f"status of a missing daemon: rc {out.returncode}, {out.stderr!r}")


def main():
    start = time.monotonic()
    failures = []
    with baton_testing.LocalCluster(nodes=2) as cluster:
        with baton.Client(cluster.sockets[0]) as client:
            comm_id = client.create_comm_id()
        context = multiprocessing.get_context("spawn")
        results = context.Queue()
        ranks = [context.Process(target=rank_main, args=(rank, cluster.sockets, comm_id, results))
                 for rank in range(WORLD)]
        for p in ranks:
            p.start()
        reported = {}
        deadline = time.monotonic() + 100
        while len(reported) < WORLD and time.monotonic() < deadline:
            try:
                rank, rank_failures, timings = results.get(timeout=1)
            except queue.Empty:
                if all(not p.is_alive() for p in ranks) and results.empty():
                    break
                continue
            reported[rank] = timings
            failures += [f"rank {rank}: {f}" for f in rank_failures]
        for p in ranks:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
        for rank in range(WORLD):
            if rank not in reported:
                failures.append(f"rank {rank} reported nothing (exit code {ranks[rank].exitcode})")
        check_status_commands(cluster, failures)
        if failures:
            cluster.dump_logs()
    if 0 in reported:
        print("rank 0: " + ", ".join(f"{name[5:]} {took:.2f}s" for name, took in reported[0]))
    print(f"binding_test: {len(TESTS)} checks on {WORLD} ranks in {time.monotonic() - start:.1f} s")
    for f in failures:
        print(f"FAIL: {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
