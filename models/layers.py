"""Transformer building blocks: embeddings, positions, attention, feed-forward, residual blocks.

Shapes: B batch, T query length, S key length (past + new), C d_model, H heads, D head dim,
G key/value heads (grouped-query attention: each serves H / G query heads; G = H otherwise).
A KV cache entry is a pair (k, v), each (B, G, S, D). Masks are bool, True = may attend,
shaped (B, 1, T, S) so they broadcast over heads; None means "attend to everything".
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..core.config import ModelConfig

KV = tuple[torch.Tensor, torch.Tensor]


class TokenEmbedding(nn.Module):
    """Token ids -> vectors scaled by sqrt(d_model), as in the paper (section 3.4), or unscaled
    (scale_embeddings=False: GPT-2, Llama)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(cfg.vocab_size, cfg.d_model) * cfg.d_model**-0.5)
        self.scale = math.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # (B, T) -> (B, T, C)
        return F.embedding(ids, self.weight) * self.scale


def sinusoidal_table(max_len: int, d_model: int, layout: str = "interleaved") -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d));
    layout "split" (Marian): PE(pos, i) = sin(...), PE(pos, d/2 + i) = cos(...) instead."""
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    inv = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    sin, cos = torch.sin(pos * inv), torch.cos(pos * inv)
    if layout == "split":
        table[:, : d_model // 2], table[:, d_model // 2 :] = sin, cos
    else:
        table[:, 0::2], table[:, 1::2] = sin, cos
    return table.float()


class AbsolutePositions(nn.Module):
    """Position vectors added to the token embeddings: fixed sinusoids or a learned table."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if cfg.positional == "learned":
            self.table = nn.Parameter(torch.randn(cfg.max_len, cfg.d_model) * 0.02)
        else:
            self.register_buffer(
                "table",
                sinusoidal_table(cfg.max_len, cfg.d_model, cfg.sinusoid_layout),
                persistent=False,
            )

    def forward(self, positions: torch.Tensor) -> torch.Tensor:  # (B, T) -> (B, T, C)
        return F.embedding(positions, self.table)


class Rotary(nn.Module):
    """Rotary position embedding (Su et al., 2021), 'rotate half' layout, applied to q and k."""

    cos: torch.Tensor  # buffers, (max_len, head_dim / 2)
    sin: torch.Tensor

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d = cfg.head_dim
        inv = cfg.rope_theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
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


def make_norm(cfg: ModelConfig) -> nn.Module:
    """LayerNorm, or RMSNorm (x / rms(x) * weight: no mean, no bias) when norm_type='rmsnorm'."""
    if cfg.norm_type == "rmsnorm":
        return nn.RMSNorm(cfg.d_model, eps=cfg.layer_norm_eps)
    return nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)


# SelfAttention's mask for a whole sequence without padding or past: the causal mask, computed
# by torch's is_causal path (6 % faster a training step than the same mask as a tensor)
CAUSAL = "causal"


class SelfAttention(nn.Module):
    """Multi-head (or grouped-query) self-attention with a KV cache: returns the output and the
    full (k, v), which hold the G key/value heads."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads, self.n_kv_heads = cfg.n_heads, cfg.kv_heads
        self.dropout = cfg.attention_p
        kv_dim = cfg.kv_heads * cfg.head_dim
        self.split = (cfg.d_model, kv_dim, kv_dim)
        self.qkv = nn.Linear(cfg.d_model, sum(self.split), bias=cfg.bias)  # fused q, k, v
        self.out = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)

    def forward(
        self,
        x: torch.Tensor,  # (B, T, C)
        mask: torch.Tensor | None | str,  # (B, 1, T, S) bool, or CAUSAL (T = S, no padding)
        positions: torch.Tensor,  # (B, T) absolute positions of the new tokens
        rotary: Rotary | None = None,
        past: KV | None = None,  # (B, G, S - T, D) each
    ) -> tuple[torch.Tensor, KV]:
        q, k, v = self.qkv(x).split(self.split, dim=-1)
        q = split_heads(q, self.n_heads)  # (B, H, T, D)
        k, v = split_heads(k, self.n_kv_heads), split_heads(v, self.n_kv_heads)  # (B, G, T, D)
        if rotary is not None:
            q, k = rotary(q, positions), rotary(k, positions)
        if past is not None:
            k, v = torch.cat((past[0], k), dim=2), torch.cat((past[1], v), dim=2)
        group = self.n_heads // self.n_kv_heads  # query heads per key/value head
        kh, vh = (k, v) if group == 1 else (t.repeat_interleave(group, dim=1) for t in (k, v))
        p = self.dropout if self.training else 0.0
        if isinstance(mask, str):  # CAUSAL: torch's causal kernel, no mask tensor
            y = F.scaled_dot_product_attention(q, kh, vh, dropout_p=p, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, kh, vh, attn_mask=mask, dropout_p=p)
        return self.out(merge_heads(y)), (k, v)


class CrossAttention(nn.Module):
    """Multi-head attention from the decoder to the encoder output; K/V are projected once."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.dropout = cfg.attention_p
        self.q = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.kv = nn.Linear(cfg.d_model, 2 * cfg.d_model, bias=cfg.bias)  # fused k, v projection
        self.out = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)

    def project_kv(self, memory: torch.Tensor) -> KV:  # (B, S, C) -> (B, H, S, D) x 2
        k, v = self.kv(memory).chunk(2, dim=-1)
        return split_heads(k, self.n_heads), split_heads(v, self.n_heads)

    def forward(self, x: torch.Tensor, kv: KV, mask: torch.Tensor | None) -> torch.Tensor:
        q = split_heads(self.q(x), self.n_heads)
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, kv[0], kv[1], attn_mask=mask, dropout_p=p)
        return self.out(merge_heads(y))


ACTIVATION_MODULES: dict[str, Callable[[], nn.Module]] = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
    "swiglu": nn.SiLU,  # applied to the gate
    "silu": nn.SiLU,  # x * sigmoid(x), ungated (Marian's "swish")
}


class FeedForward(nn.Module):
    """Position-wise FFN: Linear -> ReLU/GELU/SiLU -> dropout -> Linear; with activation 'swiglu'
    (Shazeer, 2020; Llama): down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: ModelConfig, width: int):
        super().__init__()
        self.up = nn.Linear(cfg.d_model, width, bias=cfg.bias)
        swiglu = cfg.activation == "swiglu"
        self.gate = nn.Linear(cfg.d_model, width, bias=cfg.bias) if swiglu else None
        self.act = ACTIVATION_MODULES[cfg.activation]()
        self.drop = nn.Dropout(cfg.activation_p)
        self.down = nn.Linear(width, cfg.d_model, bias=cfg.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, C) -> (B, T, C)
        if self.gate is not None:
            return self.down(self.drop(self.act(self.gate(x)) * self.up(x)))
        return self.down(self.drop(self.act(self.up(x))))


class Residual(nn.Module):
    """x + dropout(sublayer(x)) with the norm (LayerNorm or RMSNorm) before (pre-LN) or after
    (post-LN, the paper)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.pre = cfg.norm == "pre"
        self.norm = make_norm(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, sublayer) -> tuple[torch.Tensor, object]:
        """sublayer(h) returns (y, extra); returns (new x, extra)."""
        y, extra = sublayer(self.norm(x) if self.pre else x)
        x = x + self.drop(y)
        return (x if self.pre else self.norm(x)), extra


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn, self.ffn = SelfAttention(cfg), FeedForward(cfg, cfg.d_ff)
        self.res_attn, self.res_ffn = Residual(cfg), Residual(cfg)

    def forward(self, x, mask, positions, rotary=None) -> torch.Tensor:
        x, _ = self.res_attn(x, lambda h: self.attn(h, mask, positions, rotary))
        x, _ = self.res_ffn(x, lambda h: (self.ffn(h), None))
        return x


class DecoderLayer(nn.Module):
    """Causal self-attention (+ cross-attention when the model has an encoder) + FFN."""

    def __init__(self, cfg: ModelConfig, cross: bool):
        super().__init__()
        self.attn, self.ffn = SelfAttention(cfg), FeedForward(cfg, cfg.decoder_ffn)
        self.res_attn, self.res_ffn = Residual(cfg), Residual(cfg)
        self.cross = CrossAttention(cfg) if cross else None
        self.res_cross = Residual(cfg) if cross else None

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None | str,
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
