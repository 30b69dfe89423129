"""Two tasks sharing an image encoder, laid out as Fulcrum's task graph.

A ViT-style encoder (``vision``: patch embedding, transformer blocks, final norm) turns each 32×32 image into 64
patch tokens. Two tasks train it with their own heads (a transformer block or three, a final norm and a linear
classifier): ``segment`` labels every patch with one of 16 classes, ``parts`` with one of 8, each on its own
batch. ``components`` maps each component to its layer chain, every layer ``layer(state, batch) -> state`` as
Fulcrum's runtime runs them; ``task_graph()`` is the same model in the task graph schema `fulcrum multitask
--tasks` reads. A task's batch holds ``pixels [samples, 3, 32, 32]``, ``labels [samples, 64]`` and
``seq_lens [samples, 1]`` (each image's patch count, which the shared transformer block reads).
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

# tiny_vlm's transformer block and final norm, loaded under their own name (both examples name theirs model.py).
_spec = importlib.util.spec_from_file_location("tiny_vlm_model",
                                               Path(__file__).resolve().parents[1] / "tiny_vlm" / "model.py")
if "tiny_vlm_model" not in sys.modules:
    sys.modules["tiny_vlm_model"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["tiny_vlm_model"])
_tiny_vlm = sys.modules["tiny_vlm_model"]
Block, FinalNorm = _tiny_vlm.Block, _tiny_vlm.FinalNorm


@dataclass(frozen=True)
class TinyMultitaskConfig:
    image: int = 32
    patch: int = 4
    hidden: int = 128
    ffn: int = 512
    heads: int = 4
    vision_blocks: int = 4
    # Per task: batch (samples per step), head blocks, classes.
    tasks: tuple = (("segment", 16, 1, 16), ("parts", 12, 3, 8))

    @property
    def patches(self) -> int:
        return (self.image // self.patch) ** 2


class PatchEmbedding(nn.Module):
    def __init__(self, c: TinyMultitaskConfig):
        super().__init__()
        self.patch = c.patch
        self.proj = nn.Linear(3 * c.patch * c.patch, c.hidden)
        self.position = nn.Parameter(torch.randn(c.patches, c.hidden) * 0.02)

    def forward(self, state, batch):
        pixels, p = batch["pixels"], self.patch
        patches = pixels.unfold(2, p, p).unfold(3, p, p).permute(0, 2, 3, 1, 4, 5).reshape(pixels.shape[0], -1,
                                                                                          3 * p * p)
        return (self.proj(patches) + self.position,)


class Classifier(nn.Module):
    def __init__(self, hidden: int, classes: int):
        super().__init__()
        self.proj = nn.Linear(hidden, classes, bias=False)  # as the model schema's lm_head

    def forward(self, state, batch):
        (x,) = state
        return (self.proj(x),)


class TinyMultitask(nn.Module):
    def __init__(self, config: TinyMultitaskConfig = TinyMultitaskConfig(), seed: int = 0):
        super().__init__()
        self.config = c = config
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            vision = [PatchEmbedding(c)] + [Block(c.hidden, c.ffn, c.heads, causal=False)
                                            for _ in range(c.vision_blocks)] + [FinalNorm(c.hidden)]
            chains = {"vision": nn.ModuleList(vision)}
            for name, _, blocks, classes in c.tasks:
                chains[f"{name}_head"] = nn.ModuleList(
                    [Block(c.hidden, c.ffn, c.heads, causal=False) for _ in range(blocks)]
                    + [FinalNorm(c.hidden), Classifier(c.hidden, classes)])
            self.components = nn.ModuleDict(chains)

    @property
    def layers(self) -> list:
        """Every layer in the task graph's component order, as `fulcrum.profile.profile_model` walks them."""
        return [layer for chain in self.components.values() for layer in chain]

    def profile_inputs(self, layer: int, tokens: int, seed: int = 0):
        """``(state, batch)`` in which layer ``layer`` processes ``tokens`` patch tokens (whole images)."""
        c = self.config
        g = torch.Generator().manual_seed(seed)
        images = max(1, tokens // c.patches)
        batch = {"pixels": torch.randn(images, 3, c.image, c.image, generator=g),
                 "seq_lens": torch.full((images, 1), c.patches, dtype=torch.int64)}
        state = () if layer == 0 else (torch.randn(images, c.patches, c.hidden, generator=g),)
        return state, batch

    def task_loss(self, task: str, state, batch):
        """Summed over the rows: each image's mean cross-entropy over its patches."""
        (logits,) = state
        per_patch = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["labels"].reshape(-1),
                                    reduction="sum")
        return per_patch / self.config.patches

    def reference_loss(self, batches):
        """The step's loss computed in one process, task by task, as the runtime's plans must reproduce: the
        sum over tasks of each task's mean over its images."""
        total, losses = 0, []
        for (name, *_), batch in zip(self.config.tasks, batches):
            state = ()
            for layer in [*self.components["vision"], *self.components[f"{name}_head"]]:
                state = layer(state, batch)
            loss = self.task_loss(name, state, batch) / batch["pixels"].shape[0]
            losses.append(float(loss.detach()))
            total = total + loss
        return total, losses

    def task_graph(self, name: str = "tiny-multitask") -> dict:
        """The task graph in Fulcrum's schema (`fulcrum multitask --tasks file.json`)."""
        c = self.config
        block = {"kind": "transformer", "hidden": c.hidden, "ffn": c.ffn, "heads": c.heads, "qkv_bias": True,
                 "linear_bias": True}
        components = [{"name": "vision", "role": "encoder", "tokens_per_item": c.patches, "layers": [
            {"kind": "patch_embedding", "hidden": c.hidden, "in_features": 3 * c.patch * c.patch,
             "positions": c.patches, "norm": "none"},
            {**block, "repeat": c.vision_blocks}, {"kind": "final_norm", "hidden": c.hidden}]}]
        tasks = []
        for task, batch, blocks, classes in c.tasks:
            components.append({"name": f"{task}_head", "role": "llm", "layers": [
                {**block, "repeat": blocks}, {"kind": "final_norm", "hidden": c.hidden},
                {"kind": "lm_head", "hidden": c.hidden, "vocab": classes}]})
            tasks.append({"name": task, "batch": batch, "micro_batches": 1, "nodes": [
                {"name": "image", "component": "vision", "tokens": c.patches},
                {"name": "head", "component": f"{task}_head", "tokens": c.patches, "inputs": ["image"]}]})
        return {"fulcrum": 1, "kind": "tasks", "name": name,
                "model": {"fulcrum": 1, "name": name, "components": components}, "tasks": tasks}


def make_batches(config: TinyMultitaskConfig, step: int, seed: int = 0) -> list[dict]:
    """Every task's batch for step ``step``: random images whose patch labels follow the pixels (the mean
    colour of each patch, bucketed), so the tasks have something to learn."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    out = []
    for _, batch, _, classes in config.tasks:
        pixels = torch.rand(batch, 3, config.image, config.image, generator=g)
        p = config.patch
        mean = pixels.unfold(2, p, p).unfold(3, p, p).mean(dim=(1, 4, 5)).reshape(batch, -1)
        labels = (mean * classes).long().clamp(max=classes - 1)
        out.append({"pixels": pixels, "labels": labels,
                    "seq_lens": torch.full((batch, 1), config.patches, dtype=torch.int64)})
    return out


__all__ = ["TinyMultitask", "TinyMultitaskConfig", "make_batches"]
