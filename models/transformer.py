"""The two model families: EncoderDecoder (translation) and DecoderOnly (language model).

Incremental decoding is explicit. A decoder call takes the new token(s) and a cache (a list of
(k, v) per layer, each (B, G, past, D), G the key/value heads) and returns logits and the updated
cache; the encoder-decoder also takes the cross-attention (k, v) per layer, projected once from
the encoder output by `cross_kv`. The ONNX graphs (edgeformer.export) mirror exactly these calls.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from ..core.config import FULL, SLIDING, ModelConfig
from .layers import (
    CAUSAL,
    KV,
    AbsolutePositions,
    DecoderLayer,
    EncoderLayer,
    RelativeBias,
    Rotary,
    TokenEmbedding,
    make_norm,
)


def causal_mask(t: int, s: int, device=None) -> torch.Tensor:
    """(1, 1, T, S) bool: query i (at absolute position S - T + i) sees keys 0 .. S - T + i."""
    q = torch.arange(t, device=device)[:, None] + (s - t)
    k = torch.arange(s, device=device)[None, :]
    return (k <= q)[None, None]


def key_padding_mask(mask: torch.Tensor, t: int) -> torch.Tensor:
    """(B, S) 1/0 or bool, True = real token -> (B, 1, T, S) bool.

    Expanded over the T queries rather than broadcast: onnxruntime's fused Attention (1.31, CPU)
    rejects a (B, 1, 1, S) mask when T > 1, although the ONNX spec allows it.
    """
    B, S = mask.shape
    return mask.bool()[:, None, None, :].expand(B, 1, t, S)


def windowed(mask: torch.Tensor | None | str, t: int, s: int, window: int, device=None):
    """A causal mask (B or 1, 1, T, S) (None: one token, CAUSAL: T = S without padding) cut to
    a sliding window: query i, at cache position S - T + i, sees keys after S - T + i - window
    (itself and the window - 1 before it, as transformers' sliding_window_overlay)."""
    q = torch.arange(t, device=device)[:, None] + (s - t)
    k = torch.arange(s, device=device)[None, :]
    near = (k > q - window)[None, None]
    if mask is None:
        return near
    if isinstance(mask, str):
        return causal_mask(t, s, device) & near
    return mask & near


def _check_length(cfg: ModelConfig, length: int, what: str) -> None:
    if torch.compiler.is_compiling():  # shapes are symbolic during ONNX export
        return
    if length > cfg.max_len:
        raise ValueError(f"{what} length {length} exceeds the model's max_len {cfg.max_len}")


class _Base(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = TokenEmbedding(cfg)
        absolute = cfg.positional in ("sinusoidal", "learned")
        self.pos = AbsolutePositions(cfg) if absolute else None
        self.rotary = Rotary(cfg) if cfg.positional == "rotary" else None
        # the sliding_attention layers' own rotary base (Gemma 3)
        local = cfg.positional == "rotary" and cfg.local_rope_theta is not None
        self.local_rotary = Rotary(cfg, local=True) if local else None
        self.drop = nn.Dropout(cfg.dropout)
        if not cfg.tie_embeddings:
            self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.logits_bias:  # added to every logit vector (Marian's final_logits_bias)
            self.logits_bias = nn.Parameter(torch.zeros(cfg.vocab_size))

    def _init_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def embed_tokens(
        self, ids: torch.Tensor, positions: torch.Tensor, norm: nn.Module | None = None,
        pos: nn.Module | None = None, embed: nn.Module | None = None,
    ) -> torch.Tensor:  # fmt: skip
        """Token vectors (+ positions), then the stack's embedding norm (BART) where it has one;
        `pos`: the encoder's own position table (BART) instead of the shared one; `embed`: the
        encoder's own token table (a separate source vocabulary) instead of the shared one."""
        x = (self.embed if embed is None else embed)(ids)
        pos = self.pos if pos is None else pos
        if pos is not None:
            x = x + pos(positions)
        if norm is not None:
            x = norm(x)
        return self.drop(x)

    def logits(self, h: torch.Tensor) -> torch.Tensor:  # (B, T, C) -> (B, T, V)
        if self.cfg.head_scale is not None:  # T5's tied head: d_model^-0.5
            h = h * self.cfg.head_scale
        logits = h @ self.embed.weight.t() if self.cfg.tie_embeddings else self.lm_head(h)
        if self.cfg.logits_bias:
            logits = logits + self.logits_bias
        cap = self.cfg.logit_softcap
        return logits if cap is None else cap * torch.tanh(logits / cap)

    def layer_rotary(self, i: int) -> Rotary | None:
        """Decoder layer i's rotary: the local one in a sliding_attention layer that has one."""
        if self.local_rotary is not None and self.cfg.layer_type(i) == SLIDING:
            return self.local_rotary
        return self.rotary

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


class EncoderDecoder(_Base):
    """Encoder-decoder Transformer ("Attention Is All You Need"); one shared vocabulary, or
    the encoder's own (src_vocab_size: `src_embed`; the head stays the target's, tied to
    `embed`, the decoder's table); absolute positions (BART: a table per stack), or T5's
    relative bias per stack."""

    def __init__(self, cfg: ModelConfig):
        if cfg.family != "encoder-decoder":
            raise ValueError(f"EncoderDecoder needs family='encoder-decoder', got {cfg.family!r}")
        super().__init__(cfg)
        own = cfg.src_vocab_size is not None
        self.src_embed = TokenEmbedding(cfg, cfg.src_vocab_size) if own else None
        self.src_pos = AbsolutePositions(cfg) if cfg.separate_positions else None
        self.enc_emb_norm = make_norm(cfg) if cfg.embedding_norm else None
        self.dec_emb_norm = make_norm(cfg) if cfg.embedding_norm else None
        relative = cfg.positional == "relative"
        self.enc_bias = RelativeBias(cfg, bidirectional=True) if relative else None
        self.dec_bias = RelativeBias(cfg, bidirectional=False) if relative else None
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_encoder_layers))
        self.decoder = nn.ModuleList(
            DecoderLayer(cfg, cross=True) for _ in range(cfg.n_decoder_layers)
        )
        pre = cfg.norm == "pre"
        self.enc_norm = make_norm(cfg) if pre else nn.Identity()
        self.dec_norm = make_norm(cfg) if pre else nn.Identity()
        self._init_weights()

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """src (B, S) ids, src_mask (B, S) 1 = real token -> memory (B, S, C)."""
        _check_length(self.cfg, src.shape[1], "source")
        S = src.shape[1]
        positions = torch.arange(S, device=src.device).expand_as(src)
        x = self.embed_tokens(src, positions, self.enc_emb_norm, self.src_pos, self.src_embed)
        mask = key_padding_mask(src_mask, S)
        bias = None if self.enc_bias is None else self.enc_bias(positions[0], S)
        for layer in self.encoder:
            x = layer(x, mask, positions, self.rotary, bias)
        return self.enc_norm(x)

    def cross_kv(self, memory: torch.Tensor) -> list[KV]:
        """The encoder output projected to each decoder layer's cross-attention (k, v)."""
        kv = []
        for layer in self.decoder:
            assert isinstance(layer, DecoderLayer) and layer.cross is not None
            kv.append(layer.cross.project_kv(memory))
        return kv

    def decode(
        self,
        tgt: torch.Tensor,  # (B, T) new target ids
        cross_kv: list[KV],
        src_mask: torch.Tensor,  # (B, S)
        cache: list[KV] | None = None,  # self-attention (k, v) per layer, (B, G, past, D)
    ) -> tuple[torch.Tensor, list[KV]]:
        """Logits (B, T, V) for the new tokens and the updated self-attention cache."""
        past = 0 if cache is None else cache[0][0].shape[2]
        T = tgt.shape[1]
        _check_length(self.cfg, past + T, "target")
        positions = (torch.arange(T, device=tgt.device) + past).expand_as(tgt)
        x = self.embed_tokens(tgt, positions, self.dec_emb_norm)
        mask = causal_mask(T, past + T, tgt.device) if T > 1 else None
        cross_mask = key_padding_mask(src_mask, T)
        bias = None if self.dec_bias is None else self.dec_bias(positions[0], past + T)
        present = []
        for i, layer in enumerate(self.decoder):
            layer_past = None if cache is None else cache[i]
            x, kv = layer(
                x, mask, positions, self.rotary, layer_past, cross_kv[i], cross_mask, bias
            )
            present.append(kv)
        return self.logits(self.dec_norm(x)), present

    def forward(
        self, src: torch.Tensor, tgt_in: torch.Tensor, src_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Teacher forcing: src (B, S), tgt_in (B, T) = [BOS] + target -> logits (B, T, V)."""
        if src_mask is None:
            src_mask = src != self.cfg.source_pad_id
        memory = self.encode(src, src_mask)
        logits, _ = self.decode(tgt_in, self.cross_kv(memory), src_mask)
        return logits


class DecoderOnly(_Base):
    """Decoder-only (GPT-style) language model."""

    def __init__(self, cfg: ModelConfig):
        if cfg.family != "decoder-only":
            raise ValueError(f"DecoderOnly needs family='decoder-only', got {cfg.family!r}")
        super().__init__(cfg)
        self.layers = nn.ModuleList(
            DecoderLayer(cfg, cross=False) for _ in range(cfg.n_decoder_layers)
        )
        pre = cfg.norm == "pre"
        self.norm = make_norm(cfg) if pre else nn.Identity()
        self._init_weights()

    def forward(
        self,
        ids: torch.Tensor,  # (B, T) new token ids
        attention_mask: torch.Tensor | None = None,  # (B, past + T), 1 = real token (left padding)
        cache: list[KV] | None = None,
    ) -> tuple[torch.Tensor, list[KV]]:
        """Logits (B, T, V) for the new tokens and the updated cache.

        With left-padded prompts, positions count real tokens only, and each query also sees
        itself so that a padded row is never fully masked (its output is ignored anyway).
        """
        past = 0 if cache is None else cache[0][0].shape[2]
        B, T = ids.shape
        S = past + T
        _check_length(self.cfg, S, "sequence")
        if attention_mask is None:
            positions = (torch.arange(T, device=ids.device) + past).expand(B, T)
            mask: torch.Tensor | str | None = None  # one token sees everything before it
            if T > 1:  # is_causal aligns top-left: right only without a past (T = S)
                mask = CAUSAL if past == 0 else causal_mask(T, S, ids.device)
        else:
            am = attention_mask.long()
            positions = (am.cumsum(-1) - 1).clamp(min=0)[:, past:]
            mask = causal_mask(T, S, ids.device) & key_padding_mask(am, T)
            diag = torch.arange(S, device=ids.device)[None, :] == (
                torch.arange(T, device=ids.device)[:, None] + past
            )
            mask = mask | diag[None, None]
        masks = {FULL: mask}
        if self.cfg.attention_window is not None:
            masks[SLIDING] = windowed(mask, T, S, self.cfg.attention_window, ids.device)
        x = self.embed_tokens(ids, positions)
        present = []
        for i, layer in enumerate(self.layers):
            past_i = None if cache is None else cache[i]
            layer_mask = masks[self.cfg.layer_type(i)]
            x, kv = layer(x, layer_mask, positions, self.layer_rotary(i), past_i)
            present.append(kv)
        return self.logits(self.norm(x)), present


def build_model(cfg: ModelConfig) -> EncoderDecoder | DecoderOnly:
    return EncoderDecoder(cfg) if cfg.family == "encoder-decoder" else DecoderOnly(cfg)
