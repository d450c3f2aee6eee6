"""Real training code on the `baton` backend: DDP against gloo (same seeds, same parameters and
loss curve), Megatron-style tensor parallelism (column- then row-parallel MLP and attention, two
all-reduces per layer, counted) against the single-process model over 2 and 4 ranks, and an
MoE token dispatch and combine with random uneven all_to_all splits against the single-process
result."""

import time

from baton_testing import LocalCluster, import_torch_backend, run_ranks

torch = import_torch_backend()
import torch.distributed as dist  # noqa: E402

WORLD = 4
STEPS = 50

# DDP: float32 all-reduces whose sums are taken in another order than gloo's differ in the
# last bits (a 4-term float32 sum is exact to about 2 ulp, 2.4e-7 relative); 50 SGD steps of
# this small, well-conditioned model keep such differences near that size. The tolerance is
# 100x that relative size, far below any real divergence (a wrong or missing all-reduce moves
# the parameters by 1e-2 or more, which the test also checks can be seen).
DDP_RTOL = 2e-5
DDP_ATOL = 1e-6


def ddp_train(rank, world):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 8))
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(99 + rank)  # each rank its own shard of data
    losses = []
    for _ in range(STEPS):
        x = torch.randn(16, 32, generator=gen)
        y = torch.randn(16, 8, generator=gen)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        # the mean loss over ranks, for the curve
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
    return [p.detach().clone() for p in model.parameters()], losses


# ---- Megatron-style tensor parallelism ----

HIDDEN, HEADS, FFN, SEQ, LAYERS = 32, 4, 64, 6, 3


def layer_weights(layer):
    g = torch.Generator().manual_seed(500 + layer)
    w = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64) * 0.2  # noqa: E731
    return {"qkv": w(HIDDEN, 3 * HIDDEN), "proj": w(HIDDEN, HIDDEN), "fc1": w(HIDDEN, FFN),
            "fc2": w(FFN, HIDDEN)}


def attention(x, wq, wk, wv, heads):
    seq, _ = x.shape
    q, k, v = x @ wq, x @ wk, x @ wv
    d = q.shape[1] // heads
    q, k, v = (t.reshape(seq, heads, d).transpose(0, 1) for t in (q, k, v))
    scores = torch.softmax(q @ k.transpose(1, 2) / d ** 0.5, dim=-1)
    return (scores @ v).transpose(0, 1).reshape(seq, heads * d)


def reference_forward(x):
    for layer in range(LAYERS):
        w = layer_weights(layer)
        wq, wk, wv = w["qkv"].split(HIDDEN, dim=1)
        x = x + attention(x, wq, wk, wv, HEADS) @ w["proj"]
        x = x + torch.nn.functional.gelu(x @ w["fc1"]) @ w["fc2"]
    return x


def tp_forward(x, group, tp_rank, tp_size):
    """Column-parallel QKV and fc1 (each rank its heads / its slice of the FFN), row-parallel
    proj and fc2, one all-reduce after each: two per layer."""
    heads = HEADS // tp_size
    cols = HIDDEN // tp_size
    ffn = FFN // tp_size
    for layer in range(LAYERS):
        w = layer_weights(layer)
        wq, wk, wv = (m[:, tp_rank * cols:(tp_rank + 1) * cols]
                      for m in w["qkv"].split(HIDDEN, dim=1))
        partial = attention(x, wq, wk, wv, heads) @ w["proj"][tp_rank * cols:(tp_rank + 1) * cols]
        dist.all_reduce(partial, group=group)
        x = x + partial
        hidden = torch.nn.functional.gelu(x @ w["fc1"][:, tp_rank * ffn:(tp_rank + 1) * ffn])
        partial = hidden @ w["fc2"][tp_rank * ffn:(tp_rank + 1) * ffn]
        dist.all_reduce(partial, group=group)
        x = x + partial
    return x


def tensor_parallel(rank, world):
    import baton.torch as bt

    x = torch.randn(SEQ, HIDDEN, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    want = reference_forward(x)
    pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    results = {}
    for name, group, tp_rank, tp_size in (("tp4", dist.group.WORLD, rank, world),
                                          ("tp2", pairs[rank // 2], rank % 2, 2)):
        backend = bt.backend_of(group)
        before = backend.operations("all_reduce")
        got = tp_forward(x, group, tp_rank, tp_size)
        all_reduces = backend.operations("all_reduce") - before
        err = (got - want).abs().max().item()
        results[name] = (all_reduces, err)
    return results


# ---- MoE dispatch and combine ----

EXPERTS_PER_RANK, TOKENS, DIM = 2, 40, 8


def expert_fn(expert, t):
    g = torch.Generator().manual_seed(900 + expert)
    w = torch.randn(DIM, DIM, generator=g, dtype=torch.float64)
    return torch.tanh(t @ w) + expert


def moe(rank, world):
    g = torch.Generator().manual_seed(31 + rank)
    n = TOKENS + int(torch.randint(0, 20, (1,), generator=g))  # uneven token counts
    tokens = torch.randn(n, DIM, generator=g, dtype=torch.float64)
    experts = torch.randint(0, EXPERTS_PER_RANK * world, (n,), generator=g)
    want = torch.stack([expert_fn(int(e), tokens[i]) for i, e in enumerate(experts)])

    # Dispatch: sort tokens by destination rank, exchange counts, then the tokens.
    dest = experts // EXPERTS_PER_RANK
    order = torch.argsort(dest, stable=True)
    send_counts = torch.bincount(dest, minlength=world)
    recv_counts = torch.zeros(world, dtype=torch.int64)
    dist.all_to_all_single(recv_counts, send_counts)
    in_splits, out_splits = send_counts.tolist(), recv_counts.tolist()
    received = torch.zeros(sum(out_splits), DIM, dtype=torch.float64)
    dist.all_to_all_single(received, tokens[order], output_split_sizes=out_splits,
                           input_split_sizes=in_splits)
    received_experts = torch.zeros(sum(out_splits), dtype=torch.int64)
    dist.all_to_all_single(received_experts, experts[order], output_split_sizes=out_splits,
                           input_split_sizes=in_splits)
    # The local experts.
    processed = torch.stack([expert_fn(int(e), received[i])
                             for i, e in enumerate(received_experts)]) if len(received) else \
        torch.zeros(0, DIM, dtype=torch.float64)
    # Combine: the reverse exchange, then undo the sort.
    back = torch.zeros(n, DIM, dtype=torch.float64)
    dist.all_to_all_single(back, processed, output_split_sizes=in_splits,
                           input_split_sizes=out_splits)
    combined = torch.empty_like(back)
    combined[order] = back
    return (combined - want).abs().max().item(), in_splits


def main():
    with LocalCluster(nodes=2) as cluster:
        start = time.monotonic()
        ref = run_ranks(ddp_train, WORLD, cluster.sockets, backend="gloo")
        got = run_ranks(ddp_train, WORLD, cluster.sockets, backend="baton")
        worst = 0.0
        for rank in range(WORLD):
            for p_ref, p_got in zip(ref[rank][0], got[rank][0]):
                if not torch.allclose(p_got, p_ref, rtol=DDP_RTOL, atol=DDP_ATOL):
                    raise AssertionError(f"rank {rank}: parameters differ from gloo's by "
                                         f"{(p_got - p_ref).abs().max().item():.3g}")
                worst = max(worst, (p_got - p_ref).abs().max().item())
            for step, (a, b) in enumerate(zip(ref[rank][1], got[rank][1])):
                if abs(a - b) > DDP_RTOL * abs(a) + DDP_ATOL:
                    raise AssertionError(f"rank {rank}: loss at step {step} {b} vs gloo {a}")
        # Parameters agree across ranks (DDP keeps replicas equal).
        for rank in range(1, WORLD):
            for p0, p in zip(got[0][0], got[rank][0]):
                assert torch.equal(p0, p), f"rank {rank}'s replica differs from rank 0's"
        # The training moved the parameters far more than the tolerance.
        torch.manual_seed(1234)
        init = torch.nn.Linear(32, 64).weight
        moved = (got[0][0][0] - init).abs().max().item()
        assert moved > 1e-2, f"parameters moved only {moved}"
        print(f"DDP: {STEPS} steps x {WORLD} ranks, baton vs gloo max |diff| {worst:.2e} "
              f"(tolerance rtol {DDP_RTOL}, atol {DDP_ATOL}); loss {got[0][1][0]:.4f} -> "
              f"{got[0][1][-1]:.4f}; parameters moved {moved:.3f} "
              f"({time.monotonic() - start:.1f} s)")

        start = time.monotonic()
        results = run_ranks(tensor_parallel, WORLD, cluster.sockets)
        for rank, per in enumerate(results):
            for name, (all_reduces, err) in per.items():
                assert all_reduces == 2 * LAYERS, \
                    f"rank {rank} {name}: {all_reduces} all-reduces for {LAYERS} layers"
                assert err < 1e-12, f"rank {rank} {name}: differs from one process by {err}"
        print(f"tensor parallel: {LAYERS} layers over 4 and 2 ranks, 2 all-reduces per layer, "
              f"max |diff| vs one process {max(e for r in results for _, e in r.values()):.1e} "
              f"({time.monotonic() - start:.1f} s)")

        start = time.monotonic()
        results = run_ranks(moe, WORLD, cluster.sockets)
        for rank, (err, splits) in enumerate(results):
            assert err < 1e-12, f"rank {rank}: MoE output differs by {err}"
        print(f"MoE dispatch/combine: splits {[s for _, s in results]}, max |diff| "
              f"{max(e for e, _ in results):.1e} ({time.monotonic() - start:.1f} s)")
    print("PASS")


if __name__ == "__main__":
    main()
