"""Fulcrum's balanced micro-batches in a Hugging Face ``Trainer``.

    torchrun --standalone --nproc-per-node 2 examples/hf_trainer.py --data data/internvl_sft_1.2M.json

The Trainer builds its DataLoader from a per-sample sampler and lets Accelerate shard the batches over the
processes. ``BalancedTrainer`` hands it Fulcrum's sampler instead: it is already rank-aware (every rank plans
the same epoch and takes its own micro-batches), so Accelerate's sharding wrapper is made a passthrough.
Set ``gradient_accumulation_steps`` to the sampler's ``micro_batches``: the Trainer then counts the step's
label tokens over every micro-batch and rank (``num_items_in_batch``) and normalises the loss by it.

The model is a 2-layer Llama built from a config (no download) over synthetic tokens sized by the real
lengths, so the run takes seconds on CPUs with gloo.
"""

import argparse
import json
import os
import tempfile
import warnings

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

import fulcrum
from fulcrum.runtime import end_rank

VOCAB = 128
TOKENS_PER_POSITION = 64  # the small model sees one position per 64 real tokens


class SyntheticText(torch.utils.data.Dataset):
    def __init__(self, positions: np.ndarray):
        self.positions = positions

    def __len__(self):
        return len(self.positions)

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(int(i))
        return {"input_ids": torch.randint(0, VOCAB, (int(self.positions[i]) + 1,), generator=g), "id": int(i)}


def pad_collate(features, seen=None):
    """Pads a micro-batch to its longest sample; padding carries no loss (label -100)."""
    if seen is not None:
        seen.append([f["id"] for f in features])
    longest = max(len(f["input_ids"]) for f in features)
    ids = torch.zeros(len(features), longest, dtype=torch.long)
    mask = torch.zeros(len(features), longest, dtype=torch.long)
    for row, f in enumerate(features):
        ids[row, : len(f["input_ids"])] = f["input_ids"]
        mask[row, : len(f["input_ids"])] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


class BalancedTrainer(Trainer):
    """A Trainer whose training batches come from a fulcrum.BalancedBatchSampler."""

    def __init__(self, *args, batch_sampler: fulcrum.BalancedBatchSampler, **kwargs):
        super().__init__(*args, **kwargs)
        if batch_sampler.plan.micro_batches != self.args.gradient_accumulation_steps:
            raise ValueError("gradient_accumulation_steps must equal the sampler's micro_batches")
        self.batch_sampler = batch_sampler

    def get_train_dataloader(self):
        loader = torch.utils.data.DataLoader(
            self.train_dataset, batch_sampler=self.batch_sampler, collate_fn=self.data_collator,
            num_workers=self.args.dataloader_num_workers, pin_memory=self.args.dataloader_pin_memory)
        loader = self.accelerator.prepare(loader)
        # Accelerate wraps a batch sampler to deal batches out over processes; ours already did.
        shard = getattr(loader, "batch_sampler", None)
        if shard is not None and getattr(shard, "batch_sampler", None) is self.batch_sampler:
            shard.num_processes, shard.process_index = 1, 0
        return loader


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="data/internvl_sft_1.2M.json")
    p.add_argument("--root", default=".")
    p.add_argument("--max-samples", type=int, default=2000, help="train on the first N samples (0: all)")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--micro-batches", type=int, default=2)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--output-dir", default=None)
    p.add_argument("--report", help="each rank writes the micro-batches its loader fetched to REPORT.rank<r>.json: "
                                    "those it trained on, and at most one fetched ahead")
    args = p.parse_args()
    torch.set_num_threads(1)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lengths = fulcrum.Dataset.load(args.data, root=args.root)
    if args.max_samples:
        lengths = lengths.subset(np.arange(min(args.max_samples, len(lengths)), dtype=np.uint32))
    positions = np.maximum(1, np.asarray(lengths.tokens) // TOKENS_PER_POSITION)

    output_dir = args.output_dir or tempfile.mkdtemp(prefix="fulcrum-hf-")
    training = TrainingArguments(
        output_dir=output_dir, per_device_train_batch_size=args.batch_size,
        gradient_accumulation_steps=args.micro_batches, max_steps=args.steps, learning_rate=3e-3,
        use_cpu=True, ddp_backend="gloo", report_to=[], save_strategy="no", logging_steps=1,
        dataloader_num_workers=0, disable_tqdm=True)
    # The sampler needs the process group, which TrainingArguments has set up by now.
    sampler = fulcrum.BalancedBatchSampler(lengths, loss_tokens=positions, batch_size=args.batch_size,
                                           micro_batches=args.micro_batches, seed=training.seed)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         max_position_embeddings=256))
    seen = []
    trainer = BalancedTrainer(model=model, args=training, train_dataset=SyntheticText(positions),
                              data_collator=lambda f: pad_collate(f, seen), batch_sampler=sampler)
    result = trainer.train()
    if args.report:
        with open(f"{args.report}.rank{training.process_index}.json", "w") as out:
            json.dump({"world_size": training.world_size, "micro_batches": seen, "steps": result.global_step}, out)
    if trainer.is_world_process_zero():
        print(f"trained {result.global_step} steps on {training.world_size} processes; "
              f"loss {result.training_loss:.4f}")
    # The interpreter's own teardown of Trainer's gloo group can abort a rank whose work is done.
    end_rank()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
