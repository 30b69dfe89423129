"""A small vision-language model laid out as Fulcrum's layer chain.

A ViT-style encoder (patch embedding, transformer blocks, final norm) turns each image tile into patch tokens; a
projector merges neighbouring patch tokens and maps them to the LLM's width; a GPT-style decoder (token embedding,
transformer blocks, final norm, LM head) reads the image features in place of its image tokens. ``layers`` is the
flattened chain in the order of ``fulcrum_model()``'s components, which is what a Fulcrum plan's stage ranges
index, and every layer is ``layer(state, batch) -> state``: ``state`` is a tuple of tensors (the activations
between layers), ``batch`` the micro-batch's tensors.

A micro-batch (``batch``) holds:
  pixels       [tiles, 3, image, image]  the micro-batch's tiles, samples in order
  tokens       [rows, length]            token ids; IMAGE_TOKEN where an image feature goes
  positions    [rows, length]            position of each token in its sample
  labels       [rows, length]            next-token targets, IGNORE where there is no loss
  seq_lens     [rows, segments]          the samples' lengths in each row (0: unused slot)
  real_tiles   [1], real_tokens [1]      how many tiles and tokens of each row are real (the rest pads to a cap)
Packed micro-batches have one row holding several samples (attention stays inside each sample); padded ones
have a row per sample, padded to the longest (attention over the padded square, as padded training computes).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

IMAGE_TOKEN = 0
IGNORE = -100


@dataclass(frozen=True)
class TinyVlmConfig:
    image: int = 32          # tile side in pixels
    patch: int = 4           # patch side: (32 / 4)² = 64 patch tokens per tile
    vision_hidden: int = 128
    vision_ffn: int = 512
    vision_heads: int = 4
    vision_blocks: int = 6
    merge: int = 2           # patch tokens per LLM token: 32 LLM tokens per tile
    hidden: int = 128
    ffn: int = 512
    heads: int = 4
    blocks: int = 8
    vocab: int = 512
    max_positions: int = 1024

    @property
    def patches(self) -> int:
        return (self.image // self.patch) ** 2

    @property
    def tokens_per_tile(self) -> int:
        return self.patches // self.merge

    def to_dict(self) -> dict:
        return asdict(self)


class Attention(nn.Module):
    """Multi-head self-attention over the micro-batch's layout: whole tiles (encoder), causal within each packed
    sample, or causal over padded rows with the padding masked out."""

    def __init__(self, hidden: int, heads: int, causal: bool):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.recompute_core = False  # selective recomputation: rerun the attention core in the backward pass

    def core(self, q, k, v, seq_lens):
        # q, k, v: [rows, heads, length, head_dim]
        if not self.causal:
            return F.scaled_dot_product_attention(q, k, v)
        rows, length = q.shape[0], q.shape[2]
        if rows == 1:
            # One packed row: attention stays inside each sample, and costs Σt² as varlen kernels do.
            lens = [int(n) for n in seq_lens[0].tolist() if n > 0]
            used = sum(lens)
            parts = [F.scaled_dot_product_attention(q[:, :, a:a + n], k[:, :, a:a + n], v[:, :, a:a + n],
                                                    is_causal=True)
                     for a, n in zip(_starts(lens), lens)]
            if used < length:  # a tail not covered by samples attends to itself only
                parts.append(v[:, :, used:])
            return torch.cat(parts, dim=2)
        # Padded rows: the full square of every row, causal, keys beyond the row's sample masked.
        real = seq_lens[:, 0].to(q.device)
        keys = torch.arange(length, device=q.device)
        mask = (keys[None, :] <= keys[:, None])[None] & (keys[None, None, :] < real[:, None, None])
        mask = mask | torch.eye(length, dtype=torch.bool, device=q.device)[None]  # padding rows see themselves
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None])

    def forward(self, x, seq_lens):
        rows, length, hidden = x.shape
        q, k, v = self.qkv(x).view(rows, length, 3, self.heads, hidden // self.heads).permute(2, 0, 3, 1, 4)
        if self.recompute_core and torch.is_grad_enabled():
            y = checkpoint(self.core, q, k, v, seq_lens, use_reentrant=False)
        else:
            y = self.core(q, k, v, seq_lens)
        return self.out(y.transpose(1, 2).reshape(rows, length, hidden))


def _starts(lens):
    out, at = [], 0
    for n in lens:
        out.append(at)
        at += n
    return out


class Block(nn.Module):
    """Pre-norm transformer block: attention and a GELU MLP, each with a residual."""

    def __init__(self, hidden: int, ffn: int, heads: int, causal: bool):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.attention = Attention(hidden, heads, causal)
        self.mlp = nn.Sequential(nn.Linear(hidden, ffn), nn.GELU(), nn.Linear(ffn, hidden))
        self.causal = causal

    def forward(self, state, batch):
        (x,) = state
        seq_lens = batch["seq_lens"]
        x = x + self.attention(self.norm1(x), seq_lens)
        return (x + self.mlp(self.norm2(x)),)


class PatchEmbedding(nn.Module):
    def __init__(self, c: TinyVlmConfig):
        super().__init__()
        self.patch = c.patch
        self.proj = nn.Linear(3 * c.patch * c.patch, c.vision_hidden)
        self.position = nn.Parameter(torch.randn(c.patches, c.vision_hidden) * 0.02)

    def forward(self, state, batch):
        pixels = batch["pixels"][: int(batch["real_tiles"].reshape(-1)[0])]
        p = self.patch
        tiles = pixels.shape[0]
        # The patch count is the model's, not inferred: a micro-batch of text-only samples has no tile.
        patches = pixels.unfold(2, p, p).unfold(3, p, p).permute(0, 2, 3, 1, 4, 5).reshape(
            tiles, self.position.shape[0], 3 * p * p)
        return (self.proj(patches) + self.position,)


class FinalNorm(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)

    def forward(self, state, batch):
        (x,) = state
        return (self.norm(x),)


class Projector(nn.Module):
    """Merges `merge` neighbouring patch tokens (pixel-shuffle style) and maps them to the LLM's width."""

    def __init__(self, c: TinyVlmConfig):
        super().__init__()
        self.merge = c.merge
        self.mlp = nn.Sequential(nn.Linear(c.vision_hidden * c.merge, c.hidden), nn.GELU(),
                                 nn.Linear(c.hidden, c.hidden))

    def forward(self, state, batch):
        (x,) = state
        tiles, patches, width = x.shape
        return (self.mlp(x.reshape(tiles * patches // self.merge, width * self.merge)),)


class TokenEmbedding(nn.Module):
    """Token and position embeddings; the projector's features replace the image tokens, in order."""

    def __init__(self, c: TinyVlmConfig):
        super().__init__()
        self.tokens = nn.Embedding(c.vocab, c.hidden)
        self.positions = nn.Embedding(c.max_positions, c.hidden)

    def forward(self, state, batch):
        (image,) = state
        real = int(batch["real_tokens"].reshape(-1)[0])
        tokens, positions = batch["tokens"][:, :real], batch["positions"][:, :real]
        x = self.tokens(tokens) + self.positions(positions)
        is_image = (tokens == IMAGE_TOKEN).unsqueeze(-1)
        # masked_scatter fills the image positions row by row with the features in order; adding 0·sum keeps
        # the encoder in the graph when a micro-batch has no image.
        x = x.masked_scatter(is_image, image.to(x.dtype)) if image.shape[0] else x + 0 * image.sum()
        return (x,)


class LmHead(nn.Module):
    def __init__(self, c: TinyVlmConfig):
        super().__init__()
        self.proj = nn.Linear(c.hidden, c.vocab, bias=False)

    def forward(self, state, batch):
        (x,) = state
        return (self.proj(x),)


class TinyVlm(nn.Module):
    def __init__(self, config: TinyVlmConfig = TinyVlmConfig(), seed: int = 0):
        super().__init__()
        self.config = c = config
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            layers = [PatchEmbedding(c)]
            layers += [Block(c.vision_hidden, c.vision_ffn, c.vision_heads, causal=False)
                       for _ in range(c.vision_blocks)]
            layers += [FinalNorm(c.vision_hidden), Projector(c), TokenEmbedding(c)]
            layers += [Block(c.hidden, c.ffn, c.heads, causal=True) for _ in range(c.blocks)]
            layers += [FinalNorm(c.hidden), LmHead(c)]
            self.layers = nn.ModuleList(layers)
        # Where the chain's components end: activations after a layer are tiles × patches (encoder), image
        # features (projector) or rows × tokens (LLM).
        self.encoder_end = 1 + c.vision_blocks + 1
        self.projector_end = self.encoder_end + 1

    def forward(self, batch):
        state = ()
        for layer in self.layers:
            state = layer(state, batch)
        return state[0]

    # The runtime pads activations sent between pipeline stages to fixed shapes (pipeline schedules need
    # them static) and trims them back on arrival: tiles to the micro-batch's tile cap, tokens to its token cap.
    def to_boundary(self, state, batch, after_layer: int):
        (x,) = state
        if after_layer < self.encoder_end:
            return (F.pad(x, (0, 0, 0, 0, 0, batch["pixels"].shape[0] - x.shape[0])),)
        if after_layer < self.projector_end:
            cap = batch["pixels"].shape[0] * self.config.tokens_per_tile
            return (F.pad(x, (0, 0, 0, cap - x.shape[0])),)
        return (F.pad(x, (0, 0, 0, batch["tokens"].shape[1] - x.shape[1])),)

    def from_boundary(self, state, batch, after_layer: int):
        (x,) = state
        if after_layer < self.encoder_end:
            return (x[: int(batch["real_tiles"].reshape(-1)[0])],)
        if after_layer < self.projector_end:
            return (x[: int(batch["real_tiles"].reshape(-1)[0]) * self.config.tokens_per_tile],)
        return (x[:, : int(batch["real_tokens"].reshape(-1)[0])],)

    def profile_inputs(self, layer: int, tokens: int, seed: int = 0):
        """``(state, batch)`` in which layer ``layer`` processes ``tokens`` tokens (fulcrum.profile): whole tiles
        of patch tokens in the encoder, merged image tokens in the projector, one sample of ``tokens`` in the
        LLM."""
        c = self.config
        g = torch.Generator().manual_seed(seed)
        if layer < self.projector_end:
            per_tile = c.patches if layer < self.encoder_end else c.tokens_per_tile
            tiles = max(1, tokens // per_tile)
            batch = {"pixels": torch.randn(tiles, 3, c.image, c.image, generator=g),
                     "real_tiles": torch.tensor([tiles]), "seq_lens": torch.tensor([[c.patches]] * tiles)}
            state = () if layer == 0 else (torch.randn(tiles, c.patches, c.vision_hidden, generator=g),)
            return state, batch
        batch = {"tokens": torch.randint(IMAGE_TOKEN + 1, c.vocab, (1, tokens), generator=g),
                 "positions": torch.arange(tokens)[None] % c.max_positions, "seq_lens": torch.tensor([[tokens]]),
                 "real_tokens": torch.tensor([tokens]), "real_tiles": torch.tensor([0])}
        if layer == self.projector_end:  # the token embedding: a text-only sample
            return (torch.zeros(0, c.hidden),), batch
        return (torch.randn(1, tokens, c.hidden, generator=g),), batch

    def set_recompute(self, layer: int, mode: str):
        """Selective recomputation of a block reruns its attention core; full is the runtime's checkpoint."""
        module = self.layers[layer]
        if isinstance(module, Block):
            module.attention.recompute_core = mode == "selective"

    def fulcrum_model(self, name: str = "tiny-vlm") -> dict:
        """The same model in Fulcrum's model schema (`fulcrum model --model file.json`)."""
        c = self.config
        return {"fulcrum": 1, "name": name, "components": [
            {"name": "vision", "role": "encoder", "tokens_per_item": c.patches, "merge": c.merge, "layers": [
                {"kind": "patch_embedding", "hidden": c.vision_hidden, "in_features": 3 * c.patch * c.patch,
                 "positions": c.patches, "norm": "none"},
                {"kind": "transformer", "repeat": c.vision_blocks, "hidden": c.vision_hidden, "ffn": c.vision_ffn,
                 "heads": c.vision_heads, "qkv_bias": True, "linear_bias": True},
                {"kind": "final_norm", "hidden": c.vision_hidden}]},
            {"name": "projector", "role": "projector", "layers": [
                {"kind": "projector", "hidden": c.hidden, "in_features": c.vision_hidden * c.merge, "ffn": c.hidden,
                 "linear_bias": True}]},
            {"name": "llm", "role": "llm", "layers": [
                {"kind": "token_embedding", "hidden": c.hidden, "vocab": c.vocab},
                {"kind": "transformer", "repeat": c.blocks, "hidden": c.hidden, "ffn": c.ffn, "heads": c.heads,
                 "qkv_bias": True, "linear_bias": True},
                {"kind": "final_norm", "hidden": c.hidden},
                {"kind": "lm_head", "hidden": c.hidden, "vocab": c.vocab}]}]}


def token_loss_sum(logits, labels):
    """Summed next-token cross-entropy over the labelled tokens (labels may run past the logits: cap padding)."""
    labels = labels[:, : logits.shape[1]]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1),
                           ignore_index=IGNORE, reduction="sum")


__all__ = ["IGNORE", "IMAGE_TOKEN", "TinyVlm", "TinyVlmConfig", "token_loss_sum"]
