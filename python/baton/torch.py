"""The ``baton`` backend of ``torch.distributed`` (docs/pytorch.md).

Installed with the package, the backend registers itself when torch is imported (the
``torch.backends`` entry point that torch loads at import), so a training script needs nothing
but::

    import torch.distributed as dist
    dist.init_process_group("baton")      # torchrun's env:// rendezvous, or any init_method

Importing ``baton.torch`` registers it too (where entry points are not installed). Every process
talks to its node's daemon through ``baton.default_client()`` ($BATON_SOCKET, else
/run/baton/batond.sock); rank 0 of each process group creates a communicator through its daemon
and shares the id through the group's Store. The group's timeout is every operation's deadline.

Tensors from :func:`empty` / :func:`zeros` live in memory shared with the daemon, which reads
and writes them in place (no copy between the process and the daemon); any other CPU tensor is
staged by libbaton with one copy each way. CUDA tensors are registered with the daemon, which
reads and writes them in place, and their collectives are stream-ordered on the current CUDA
stream, as with NCCL (docs/pytorch.md, "CUDA tensors").
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence, Union

import torch
import torch.distributed as dist

import baton

BACKEND = "baton"

__all__ = ["BACKEND", "register", "backend_of", "empty", "zeros"]


def _create_backend(store: Any, rank: int, size: int, timeout: Any) -> Any:
    # The extension is imported on first use, not at registration: registration runs inside
    # `import torch` (the entry point), where loading another extension is not yet wanted.
    from baton import _c10d

    return _c10d.BatonBackend(store, rank, size, timeout, baton.default_client().handle)


def register() -> None:
    """Registers the ``baton`` backend with torch.distributed, for CPU and CUDA tensors (one
    backend object per process group serves both). Idempotent."""
    if BACKEND in dist.Backend.backend_list:
        return
    dist.Backend.register_backend(BACKEND, _create_backend, devices=["cpu", "cuda"])


def _autoload() -> None:
    """The ``torch.backends`` entry point: registers the backend while torch is imported. It
    never raises: a failure here would make ``import torch`` itself fail."""
    try:
        register()
    except Exception as err:  # noqa: BLE001 - see the docstring
        import warnings

        warnings.warn(f"baton: could not register the torch.distributed backend: {err}")


def backend_of(group: Optional[dist.ProcessGroup] = None) -> Any:
    """The ``BatonBackend`` behind a process group (default: the world), with ``comm_id``,
    ``daemon_count`` and ``operations(kind)`` (how many Baton operations of a kind, e.g.
    ``"all_reduce"``, it has submitted)."""
    group = group if group is not None else dist.group.WORLD
    return group._get_backend(torch.device("cpu"))


def empty(*size: Union[int, Sequence[int]], dtype: torch.dtype = torch.float32,
          client: Optional[baton.Client] = None) -> torch.Tensor:
    """A CPU tensor in memory shared with the daemon (``Client.allocate``): collectives on it
    move no bytes between this process and the daemon. The memory is freed when the tensor and
    every view of it are gone."""
    shape = tuple(size[0]) if len(size) == 1 and not isinstance(size[0], int) else tuple(size)
    count = math.prod(shape)
    element = torch.empty((), dtype=dtype).element_size()
    buffer = (client or baton.default_client()).allocate(max(count * element, 1))
    flat = torch.frombuffer(buffer, dtype=torch.uint8)[: count * element]
    return flat.view(dtype).view(shape)


def zeros(*size: Union[int, Sequence[int]], dtype: torch.dtype = torch.float32,
          client: Optional[baton.Client] = None) -> torch.Tensor:
    """Like :func:`empty`, filled with zeros."""
    return empty(*size, dtype=dtype, client=client).zero_()


register()
