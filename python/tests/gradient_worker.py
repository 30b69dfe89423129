"""Runs fulcrum.runtime on 2 gloo ranks through cases where gradients are easy to get wrong, and writes, per case,
how far each rank's gradients are from one process's on the same data.

    torchrun --nproc-per-node 2 gradient_worker.py --out result.json
    torchrun --nproc-per-node 4 gradient_worker.py --out result.json   # the DP × PP cases

Every rank makes every rank's micro-batches from the same seeds, so each can compute the one-process reference
itself: the gradient of the step's loss-token mean over every rank's micro-batches.
"""

import argparse
import json
import os
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

import fulcrum.runtime as fr


class Embed(nn.Module):
    """The first layer: text features, plus image features when the micro-batch has images (text-only
    micro-batches leave the vision weights unused)."""

    def __init__(self):
        super().__init__()
        self.text = nn.Linear(4, 8)
        self.vision = nn.Linear(4, 8)

    def forward(self, state, batch):
        h = self.text(batch["x"])
        if batch["pixels"].numel():
            h = h + self.vision(batch["pixels"]).mean(0)
        return (h,)


class Block(nn.Module):
    def __init__(self, out=8):
        super().__init__()
        self.lin = nn.Linear(8, out)

    def forward(self, state, batch):
        return (torch.tanh(self.lin(state[0])),)


class Model(nn.Module):
    def __init__(self, layers=4):
        super().__init__()
        torch.manual_seed(0)
        self.layers = nn.ModuleList([Embed(), *[Block() for _ in range(layers - 2)], Block(1)])

    def forward(self, batch):
        state = ()
        for layer in self.layers:
            state = layer(state, batch)
        return state[0]


def loss_sum(out, labels):
    return ((out - labels) ** 2).sum()


def micro_batch(step, rank, j, images):
    g = torch.Generator().manual_seed(1000 * step + 10 * rank + j)
    return {"x": torch.randn(3, 4, generator=g), "pixels": torch.randn(images, 4, generator=g),
            "labels": torch.randn(3, 1, generator=g)}


def reference_gradients(batches_by_rank, tokens, frozen, repeats=1):
    model = Model()
    freeze(model, frozen)
    for _ in range(repeats):
        for batches in batches_by_rank:
            for b in batches:
                (loss_sum(model(b), b["labels"]) / tokens).backward()
    return [q.grad for q in model.parameters()]


def freeze(model, layers):
    for i in layers:
        for q in model.layers[i].parameters():
            q.requires_grad_(False)


def compare(model, runtime, reference):
    """Largest difference between this rank's gradients and the reference's (None on both sides must agree)."""
    worst = 0.0
    held = {id(q) for q in runtime.parameters()}
    for q, want in zip(model.parameters(), reference):
        if id(q) not in held:
            continue
        if (q.grad is None) != (want is None):
            return float("inf")
        if want is not None:
            worst = max(worst, float((q.grad - want).abs().max()))
    return worst


def run_case(name, plan_args, steps, frozen=(), repeats=1):
    """``steps``: per step, the images of each rank's micro-batches ([[rank 0's], [rank 1's]]). Each step's
    gradients are compared after ``repeats`` calls of ``step`` (accumulated without zeroing in between)."""
    rank = dist.get_rank()
    model = Model()
    freeze(model, frozen)
    plan = None if plan_args is None else fr.RuntimePlan.generate(*plan_args[:3], **plan_args[3])
    runtime = fr.Runtime(model, plan, loss_sum, micro_batches=len(steps[0][0]))
    dp = runtime.plan.dp
    errors = []
    for s, images in enumerate(steps):
        by_rank = [[micro_batch(s, r, j, n) for j, n in enumerate(images[r])] for r in range(dp)]
        mine = by_rank[runtime.dp_rank]
        tokens = sum(b["labels"].numel() for batches in by_rank for b in batches)
        for _ in range(repeats):
            runtime.step(mine, step_tokens=tokens)
        errors.append(compare(model, runtime, reference_gradients(by_rank, tokens, frozen, repeats)))
        for q in model.parameters():
            q.grad = None
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, {"engine": runtime.engine, "errors": errors})
    return name, gathered


def groups_given_back() -> dict:
    """Per rank, the process groups held before a DP 2 × PP 2 runtime is made, while it lives, and after it is
    closed."""
    import torch.distributed.distributed_c10d as c10d

    before = len(c10d._world.pg_map)
    with fr.Runtime(Model(), fr.RuntimePlan.generate("1f1b", 4, 2, pp=2, dp=2), loss_sum):
        held = len(c10d._world.pg_map)
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, {"before": before, "held": held, "after": len(c10d._world.pg_map)})
    return gathered


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    dist.init_process_group("gloo")
    if dist.get_world_size() == 4:
        # DP 2 × PP 2: gradients accumulated over two calls of step under torch.distributed.pipelining's 1F1B and
        # under the executor, each reduced over its data-parallel group (a group of its own, not the world).
        # torch's schedules need equal shapes in a rank's micro-batches: the replicas' images differ instead.
        cases = dict([
            run_case("torch-accumulate", ("1f1b", 4, 2, {"pp": 2, "dp": 2}), [[[1, 1], [2, 2]]], repeats=2),
            run_case("executor-dp-pp-accumulate", ("interleaved", 4, 2, {"pp": 2, "vpp": 2, "dp": 2}),
                     [[[1, 2], [2, 0]]], repeats=2),
        ])
        cases["groups"] = groups_given_back()
        if dist.get_rank() == 0:
            Path(a.out).write_text(json.dumps(cases))
        fr.end_rank()
    cases = dict([
        # Pure data parallelism (DDP): no images anywhere, then on one rank only, then on both.
        run_case("ddp-unused", None, [[[0], [0]], [[2], [0]], [[1], [3]]]),
        # Gradients accumulated over two calls of step without zeroing: reduced once, not once per replica.
        run_case("ddp-accumulate", None, [[[1, 2], [2, 0]]], repeats=2),
        run_case("executor-accumulate", ("interleaved", 4, 2, {"pp": 1, "vpp": 2, "dp": 2}),
                 [[[1, 2], [2, 0]]], repeats=2),
        # A frozen first stage (the image encoder of a LLaVA-style run): its outputs take no gradient.
        run_case("zb-h1-frozen-first-stage", ("zb-h1", 4, 2, {"pp": 2}), [[[1, 1]]], frozen=(0, 1)),
        run_case("interleaved-frozen-first-stage", ("interleaved", 4, 2, {"pp": 2, "vpp": 2}), [[[1, 1]]],
                 frozen=(0,)),
        # A frozen last stage: its input gradient still flows back to the trained first stage.
        run_case("zb-h1-frozen-last-stage", ("zb-h1", 4, 2, {"pp": 2}), [[[1, 1]]], frozen=(2, 3)),
    ])
    if dist.get_rank() == 0:
        Path(a.out).write_text(json.dumps(cases))
    fr.end_rank()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
