"""Data-parallel training with Fulcrum's balanced micro-batches: a plain DataLoader and DDP.

    torchrun --standalone --nproc-per-node 2 examples/ddp_train.py --data data/internvl_sft_1.2M.json

Runs on CPUs with gloo (or GPUs with --backend nccl). The model is a small stand-in for a vision-language model
(a tile encoder feeding a token model) over synthetic tensors shaped by the real per-sample lengths, so the
run is quick; swap in your dataset, collate function and model. What carries over unchanged:

* ``fulcrum.BalancedBatchSampler`` as the DataLoader's ``batch_sampler`` (through ``fulcrum.balanced_loader``,
  which hands every batch over with its ``StepInfo``): every rank gets the same number of balanced
  micro-batches in every step, so gradient accumulation never deadlocks;
* ``fulcrum.normalize_loss``: summed token losses scaled by the step's global token count, exact across
  ranks and micro-batches of different sizes;
* the sampler's ``state_dict`` in the checkpoint: ``--resume`` continues mid-epoch, also on another number
  of processes.
"""

import argparse
import contextlib
import json
import os
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import fulcrum

TILE_FEATURES = 8
VOCAB = 128
TOKENS_PER_POSITION = 64  # the stand-in model sees one position per 64 real tokens


class SyntheticVisionLanguage(torch.utils.data.Dataset):
    """Sample i: `tiles` random tile features and a token sequence, sized by the real lengths."""

    def __init__(self, tiles: np.ndarray, positions: np.ndarray):
        self.tiles, self.positions = tiles, positions

    def __len__(self):
        return len(self.positions)

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(int(i))
        n = int(self.positions[i])
        return {"tiles": torch.randn(int(self.tiles[i]), TILE_FEATURES, generator=g),
                "tokens": torch.randint(0, VOCAB, (n + 1,), generator=g), "id": int(i)}


def pack(samples):
    """Packs a micro-batch into one sequence: tiles of all samples, then every sample's tokens."""
    return {"tiles": torch.cat([s["tiles"] for s in samples]),
            "inputs": torch.cat([s["tokens"][:-1] for s in samples]),
            "targets": torch.cat([s["tokens"][1:] for s in samples]),
            "ids": [s["id"] for s in samples]}


class TinyVisionLanguageModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.vision = torch.nn.Linear(TILE_FEATURES, 32)
        self.embed = torch.nn.Embedding(VOCAB, 32)
        self.head = torch.nn.Linear(32, VOCAB)

    def forward(self, tiles, inputs):
        # Sum over tiles / count keeps the encoder in the graph for text-only micro-batches, which DDP needs.
        image = self.vision(tiles).sum(0) / max(len(tiles), 1)
        return self.head(torch.tanh(self.embed(inputs) + image))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="data/internvl_sft_1.2M.json", help="length file or meta index")
    p.add_argument("--root", default=".", help="second folder to resolve the index's paths against")
    p.add_argument("--max-samples", type=int, default=0, help="train on the first N samples only")
    p.add_argument("--batch-size", type=int, default=4, help="samples per micro-batch per rank, on average")
    p.add_argument("--micro-batches", type=int, default=2, help="gradient accumulation steps")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps", type=int, default=0, help="stop after this many steps of the epoch (0: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", default="gloo")
    p.add_argument("--checkpoint", help="write model, optimizer and sampler state here when stopping")
    p.add_argument("--resume", help="continue from a checkpoint (any number of processes)")
    p.add_argument("--report", help="each rank writes what it trained on to REPORT.rank<r>.json")
    args = p.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group(args.backend)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    # NCCL runs on GPUs: each rank on the GPU of its local rank, the model and every batch moved there.
    device = torch.device("cpu")
    if args.backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank % torch.cuda.device_count())))
        torch.cuda.set_device(device)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore" if rank else "default")  # skipped index entries: say it once
        lengths = fulcrum.Dataset.load(args.data, root=args.root)
    if args.max_samples:
        lengths = lengths.subset(np.arange(min(args.max_samples, len(lengths)), dtype=np.uint32))
    positions = np.maximum(1, np.asarray(lengths.tokens) // TOKENS_PER_POSITION)
    sampler = fulcrum.BalancedBatchSampler(lengths, loss_tokens=positions, batch_size=args.batch_size,
                                           micro_batches=args.micro_batches, seed=args.seed)
    loader = fulcrum.balanced_loader(SyntheticVisionLanguage(np.asarray(lengths.vision), positions), sampler,
                                     collate_fn=pack)

    torch.manual_seed(args.seed)
    model = DistributedDataParallel(TinyVisionLanguageModel().to(device))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    start_epoch = 0
    if args.resume:
        state = torch.load(args.resume, weights_only=False, map_location=device)
        model.module.load_state_dict(state["model"])  # onto the model's device
        optimizer.load_state_dict(state["optimizer"])
        sampler.load_state_dict(state["sampler"])
        start_epoch = state["sampler"]["epoch"]

    trained, losses = [], []
    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)
        for batch, info in loader:
            batch.update({k: batch[k].to(device) for k in ("tiles", "inputs", "targets")})
            last = info.micro_batch == info.micro_batches - 1
            with model.no_sync() if not last else contextlib.nullcontext():  # all-reduce once per step
                logits = model(batch["tiles"], batch["inputs"])
                loss_sum = F.cross_entropy(logits, batch["targets"], reduction="sum")
                fulcrum.normalize_loss(loss_sum, info).backward()
            if info.micro_batch == 0:
                trained.append({"epoch": epoch, "step": info.step, "ids": []})
                losses.append(0.0)
            trained[-1]["ids"].append(batch["ids"])
            losses[-1] += loss_sum.item() / info.step_tokens
            if last:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                if args.steps and len(trained) >= args.steps:
                    break
        if args.steps and len(trained) >= args.steps:
            break

    mean_loss = torch.tensor(losses, dtype=torch.float64, device=device)
    dist.all_reduce(mean_loss)  # each rank held its share of every step's token-mean loss
    checksum = sum(float(v.double().sum()) for v in model.module.state_dict().values())
    if args.checkpoint and rank == 0:
        torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                    "sampler": sampler.state_dict()}, args.checkpoint)
    if args.report:
        Path(f"{args.report}.rank{rank}.json").write_text(json.dumps(
            {"rank": rank, "world_size": world_size, "steps": trained, "step_loss": mean_loss.tolist(),
             "parameter_checksum": checksum, "samples": len(lengths)}))
    if rank == 0:
        print(f"trained {len(trained)} steps on {world_size} ranks; loss {mean_loss[0]:.4f} → {mean_loss[-1]:.4f}"
              if len(trained) else f"nothing left to train on {world_size} ranks")
    from fulcrum.runtime import end_rank

    end_rank()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
