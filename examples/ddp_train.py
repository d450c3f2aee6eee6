"""Data-parallel training with PyTorch DDP over Baton (docs/pytorch.md).

Run one process per rank with torchrun; each process talks to its node's batond
($BATON_SOCKET, default /run/baton/batond.sock):

    torchrun --nproc-per-node 4 examples/ddp_train.py --steps 100

Across nodes, run the same command on every node with --nnodes, --node-rank and a rendezvous
endpoint (torchrun --help). The script uses only torch: the `baton` backend registers itself
when torch is imported (the package's torch.backends entry point).
"""

import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--backend", default="baton", help="baton, or gloo to compare")
    args = parser.parse_args()

    dist.init_process_group(args.backend)  # rank, world size and rendezvous from torchrun
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)  # the same initial model everywhere (DDP also broadcasts rank 0's)
    model = torch.nn.Sequential(
        torch.nn.Linear(args.width, args.width), torch.nn.ReLU(),
        torch.nn.Linear(args.width, args.width), torch.nn.ReLU(),
        torch.nn.Linear(args.width, 10))
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    data = torch.Generator().manual_seed(1000 + rank)  # each rank its own shard

    start = time.monotonic()
    for step in range(args.steps):
        x = torch.randn(args.batch, args.width, generator=data)
        y = torch.randint(0, 10, (args.batch,), generator=data)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()  # DDP all-reduces the gradients through the backend, bucket by bucket
        optimizer.step()
        if step % 20 == 0 or step == args.steps - 1:
            mean = loss.detach().clone()
            dist.all_reduce(mean, op=dist.ReduceOp.SUM)
            if rank == 0:
                print(f"step {step:4d}  loss {mean.item() / world:.4f}", flush=True)

    # Every replica ends with the same parameters: check it with one more collective.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    lowest, highest = flat.clone(), flat.clone()
    dist.all_reduce(lowest, op=dist.ReduceOp.MIN)
    dist.all_reduce(highest, op=dist.ReduceOp.MAX)
    same = torch.equal(lowest, highest)
    print(f"rank {rank}/{world}: {args.steps} steps in {time.monotonic() - start:.2f} s, "
          f"replicas {'identical' if same else 'DIFFER'}", flush=True)
    dist.destroy_process_group()
    raise SystemExit(0 if same else 1)


if __name__ == "__main__":
    main()
