"""Baton for Python: collectives through the node's Baton daemon (batond).

A rank connects to its node's daemon, joins a communicator with the other ranks and runs
collectives on its buffers; the daemons move the data::

    import numpy as np
    import baton

    client = baton.Client()                    # $BATON_SOCKET or /run/baton/batond.sock
    comm_id = client.create_comm_id()          # on one rank; share it with the others
    comm = client.join(comm_id, world_size, rank)
    x = np.ones(1024, dtype=np.float32)
    comm.all_reduce(x)                         # in place: x is now the sum over the ranks
    buf = client.allocate(1024 * 4)            # memory shared with the daemon: zero copies
    y = np.frombuffer(buf, dtype=np.float32)

Buffers are numpy arrays, memoryviews, bytearrays, SharedBuffers (anything with the buffer
protocol) and CPU torch tensors, C-contiguous. The element type comes from the buffer's format
(int8, uint8, int32, uint32, int64, uint64, float16, float32, float64), or from ``dtype=``,
which also names the types numpy lacks ("bfloat16", "fp8_e4m3", "fp8_e5m2", held as uint16 or
uint8 arrays); torch tensors bring their own type, bfloat16 included. Failures raise
:class:`BatonError` (:class:`TimeoutError` for deadlines, :class:`InvalidArgumentError`, also a
ValueError, for bad arguments).

The torch.distributed backend (``baton.torch``) runs through :func:`default_client`.
"""

from __future__ import annotations

import contextlib
import enum
import os
import threading
from typing import Any, Iterator, Optional, Tuple

from . import _C
from ._C import (
    BatonError,
    Client,
    Communicator,
    InvalidArgumentError,
    Request,
    SharedBuffer,
    TimeoutError,
    UnavailableError,
)

__all__ = [
    "Algorithm",
    "BatonError",
    "Client",
    "Communicator",
    "DType",
    "InvalidArgumentError",
    "ReduceOp",
    "Request",
    "SharedBuffer",
    "TimeoutError",
    "UnavailableError",
    "daemon_status",
    "default_client",
    "default_socket_path",
    "group",
]

__version__: str = _C.version()


class DType(enum.IntEnum):
    """Element types (baton_dtype_t). Wherever a dtype is taken, its name ("bfloat16") works too."""

    INT8 = 0
    UINT8 = 1
    INT32 = 2
    UINT32 = 3
    INT64 = 4
    UINT64 = 5
    FLOAT16 = 6
    BFLOAT16 = 7
    FLOAT32 = 8
    FLOAT64 = 9
    FP8_E4M3 = 10
    FP8_E5M2 = 11

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return _C.dtype_size(int(self))


class ReduceOp(enum.IntEnum):
    """Reduce operators (baton_reduce_op_t); their names ("sum", "avg") work too. AVG is the sum
    divided by the number of ranks once at the end (integers divide with truncation)."""

    SUM = 0
    PROD = 1
    MIN = 2
    MAX = 3
    AVG = 4


class Algorithm(enum.IntEnum):
    """Collective algorithms (baton_algorithm_t); their names work too. AUTO (or None): the
    daemons' tuner chooses, or $BATON_ALGO."""

    AUTO = 0
    RING = 1
    TREE = 2
    DIRECT = 3
    DOUBLING = 4
    HALVING_DOUBLING = 5


def default_socket_path() -> str:
    """$BATON_SOCKET if set, else "/run/baton/batond.sock"."""
    return _C.default_socket_path()


def daemon_status(socket: Optional[str] = None, timeout: float = 5.0) -> dict:
    """The status of the daemon at `socket` (None: the default socket), as ``baton status
    --json`` shows it: node_name, version, pid, uptime_ms, addresses, sessions, communicators
    and links (64-bit integers are strings there). Opens no session.
    :class:`UnavailableError` if no daemon answers within `timeout` seconds."""
    import json

    return json.loads(_C.daemon_status_json(socket, timeout))


@contextlib.contextmanager
def group() -> Iterator[None]:
    """A group of operations, like ncclGroupStart/End, for this thread (groups nest).

    Inside it the operations called on any communicator are queued, not run: blocking calls
    return at once, and requests complete after the group. At its end the sends run first, then
    the rest in call order, and the end waits for all of them and raises the first error; so a
    ring of send/recv pairs cannot deadlock. Buffers must not change until the group ends::

        with baton.group():
            comm.send(out, (rank + 1) % world)
            comm.recv(into, (rank - 1) % world)
    """
    _C.group_start()
    try:
        yield
    except BaseException:
        # The group must end on this thread anyway; the body's error is the one to see.
        with contextlib.suppress(BatonError):
            _C.group_end()
        raise
    _C.group_end()


_default_lock = threading.Lock()
_default: Optional[Client] = None
_forked: list = []  # the parent's default clients, kept from being closed in a forked child


def default_client() -> Client:
    """This process's shared Client of the daemon at $BATON_SOCKET (or the default socket),
    connected on first use, thread-safe. The torch.distributed backend (``baton.torch``) runs
    through it, passing ``default_client().handle`` to its C++ side; do not close it while the
    backend is in use. A new one is made if it was closed, and in a forked child (which must not
    use its parent's session)."""
    global _default
    with _default_lock:
        if _default is None or _default.closed:
            _default = Client()
        return _default


def _forget_default_client() -> None:
    # After fork the session belongs to the parent: never close it from the child.
    global _default
    if _default is not None:
        _forked.append(_default)
    _default = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_default_client)


# ---- torch tensors ---------------------------------------------------------------------------

# torch dtypes that numpy lacks: the integer type their bits are viewed as, and baton's name.
_TORCH_VIEWS = {
    "bfloat16": ("int16", "bfloat16"),
    "float8_e4m3fn": ("uint8", "fp8_e4m3"),
    "float8_e5m2": ("uint8", "fp8_e5m2"),
}
_TORCH_TYPES = {
    "int8": "int8",
    "uint8": "uint8",
    "int32": "int32",
    "uint32": "uint32",
    "int64": "int64",
    "uint64": "uint64",
    "float16": "float16",
    "float32": "float32",
    "float64": "float64",
}


def _invalid(message: str) -> InvalidArgumentError:
    error = InvalidArgumentError(f"INVALID_ARGUMENT: {message}")
    error.message = message
    return error


def _tensor_buffer(obj: Any) -> Optional[Tuple[Any, Optional[str]]]:
    """The adapter of _C (buffers.h): a CPU torch tensor as (numpy view of its memory, baton
    dtype name or None); None for anything else. torch is imported only for objects whose type
    comes from it."""
    if not type(obj).__module__.startswith("torch"):
        return None
    import torch

    if not isinstance(obj, torch.Tensor):
        return None
    if obj.device.type != "cpu":
        raise _invalid(
            f"the tensor is on {obj.device}; baton.Communicator takes CPU tensors (the "
            "torch.distributed backend, baton.torch, takes device tensors)")
    if not obj.is_contiguous():
        raise _invalid(
            "the tensor is not contiguous: pass tensor.contiguous() (and copy the result back), "
            "or use the torch.distributed backend, baton.torch")
    tensor = obj.detach()
    name = str(tensor.dtype).replace("torch.", "")
    if name in _TORCH_VIEWS:
        as_int, baton_name = _TORCH_VIEWS[name]
        return tensor.view(getattr(torch, as_int)).numpy(), baton_name
    return tensor.numpy(), _TORCH_TYPES.get(name)


_C._set_buffer_adapter(_tensor_buffer)
