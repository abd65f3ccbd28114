"""Transformer building blocks: embeddings, positions, attention, feed-forward, residual blocks.

Shapes: B batch, T query length, S key length (past + new), C d_model, H heads, D head dim.
A KV cache entry is a pair (k, v), each (B, H, S, D). Masks are bool, True = may attend,
shaped (B, 1, T, S) so they broadcast over heads; None means "attend to everything".
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import ModelConfig

KV = tuple[torch.Tensor, torch.Tensor]


class TokenEmbedding(nn.Module):
    """Token ids -> vectors scaled by sqrt(d_model), as in the paper (section 3.4)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(cfg.vocab_size, cfg.d_model) * cfg.d_model**-0.5)
        self.scale = math.sqrt(cfg.d_model)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # (B, T) -> (B, T, C)
        return F.embedding(ids, self.weight) * self.scale


def sinusoidal_table(max_len: int, d_model: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d))."""
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    inv = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * inv)
    table[:, 1::2] = torch.cos(pos * inv)
    return table.float()


class AbsolutePositions(nn.Module):
    """Position vectors added to the token embeddings: fixed sinusoids or a learned table."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if cfg.positional == "learned":
            self.table = nn.Parameter(torch.randn(cfg.max_len, cfg.d_model) * 0.02)
        else:
            self.register_buffer(
                "table", sinusoidal_table(cfg.max_len, cfg.d_model), persistent=False
            )

    def forward(self, positions: torch.Tensor) -> torch.Tensor:  # (B, T) -> (B, T, C)
        return F.embedding(positions, self.table)


class Rotary(nn.Module):
    """Rotary position embedding (Su et al., 2021), 'rotate half' layout, applied to q and k."""

    cos: torch.Tensor  # buffers, (max_len, head_dim / 2)
    sin: torch.Tensor

    def __init__(self, cfg: ModelConfig, base: float = 10000.0):
        super().__init__()
        d = cfg.head_dim
        inv = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        angles = torch.arange(cfg.max_len, dtype=torch.float64)[:, None] * inv  # (L, D/2)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        # x (B, H, T, D), positions (B, T)
        cos = F.embedding(positions, self.cos)[:, None]  # (B, 1, T, D/2)
        sin = F.embedding(positions, self.sin)[:, None]
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:  # (B, T, C) -> (B, H, T, D)
    B, T, C = x.shape
    return x.view(B, T, n_heads, C // n_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:  # (B, H, T, D) -> (B, T, C)
    B, H, T, D = x.shape
    return x.transpose(1, 2).reshape(B, T, H * D)


class SelfAttention(nn.Module):
    """Multi-head self-attention with a KV cache: returns the output and the full (k, v)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.dropout = cfg.dropout
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)  # fused q, k, v projection
        self.out = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(
        self,
        x: torch.Tensor,  # (B, T, C)
        mask: torch.Tensor | None,  # (B, 1, T, S) bool
        positions: torch.Tensor,  # (B, T) absolute positions of the new tokens
        rotary: Rotary | None = None,
        past: KV | None = None,  # (B, H, S - T, D) each
    ) -> tuple[torch.Tensor, KV]:
        q, k, v = (split_heads(t, self.n_heads) for t in self.qkv(x).chunk(3, dim=-1))
        if rotary is not None:
            q, k = rotary(q, positions), rotary(k, positions)
        if past is not None:
            k, v = torch.cat((past[0], k), dim=2), torch.cat((past[1], v), dim=2)
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        return self.out(merge_heads(y)), (k, v)


class CrossAttention(nn.Module):
    """Multi-head attention from the decoder to the encoder output; K/V are projected once."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.dropout = cfg.dropout
        self.q = nn.Linear(cfg.d_model, cfg.d_model)
        self.kv = nn.Linear(cfg.d_model, 2 * cfg.d_model)  # fused k, v projection
        self.out = nn.Linear(cfg.d_model, cfg.d_model)

    def project_kv(self, memory: torch.Tensor) -> KV:  # (B, S, C) -> (B, H, S, D) x 2
        k, v = self.kv(memory).chunk(2, dim=-1)
        return split_heads(k, self.n_heads), split_heads(v, self.n_heads)

    def forward(self, x: torch.Tensor, kv: KV, mask: torch.Tensor | None) -> torch.Tensor:
        q = split_heads(self.q(x), self.n_heads)
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, kv[0], kv[1], attn_mask=mask, dropout_p=p)
        return self.out(merge_heads(y))


class FeedForward(nn.Module):
    """Position-wise FFN: Linear -> ReLU/GELU -> dropout -> Linear."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.up = nn.Linear(cfg.d_model, cfg.d_ff)
        self.act = nn.ReLU() if cfg.activation == "relu" else nn.GELU()
        self.drop = nn.Dropout(cfg.dropout)
        self.down = nn.Linear(cfg.d_ff, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.drop(self.act(self.up(x))))


class Residual(nn.Module):
    """x + dropout(sublayer(x)) with LayerNorm before (pre-LN) or after (post-LN, the paper)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.pre = cfg.norm == "pre"
        self.norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, sublayer) -> tuple[torch.Tensor, object]:
        """sublayer(h) returns (y, extra); returns (new x, extra)."""
        y, extra = sublayer(self.norm(x) if self.pre else x)
        x = x + self.drop(y)
        return (x if self.pre else self.norm(x)), extra


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn, self.ffn = SelfAttention(cfg), FeedForward(cfg)
        self.res_attn, self.res_ffn = Residual(cfg), Residual(cfg)

    def forward(self, x, mask, positions, rotary=None) -> torch.Tensor:
        x, _ = self.res_attn(x, lambda h: self.attn(h, mask, positions, rotary))
        x, _ = self.res_ffn(x, lambda h: (self.ffn(h), None))
        return x


class DecoderLayer(nn.Module):
    """Causal self-attention (+ cross-attention when the model has an encoder) + FFN."""

    def __init__(self, cfg: ModelConfig, cross: bool):
        super().__init__()
        self.attn, self.ffn = SelfAttention(cfg), FeedForward(cfg)
        self.res_attn, self.res_ffn = Residual(cfg), Residual(cfg)
        self.cross = CrossAttention(cfg) if cross else None
        self.res_cross = Residual(cfg) if cross else None

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None,
        positions: torch.Tensor,
        rotary: Rotary | None = None,
        past: KV | None = None,
        cross_kv: KV | None = None,
        cross_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, KV]:
        x, present = self.res_attn(x, lambda h: self.attn(h, mask, positions, rotary, past))
        cross, res_cross = self.cross, self.res_cross
        if cross is not None and res_cross is not None:
            x, _ = res_cross(x, lambda h: (cross(h, cross_kv, cross_mask), None))
        x, _ = self.res_ffn(x, lambda h: (self.ffn(h), None))
        return x, present
