"""PyTorch generation: the models behind the shared numpy decoding algorithms.

`edgeformer.core.decoding` holds greedy / sampling / beam search over a `Stepper`; here are
the PyTorch steppers. The ONNX runtime has its own steppers over the same algorithms.
"""

from __future__ import annotations

import numpy as np
import torch

from edgeformer.core.decoding import DecodeInputs, generate
from edgeformer.core.options import GenerationOptions, prepare_options

from .layers import KV
from .transformer import DecoderOnly, EncoderDecoder


def pad_batch(
    seqs: list[list[int]], pad_id: int, left: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad id lists to (B, T) ids and a (B, T) 0/1 mask; left padding for LM prompts."""
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), T), dtype=torch.long)
    for i, s in enumerate(seqs):
        sl = slice(T - len(s), T) if left else slice(0, len(s))
        ids[i, sl] = torch.tensor(s, dtype=torch.long)
        mask[i, sl] = 1
    return ids, mask


class EncoderDecoderStepper:
    """Holds the cross K/V, the source mask and the self-attention cache of a batch."""

    def __init__(self, model: EncoderDecoder, src: torch.Tensor, src_mask: torch.Tensor):
        self.model = model
        self.src_mask = src_mask
        self.cross = model.cross_kv(model.encode(src, src_mask))
        self.cache: list[KV] | None = None

    def first_logits(self) -> np.ndarray:
        bos = torch.full((self.src_mask.shape[0],), self.model.cfg.bos_id, dtype=torch.long)
        return self.step(bos.numpy())

    @torch.no_grad()
    def step(self, tokens: np.ndarray) -> np.ndarray:
        ids = torch.from_numpy(np.asarray(tokens, dtype=np.int64))[:, None].to(self.src_mask.device)
        logits, self.cache = self.model.decode(ids, self.cross, self.src_mask, self.cache)
        return logits[:, -1].float().cpu().numpy()

    def select(self, rows: np.ndarray) -> None:
        idx = torch.as_tensor(rows, dtype=torch.long, device=self.src_mask.device)
        self.src_mask = self.src_mask[idx]
        self.cross = [(k[idx], v[idx]) for k, v in self.cross]
        if self.cache is not None:
            self.cache = [(k[idx], v[idx]) for k, v in self.cache]


class DecoderOnlyStepper:
    """Holds the attention mask (real tokens so far) and the cache of a left-padded batch."""

    def __init__(self, model: DecoderOnly, ids: torch.Tensor, mask: torch.Tensor):
        self.model = model
        self.mask = mask
        self.cache: list[KV] | None = None
        self.prompt = ids

    @torch.no_grad()
    def first_logits(self) -> np.ndarray:
        logits, self.cache = self.model(self.prompt, self.mask)
        return logits[:, -1].float().cpu().numpy()

    @torch.no_grad()
    def step(self, tokens: np.ndarray) -> np.ndarray:
        ids = torch.from_numpy(np.asarray(tokens, dtype=np.int64))[:, None].to(self.mask.device)
        self.mask = torch.cat((self.mask, torch.ones_like(ids)), dim=1)
        logits, self.cache = self.model(ids, self.mask, self.cache)
        return logits[:, -1].float().cpu().numpy()

    def select(self, rows: np.ndarray) -> None:
        idx = torch.as_tensor(rows, dtype=torch.long, device=self.mask.device)
        self.mask = self.mask[idx]
        if self.cache is not None:
            self.cache = [(k[idx], v[idx]) for k, v in self.cache]


def never(cfg) -> tuple[int, ...]:
    """Token ids no decoding ever chooses: padding and BOS, unless one is the EOS too (as the
    runtime's banned_ids: GPT-2's one <|endoftext|> still ends an output)."""
    return tuple(i for i in dict.fromkeys((cfg.pad_id, cfg.bos_id)) if i != cfg.eos_id)


@torch.no_grad()
def translate_ids(
    model: EncoderDecoder, sources: list[list[int]], opts: GenerationOptions | None = None
) -> list[list[int]]:
    """Source id lists (ending in EOS) -> output id lists (no BOS/EOS)."""
    opts, _ = prepare_options(opts or GenerationOptions(), model.cfg.vocab_size, model.cfg.max_len)
    device = next(model.parameters()).device
    src, mask = pad_batch(sources, model.cfg.source_pad_id)
    stepper = EncoderDecoderStepper(model, src.to(device), mask.to(device))
    cfg = model.cfg
    return generate(
        stepper.first_logits(), stepper, opts, DecodeInputs(cfg.eos_id, banned=never(cfg))
    )


@torch.no_grad()
def complete_ids(
    model: DecoderOnly, prompts: list[list[int]], opts: GenerationOptions | None = None
) -> list[list[int]]:
    """Prompt id lists -> continuation id lists (no EOS)."""
    room = model.cfg.max_len + 1 - max(len(p) for p in prompts)
    opts, _ = prepare_options(opts or GenerationOptions(), model.cfg.vocab_size, room)
    device = next(model.parameters()).device
    ids, mask = pad_batch(prompts, model.cfg.pad_id, left=True)
    stepper = DecoderOnlyStepper(model, ids.to(device), mask.to(device))
    cfg = model.cfg
    inputs = DecodeInputs(cfg.eos_id, prompts, never(cfg))
    return generate(stepper.first_logits(), stepper, opts, inputs)
