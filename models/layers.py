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

    def __init__(self, cfg: ModelConfig, vocab_size: int | None = None):
        super().__init__()
        rows = cfg.vocab_size if vocab_size is None else vocab_size  # an encoder's own: its own
        self.weight = nn.Parameter(torch.randn(rows, cfg.d_model) * cfg.d_model**-0.5)
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


def relative_bucket(distance: torch.Tensor, bidirectional: bool, buckets: int, max_distance: int):
    """T5's bucket of each key - query distance (Raffel et al., 2020; transformers'
    T5Attention._relative_position_bucket): exact below half the buckets, logarithmic up to
    max_distance, the last bucket beyond; a bidirectional (encoder) bias gives keys after the
    query their own half of the buckets, a causal one (decoder) sees only keys before it."""
    out = torch.zeros_like(distance)
    if bidirectional:
        buckets //= 2
        out += (distance > 0).long() * buckets
        distance = distance.abs()
    else:
        distance = -distance.clamp(max=0)
    exact = buckets // 2
    far = (
        exact
        + (
            torch.log(distance.float() / exact) / math.log(max_distance / exact) * (buckets - exact)
        ).long()
    )
    far = far.clamp(max=buckets - 1)
    return out + torch.where(distance < exact, distance, far)


class RelativeBias(nn.Module):
    """T5's relative position bias: a learned value per head and distance bucket, added to the
    attention logits of every layer of one stack (bidirectional: the encoder's)."""

    def __init__(self, cfg: ModelConfig, bidirectional: bool):
        super().__init__()
        self.buckets, self.max_distance = cfg.buckets
        self.bidirectional = bidirectional
        self.table = nn.Parameter(torch.zeros(self.buckets, cfg.n_heads))  # (buckets, H)

    def by_distance(self, n: int) -> torch.Tensor:
        """The bias of every distance -(n - 1) .. n - 1, (2n - 1, H): row n - 1 + (k - q)."""
        d = torch.arange(-(n - 1), n, device=self.table.device)
        return self.table[relative_bucket(d, self.bidirectional, self.buckets, self.max_distance)]

    def forward(self, q_pos: torch.Tensor, s: int) -> torch.Tensor:
        """q_pos (T,) query positions, keys 0 .. S - 1 -> the bias (1, H, T, S)."""
        distance = torch.arange(s, device=q_pos.device)[None, :] - q_pos[:, None]  # (T, S)
        b = relative_bucket(distance, self.bidirectional, self.buckets, self.max_distance)
        return self.table[b].permute(2, 0, 1)[None]


def rope_frequencies(cfg: ModelConfig, local: bool = False) -> list[tuple[torch.Tensor, float]]:
    """The rotary inverse frequencies (R/2,) float64 and the factor on cos/sin, as Hugging Face's
    rope_parameters compute them (modeling_rope_utils): one set, or for longrope two (short,
    long). local: the sliding_attention layers' (local_rope_theta, no scaling)."""
    R = cfg.rotary_dims
    theta = cfg.local_rope_theta if local and cfg.local_rope_theta is not None else cfg.rope_theta
    inv = theta ** (-torch.arange(0, R, 2, dtype=torch.float64) / R)
    if local or cfg.rope_scaling is None:
        return [(inv, 1.0)]
    rs: dict = cfg.rope_scaling
    kind = rs["rope_type"]
    if kind == "default":
        return [(inv, 1.0)]
    if kind == "linear":
        return [(inv / rs["factor"], 1.0)]
    if kind == "llama3":  # wavelengths past the original context slowed by factor, smoothly
        factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / low, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old / high) & (wavelen <= old / low)
        return [(torch.where(medium, smoothed, scaled), 1.0)]
    if kind == "yarn":
        return [_yarn(cfg, inv, rs)]
    # longrope: each frequency divided by its short or long factor; cos/sin scaled
    old = rs["original_max_position_embeddings"]
    factor = rs.get("factor") or cfg.max_len / old
    scale = rs.get("attention_factor")
    if scale is None:
        scale = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(old))
    short, long = (
        torch.tensor(rs[k], dtype=torch.float64) for k in ("short_factor", "long_factor")
    )
    return [(inv / short, scale), (inv / long, scale)]


def _yarn(cfg: ModelConfig, inv: torch.Tensor, rs: dict) -> tuple[torch.Tensor, float]:
    """YaRN (Peng et al., 2023): low frequencies interpolated by factor, high ones kept, a linear
    ramp between; cos/sin scaled by the attention factor (0.1 ln(factor) + 1 by default)."""
    R, base = cfg.rotary_dims, cfg.rope_theta
    factor, old = rs["factor"], rs["original_max_position_embeddings"]

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    scale = rs.get("attention_factor")
    if scale is None:
        m, m_all = rs.get("mscale"), rs.get("mscale_all_dim")
        scale = mscale(factor, m) / mscale(factor, m_all) if m and m_all else mscale(factor)
    fast, slow = rs.get("beta_fast") or 32, rs.get("beta_slow") or 1

    def dim_of(rotations: float) -> float:
        return (R * math.log(old / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = dim_of(fast), dim_of(slow)
    if rs.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, R - 1)
    high = high + 0.001 if low == high else high
    ramp = ((torch.arange(R // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    extrapolate = 1 - ramp
    return inv / factor * (1 - extrapolate) + inv * extrapolate, float(scale)


class Rotary(nn.Module):
    """Rotary position embedding (Su et al., 2021), 'rotate half' layout, on the first
    rotary_dims dims of each head of q and k (all of them but for partial rotary).

    The cos/sin tables hold one row per position, times the scaling's cos/sin factor; longrope
    has two sets stacked (short, then long at rows max_len ...): a call whose positions reach
    past original_max_position_embeddings reads the long set, as transformers does."""

    cos: torch.Tensor  # buffers, (sets x max_len, rotary_dims / 2)
    sin: torch.Tensor

    def __init__(self, cfg: ModelConfig, local: bool = False):
        super().__init__()
        self.max_len, self.dims = cfg.max_len, cfg.rotary_dims
        rs = {} if local or cfg.rope_scaling is None else cfg.rope_scaling
        long = rs.get("rope_type") == "longrope"
        self.switch: int | None = rs["original_max_position_embeddings"] if long else None
        positions = torch.arange(cfg.max_len, dtype=torch.float64)[:, None]
        cos, sin = [], []
        for inv, scale in rope_frequencies(cfg, local):
            angles = positions * inv  # (L, R/2)
            cos.append(angles.cos() * scale)
            sin.append(angles.sin() * scale)
        self.register_buffer("cos", torch.cat(cos).float(), persistent=False)
        self.register_buffer("sin", torch.cat(sin).float(), persistent=False)

    def rows(self, positions: torch.Tensor) -> torch.Tensor:
        """The table rows of these positions: the long set's when the call reaches past the
        original context (longrope), else the positions themselves."""
        if self.switch is not None and int(positions.max()) + 1 > self.switch:
            return positions + self.max_len
        return positions

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        # x (B, H, T, D), positions (B, T)
        rows = self.rows(positions)
        cos = F.embedding(rows, self.cos)[:, None]  # (B, 1, T, R/2)
        sin = F.embedding(rows, self.sin)[:, None]
        turn, keep = x[..., : self.dims], x[..., self.dims :]
        x1, x2 = turn.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin, keep), dim=-1)


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:  # (B, T, C) -> (B, H, T, D)
    B, T, C = x.shape
    return x.view(B, T, n_heads, C // n_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:  # (B, H, T, D) -> (B, T, C)
    B, H, T, D = x.shape
    return x.transpose(1, 2).reshape(B, T, H * D)


def make_norm(cfg: ModelConfig, width: int | None = None) -> nn.Module:
    """LayerNorm, or RMSNorm (x / rms(x) * weight: no mean, no bias) when norm_type='rmsnorm',
    over d_model (or `width`: a head's, for qk_norm)."""
    width = cfg.d_model if width is None else width
    if cfg.norm_type == "rmsnorm":
        return nn.RMSNorm(width, eps=cfg.layer_norm_eps)
    return nn.LayerNorm(width, eps=cfg.layer_norm_eps)


# SelfAttention's mask for a whole sequence without padding or past: the causal mask, computed
# by torch's is_causal path (6 % faster a training step than the same mask as a tensor)
CAUSAL = "causal"


def attend(
    q: torch.Tensor,  # (B, H, T, D)
    k: torch.Tensor,  # (B, H, S, D)
    v: torch.Tensor,
    mask: torch.Tensor | None | str,  # (B, 1, T, S) bool, None, or CAUSAL
    dropout: float,
    scale: float | None,  # None: 1/sqrt(D)
    softcap: float | None,  # logits -> softcap * tanh(logits / softcap) before the softmax
    bias: torch.Tensor | None = None,  # (1 or B, H, T, S) added to the logits (T5's positions)
) -> torch.Tensor:
    """Scaled dot-product attention, torch's fused kernel unless the logits are capped."""
    if bias is not None:  # the bias as a float mask, -inf where the bool mask forbids
        if isinstance(mask, str):
            mask = causal_square(q.shape[-2], q.device)
        if mask is not None:
            bias = bias.masked_fill(~mask, float("-inf"))
        mask = bias
    if softcap is None:
        causal = isinstance(mask, str)  # CAUSAL: torch's causal kernel, no mask tensor
        m = None if isinstance(mask, str) else mask
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=m, dropout_p=dropout, is_causal=causal, scale=scale
        )
    s = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    s = softcap * torch.tanh(s / softcap)
    if isinstance(mask, str):
        mask = causal_square(s.shape[-1], s.device)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return F.dropout(s.softmax(-1), dropout, training=dropout > 0) @ v


def causal_square(t: int, device=None) -> torch.Tensor:
    """(1, 1, T, T) bool: query i sees keys 0 .. i."""
    return torch.ones(t, t, dtype=torch.bool, device=device).tril()[None, None]


class SelfAttention(nn.Module):
    """Multi-head (or grouped-query) self-attention with a KV cache: returns the output and the
    full (k, v), which hold the G key/value heads. Heads are head_dim wide (H x D may differ
    from d_model); qk_norm normalizes each head's query and key before rotary."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads, self.n_kv_heads = cfg.n_heads, cfg.kv_heads
        self.dropout = cfg.attention_p
        self.scale, self.softcap = cfg.attention_scale, cfg.attn_softcap
        q_dim, kv_dim = cfg.n_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
        self.split = (q_dim, kv_dim, kv_dim)
        self.qkv = nn.Linear(cfg.d_model, sum(self.split), bias=cfg.attention_bias)  # q, k, v
        self.out = nn.Linear(q_dim, cfg.d_model, bias=cfg.bias)
        self.q_norm = make_norm(cfg, cfg.head_dim) if cfg.qk_norm else None
        self.k_norm = make_norm(cfg, cfg.head_dim) if cfg.qk_norm else None

    def forward(
        self,
        x: torch.Tensor,  # (B, T, C)
        mask: torch.Tensor | None | str,  # (B, 1, T, S) bool, or CAUSAL (T = S, no padding)
        positions: torch.Tensor,  # (B, T) absolute positions of the new tokens
        rotary: Rotary | None = None,
        past: KV | None = None,  # (B, G, S - T, D) each
        bias: torch.Tensor | None = None,  # (1 or B, H, T, S): relative positions (T5)
    ) -> tuple[torch.Tensor, KV]:
        q, k, v = self.qkv(x).split(self.split, dim=-1)
        q = split_heads(q, self.n_heads)  # (B, H, T, D)
        k, v = split_heads(k, self.n_kv_heads), split_heads(v, self.n_kv_heads)  # (B, G, T, D)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if rotary is not None:
            q, k = rotary(q, positions), rotary(k, positions)
        if past is not None:
            k, v = torch.cat((past[0], k), dim=2), torch.cat((past[1], v), dim=2)
        group = self.n_heads // self.n_kv_heads  # query heads per key/value head
        kh, vh = (k, v) if group == 1 else (t.repeat_interleave(group, dim=1) for t in (k, v))
        p = self.dropout if self.training else 0.0
        y = attend(q, kh, vh, mask, p, self.scale, self.softcap, bias)
        return self.out(merge_heads(y)), (k, v)


class CrossAttention(nn.Module):
    """Multi-head attention from the decoder to the encoder output; K/V are projected once."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.dropout = cfg.attention_p
        self.scale = cfg.attention_scale
        inner = cfg.n_heads * cfg.head_dim
        self.q = nn.Linear(cfg.d_model, inner, bias=cfg.attention_bias)
        self.kv = nn.Linear(cfg.d_model, 2 * inner, bias=cfg.attention_bias)  # fused k, v
        self.out = nn.Linear(inner, cfg.d_model, bias=cfg.bias)

    def project_kv(self, memory: torch.Tensor) -> KV:  # (B, S, C) -> (B, H, S, D) x 2
        k, v = self.kv(memory).chunk(2, dim=-1)
        return split_heads(k, self.n_heads), split_heads(v, self.n_heads)

    def forward(self, x: torch.Tensor, kv: KV, mask: torch.Tensor | None) -> torch.Tensor:
        q = split_heads(self.q(x), self.n_heads)
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(
            q, kv[0], kv[1], attn_mask=mask, dropout_p=p, scale=self.scale
        )
        return self.out(merge_heads(y))


ACTIVATION_MODULES: dict[str, Callable[[], nn.Module]] = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
    "swiglu": nn.SiLU,  # applied to the gate
    "silu": nn.SiLU,  # x * sigmoid(x), ungated (Marian's "swish")
    "geglu": lambda: nn.GELU(approximate="tanh"),  # applied to the gate (Gemma, T5 v1.1)
}


class FeedForward(nn.Module):
    """Position-wise FFN: Linear -> ReLU/GELU/SiLU -> dropout -> Linear; gated (Shazeer, 2020)
    with activation 'swiglu' (Llama: down(silu(gate(x)) * up(x))) or 'geglu' (Gemma: gelu_tanh
    on the gate)."""

    def __init__(self, cfg: ModelConfig, width: int):
        super().__init__()
        self.up = nn.Linear(cfg.d_model, width, bias=cfg.bias)
        self.gate = nn.Linear(cfg.d_model, width, bias=cfg.bias) if cfg.gated else None
        self.act = ACTIVATION_MODULES[cfg.activation]()
        self.drop = nn.Dropout(cfg.activation_p)
        self.down = nn.Linear(width, cfg.d_model, bias=cfg.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, C) -> (B, T, C)
        if self.gate is not None:
            return self.down(self.drop(self.act(self.gate(x)) * self.up(x)))
        return self.down(self.drop(self.act(self.up(x))))


class Residual(nn.Module):
    """x + dropout(sublayer(x)) with the norm (LayerNorm or RMSNorm) before (pre-LN) or after
    (post-LN, the paper); sandwich_norm adds a norm on the sublayer's output (Gemma 2, 3)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.pre = cfg.norm == "pre"
        self.norm = make_norm(cfg)
        self.post = make_norm(cfg) if cfg.sandwich_norm else None
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, sublayer) -> tuple[torch.Tensor, object]:
        """sublayer(h) returns (y, extra); returns (new x, extra)."""
        y, extra = sublayer(self.norm(x) if self.pre else x)
        if self.post is not None:
            y = self.post(y)
        x = x + self.drop(y)
        return (x if self.pre else self.norm(x)), extra


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn, self.ffn = SelfAttention(cfg), FeedForward(cfg, cfg.d_ff)
        self.res_attn, self.res_ffn = Residual(cfg), Residual(cfg)

    def forward(self, x, mask, positions, rotary=None, bias=None) -> torch.Tensor:
        x, _ = self.res_attn(x, lambda h: self.attn(h, mask, positions, rotary, None, bias))
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
        bias: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, KV]:
        x, present = self.res_attn(x, lambda h: self.attn(h, mask, positions, rotary, past, bias))
        cross, res_cross = self.cross, self.res_cross
        if cross is not None and res_cross is not None:
            x, _ = res_cross(x, lambda h: (cross(h, cross_kv, cross_mask), None))
        x, _ = self.res_ffn(x, lambda h: (self.ffn(h), None))
        return x, present
