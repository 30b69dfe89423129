"""Synthetic image-and-text samples whose tile and token counts follow InternVL's SFT lengths, scaled down.

Sample i has the bundled data's tile count and 1/``scale`` of its text tokens; each tile becomes
``tokens_per_tile`` image tokens. Its tiles show one of ``CLASSES`` colour patterns under noise, its text starts
with that class's token and continues along a fixed sparse bigram table, so a model that reads images and text
really learns: the first text token from the image, the rest from the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from model import IGNORE, IMAGE_TOKEN, TinyVlmConfig

CLASSES = 8
REPO = Path(__file__).resolve().parents[2]
BUNDLED_INDEX = REPO / "data" / "internvl_sft_1.2M.json"


@dataclass(frozen=True)
class Lengths:
    tiles: np.ndarray   # tiles per sample
    tokens: np.ndarray  # LLM tokens per sample, image tokens included
    text: np.ndarray    # text tokens per sample (the loss tokens)


def scaled_lengths(samples: int, config: TinyVlmConfig, scale: int = 8, seed: int = 0,
                   index: Path = BUNDLED_INDEX) -> Lengths:
    """``samples`` records drawn without replacement from the bundled lengths (all three sources), scaled: tiles
    as they are, text tokens (the record's tokens less 256 per tile) divided by ``scale``, at least 2."""
    import warnings

    import fulcrum

    with warnings.catch_warnings():
        # The bundled index names all nine files of the mix; three are bundled (data/PROVENANCE.md).
        warnings.filterwarnings("ignore", message=".*not found; skipped")
        data = fulcrum.Dataset.load(str(index), root=str(REPO))
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(len(data), size=samples, replace=False))
    tiles = np.asarray(data.vision, dtype=np.int64)[chosen]
    text_full = np.asarray(data.tokens, dtype=np.int64)[chosen] - 256 * tiles
    text = np.maximum(2, np.ceil(np.maximum(text_full, 0) / scale)).astype(np.int64)
    return Lengths(tiles=tiles, tokens=tiles * config.tokens_per_tile + text, text=text)


class SyntheticVlmData(torch.utils.data.Dataset):
    """Map-style dataset: item i is {"pixels", "tokens", "labels"} for one sample, the same on every call."""

    def __init__(self, lengths: Lengths, config: TinyVlmConfig, seed: int = 0, first_index: int = 0):
        # Items are numbered from ``first_index``: a held-out set of the same task (patterns and bigram table of
        # ``seed``) takes numbers no training item has.
        self.lengths, self.config, self.seed, self.first_index = lengths, config, seed, first_index
        g = torch.Generator().manual_seed(seed)
        self.patterns = torch.rand(CLASSES, 3, 1, 1, generator=g)
        # A sparse bigram table: each text token has 3 successors (the first twice as likely).
        self.successors = torch.randint(CLASSES + 1, config.vocab, (config.vocab, 3), generator=g)

    def __len__(self) -> int:
        return len(self.lengths.tiles)

    def __getitem__(self, i: int) -> dict:
        c = self.config
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.first_index + int(i))
        tiles, text = int(self.lengths.tiles[i]), int(self.lengths.text[i])
        label = int(torch.randint(0, CLASSES, (1,), generator=g))
        pixels = self.patterns[label] + 0.3 * torch.randn(tiles, 3, c.image, c.image, generator=g)
        words = [1 + label]
        picks = torch.multinomial(torch.tensor([0.5, 0.25, 0.25]), text, replacement=True, generator=g)
        for k in range(1, text):
            words.append(int(self.successors[words[-1], int(picks[k])]))
        image_tokens = tiles * c.tokens_per_tile
        tokens = torch.tensor([IMAGE_TOKEN] * image_tokens + words, dtype=torch.int64)
        labels = torch.full_like(tokens, IGNORE)
        if image_tokens:  # each position from the last image token on predicts the next text token
            labels[image_tokens - 1: -1] = tokens[image_tokens:]
        else:
            labels[:-1] = tokens[1:]
        return {"pixels": pixels, "tokens": tokens, "labels": labels}


def _row(samples):
    tokens = torch.cat([s["tokens"] for s in samples])
    return tokens, torch.cat([s["labels"] for s in samples]), torch.cat(
        [torch.arange(len(s["tokens"])) for s in samples])


def pack(samples, token_cap: int = 0, tile_cap: int = 0, segment_cap: int = 0) -> dict:
    """One row holding the samples one after another (attention stays inside each). With caps, the row is
    padded to ``token_cap`` tokens, the tiles to ``tile_cap`` and the sample lengths to ``segment_cap`` slots,
    so every micro-batch has the same shapes (what pipeline schedules need); the padding is never computed."""
    tokens, labels, positions = _row(samples)
    pixels = torch.cat([s["pixels"] for s in samples])
    lens = [len(s["tokens"]) for s in samples]
    real_tokens, real_tiles = len(tokens), pixels.shape[0]
    if token_cap:
        if real_tokens > token_cap or real_tiles > tile_cap or len(lens) > segment_cap:
            raise ValueError(f"micro-batch of {real_tokens} tokens, {real_tiles} tiles and {len(lens)} samples "
                             f"exceeds the caps {token_cap}, {tile_cap}, {segment_cap}")
        pad = token_cap - real_tokens
        tokens = torch.cat([tokens, torch.full((pad,), IMAGE_TOKEN + 1, dtype=torch.int64)])
        labels = torch.cat([labels, torch.full((pad,), IGNORE, dtype=torch.int64)])
        positions = torch.cat([positions, torch.zeros(pad, dtype=torch.int64)])
        pixels = torch.cat([pixels, pixels.new_zeros(tile_cap - real_tiles, *pixels.shape[1:])])
        lens = lens + [0] * (segment_cap - len(lens))
    return {"pixels": pixels, "tokens": tokens[None], "positions": positions[None], "labels": labels[None],
            "seq_lens": torch.tensor([lens], dtype=torch.int64),
            "real_tiles": torch.tensor([real_tiles]), "real_tokens": torch.tensor([real_tokens])}


def pad(samples) -> dict:
    """A row per sample, padded to the longest (InternVL's padded batches); tiles concatenated."""
    longest = max(len(s["tokens"]) for s in samples)
    rows = len(samples)
    tokens = torch.full((rows, longest), IMAGE_TOKEN + 1, dtype=torch.int64)
    labels = torch.full((rows, longest), IGNORE, dtype=torch.int64)
    positions = torch.zeros((rows, longest), dtype=torch.int64)
    for r, s in enumerate(samples):
        n = len(s["tokens"])
        tokens[r, :n], labels[r, :n], positions[r, :n] = s["tokens"], s["labels"], torch.arange(n)
    lens = torch.tensor([[len(s["tokens"])] for s in samples], dtype=torch.int64)
    pixels = torch.cat([s["pixels"] for s in samples])
    return {"pixels": pixels, "tokens": tokens, "positions": positions, "labels": labels, "seq_lens": lens,
            "real_tiles": torch.tensor([pixels.shape[0]]), "real_tokens": torch.tensor([longest])}


def write_lengths(path, lengths: Lengths) -> None:
    """The samples' lengths as a Fulcrum length file (``token_num``: LLM tokens, ``vit_num``: tiles), what
    ``fulcrum batch``, ``simulate --data`` and ``plan --data`` read."""
    import json

    records = [{"token_num": int(t), "vit_num": int(v)} for t, v in zip(lengths.tokens, lengths.tiles)]
    Path(path).write_text(json.dumps(records) + "\n")


def real_tokens(batch: dict) -> int:
    """Non-padding LLM tokens of a collated micro-batch."""
    return int(batch["seq_lens"].sum())


def caps_for(lengths: Lengths, groups) -> tuple[int, int, int]:
    """The token, tile and sample caps that fit every micro-batch of ``groups`` (lists of sample ids)."""
    token_cap = max(int(lengths.tokens[g].sum()) for g in groups)
    tile_cap = max(int(lengths.tiles[g].sum()) for g in groups)
    segment_cap = max(len(g) for g in groups)
    return token_cap, tile_cap, segment_cap


def loss_tokens(lengths: Lengths) -> np.ndarray:
    """Labelled tokens per sample: every text token is predicted (the first one from the last image token)."""
    return np.where(lengths.tiles > 0, lengths.text, lengths.text - 1)


