"""Thin wrappers that turn the model's incremental interface into flat-tensor ONNX graphs.

One wrapper per graph of the package contract (edgeformer.runtime.package): inputs and outputs
are flat tensors in the contract's order, so that torch.onnx.export can name them directly.
Shapes: B batch, S source, T new tokens, P past, C d_model, H heads, D head dim, V vocab.
"""

from __future__ import annotations

import re

import torch
import torch.nn as nn
from torch.export import Dim

from ..models import DecoderOnly, EncoderDecoder
from ..models.layers import KV


def _pairs(flat: tuple[torch.Tensor, ...], step: int = 2) -> list[tuple[torch.Tensor, ...]]:
    return [tuple(flat[i : i + step]) for i in range(0, len(flat), step)]


class Encoder(nn.Module):
    def __init__(self, model: EncoderDecoder):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model.encode(input_ids, attention_mask)  # (B, S, C)


class EDDecoder(nn.Module):
    """First decoder pass: logits, self K/V and the cross K/V of every layer (computed once)."""

    def __init__(self, model: EncoderDecoder):
        super().__init__()
        self.model = model

    def forward(
        self,
        input_ids: torch.Tensor,  # (B, T)
        encoder_hidden_states: torch.Tensor,  # (B, S, C)
        encoder_attention_mask: torch.Tensor,  # (B, S)
    ) -> tuple[torch.Tensor, ...]:
        cross = self.model.cross_kv(encoder_hidden_states)
        logits, present = self.model.decode(input_ids, cross, encoder_attention_mask)
        out = [logits]
        for (k, v), (ck, cv) in zip(present, cross):
            out += [k, v, ck, cv]
        return tuple(out)


class EDDecoderWithPast(nn.Module):
    """One decoder step: past self K/V + cached cross K/V in, logits + new self K/V out."""

    def __init__(self, model: EncoderDecoder):
        super().__init__()
        self.model = model

    def forward(
        self,
        input_ids: torch.Tensor,  # (B, T)
        encoder_attention_mask: torch.Tensor,  # (B, S)
        *past: torch.Tensor,  # per layer: self k, v (B, H, P, D), cross k, v (B, H, S, D)
    ) -> tuple[torch.Tensor, ...]:
        layers = _pairs(past, 4)
        cache: list[KV] = [(k, v) for k, v, _, _ in layers]
        cross: list[KV] = [(ck, cv) for _, _, ck, cv in layers]
        logits, present = self.model.decode(input_ids, cross, encoder_attention_mask, cache)
        return (logits, *[t for kv in present for t in kv])


class LMDecoder(nn.Module):
    """Prompt prefill (left-padded prompts): logits and K/V of every layer."""

    def __init__(self, model: DecoderOnly):
        super().__init__()
        self.model = model

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        logits, present = self.model(input_ids, attention_mask)
        return (logits, *[t for kv in present for t in kv])


class LMDecoderWithPast(nn.Module):
    def __init__(self, model: DecoderOnly):
        super().__init__()
        self.model = model

    def forward(
        self,
        input_ids: torch.Tensor,  # (B, T)
        attention_mask: torch.Tensor,  # (B, P + T)
        *past: torch.Tensor,  # per layer: k, v (B, H, P, D)
    ) -> tuple[torch.Tensor, ...]:
        logits, present = self.model(input_ids, attention_mask, _pairs(past))
        return (logits, *[t for kv in present for t in kv])


def graph_specs(model: EncoderDecoder | DecoderOnly) -> dict[str, tuple]:
    """{graph: (wrapper, example args, dynamic shapes)} for every graph of the model's package.

    Example sizes avoid 0 and 1 (which torch.export specialises) and T > 1 keeps the causal-mask
    branch in the graph, so one graph serves any T. One Dim is shared by all past tensors.
    """
    cfg = model.cfg
    L, H, D, C = cfg.n_decoder_layers, cfg.n_heads, cfg.head_dim, cfg.d_model
    big = max(cfg.max_len, 2)
    B = Dim("batch", min=1, max=4096)
    S = Dim("src_len", min=1, max=big)
    T = Dim("tgt_len", min=1, max=big)
    P = Dim("past_len", min=1, max=big)
    b, s, t, p = 2, 5, 3, 4
    ids = torch.full((b, t), 4, dtype=torch.long)
    if isinstance(model, EncoderDecoder):
        src = torch.full((b, s), 4, dtype=torch.long)
        smask = torch.ones(b, s, dtype=torch.long)
        # distinct tensors: torch.export would merge repeated example inputs into one input
        past = [torch.randn(b, H, n, D) for _ in range(L) for n in (p, p, s, s)]
        past_dims = [{0: B, 2: P}, {0: B, 2: P}, {0: B, 2: S}, {0: B, 2: S}] * L
        return {
            "encoder": (Encoder(model), (src, smask), ({0: B, 1: S}, {0: B, 1: S})),
            "decoder": (
                EDDecoder(model),
                (ids, torch.randn(b, s, C), smask),
                ({0: B, 1: T}, {0: B, 1: S}, {0: B, 1: S}),
            ),
            "decoder_with_past": (
                EDDecoderWithPast(model),
                (ids, smask, *past),
                ({0: B, 1: T}, {0: B, 1: S}, tuple(past_dims)),
            ),
        }
    past = [torch.randn(b, H, p, D) for _ in range(2 * L)]
    return {
        "decoder": (
            LMDecoder(model),
            (ids, torch.ones(b, t, dtype=torch.long)),
            ({0: B, 1: T}, {0: B, 1: T}),
        ),
        "decoder_with_past": (
            LMDecoderWithPast(model),
            (ids, torch.ones(b, p + t, dtype=torch.long), *past),
            ({0: B, 1: T}, {0: B, 1: Dim.AUTO}, tuple([{0: B, 2: P}] * (2 * L))),
        ),
    }


IR_VERSION = 11  # the IR of onnx 1.18 (opset 23); onnx 1.23 writes 14, onnxruntime 1.31 reads <= 13


def rename_dim(proto, old: str, new: str) -> None:
    """Rename a symbolic dimension everywhere (e.g. the exporter's 's53' for a Dim.AUTO axis)."""
    g = proto.graph
    for vi in [*g.input, *g.output, *g.value_info]:
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param == old:
                d.dim_param = new


def fold_weight_transposes(proto) -> None:
    """Replace Transpose(initializer) by the transposed initializer.

    The exporter's optimizer folds small constants only: the tied output projection
    h @ E^T would transpose the whole (V, C) embedding at every call, and MatMulNBits needs E^T
    as a plain initializer. The embedding is then stored twice (E for the Gather, E^T here).
    """
    from onnx import numpy_helper

    g = proto.graph
    inits = {t.name: t for t in g.initializer}
    for node in list(g.node):
        if node.op_type == "Transpose" and node.input[0] in inits:
            perm = [a.ints for a in node.attribute if a.name == "perm"]
            w = numpy_helper.to_array(inits[node.input[0]])
            w = w.transpose(*perm[0]) if perm else w.T
            g.initializer.append(numpy_helper.from_array(w.copy(), node.output[0]))
            g.node.remove(node)


def to_onnx(
    wrapper: nn.Module,
    args: tuple,
    dynamic_shapes: tuple,
    input_names: list[str],
    output_names: list[str],
    opset: int = 23,
):
    """Export with the dynamo exporter -> onnx.ModelProto (optimized, IR_VERSION, checked)."""
    import onnx

    program = torch.onnx.export(
        wrapper.eval(),
        args,
        dynamo=True,
        opset_version=opset,
        dynamic_shapes=dynamic_shapes,
        input_names=input_names,
        output_names=output_names,
        verbose=False,
    )
    proto = program.model_proto
    fold_weight_transposes(proto)
    for vi in proto.graph.input:  # the LM step's attention_mask (B, P + T): a Dim.AUTO axis
        for d in vi.type.tensor_type.shape.dim:
            if re.fullmatch(r"s\d+", d.dim_param):
                rename_dim(proto, d.dim_param, "past_len + tgt_len")
    proto.ir_version = IR_VERSION
    proto.producer_name = "edgeformer"
    onnx.checker.check_model(proto, full_check=True)
    return proto
