"""Teacher-forcing batches: id pairs -> the padded tensors an EncoderDecoder's forward takes.

    src     (B, S)  source ids + EOS, right-padded
    tgt_in  (B, T)  BOS + target ids (the decoder's input)
    tgt_out (B, T)  target ids + EOS (what it must predict), padding where tgt_in has it

Training builds its batches with these; export feeds them to the model for GPTQ's calibration.
The ids default to ModelConfig's (and edgeformer's tokenizers'): PAD 0, BOS 1, EOS 2.
"""

from __future__ import annotations

import torch

Pair = tuple[list[int], list[int]]  # (source ids + EOS, target ids)


def teacher_forcing(tgt: list[int], bos: int = 1, eos: int = 2) -> tuple[list[int], list[int]]:
    """Target ids y -> (decoder input [BOS] + y, decoder output y + [EOS])."""
    return [bos] + tgt, tgt + [eos]


def make_pairs(
    src: list[list[int]], tgt: list[list[int]], max_len: int, eos: int = 2
) -> tuple[list[Pair], int]:
    """(source + [EOS], target) pairs that fit max_len, and the number filtered out."""
    pairs = [(s + [eos], t) for s, t in zip(src, tgt)]
    kept = [(s, t) for s, t in pairs if len(s) <= max_len and len(t) + 1 <= max_len]
    return kept, len(pairs) - len(kept)


def collate(
    pairs: list[Pair], pad: int = 0, bos: int = 1, eos: int = 2
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pairs -> src (B, S), tgt_in (B, T), tgt_out (B, T), padded with `pad`."""

    def padded(seqs: list[list[int]]) -> torch.Tensor:
        out = torch.full((len(seqs), max(len(s) for s in seqs)), pad, dtype=torch.long)
        for i, s in enumerate(seqs):
            out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        return out

    shifted = [teacher_forcing(t, bos, eos) for _, t in pairs]
    return (
        padded([s for s, _ in pairs]),
        padded([i for i, _ in shifted]),
        padded([o for _, o in shifted]),
    )
