"""Build a package's ONNX graphs from a model's weights, as onnxruntime-genai's builder does.

The graphs are written for decoding on onnxruntime, not traced from PyTorch:

- self-attention is one com.microsoft `GroupQueryAttention` over a packed QKV projection, reading
  and writing a preallocated (B, H, M, D) cache buffer in place (`past_key_values.*` and
  `present.*` are the same buffer when the runtime binds them so);
- cross-attention is one `GroupQueryAttention` step over cross K/V that the encoder graph
  computes once, in (B, H, S, D) layout, with each row's last source token's K/V as the step's
  "new" K/V (the decoder takes one token per call; Builder.cross_attention);
- every residual + LayerNorm is Add + `LayerNormalization` (RMSNorm: `SimplifiedLayer-
  Normalization`), not the fused `SkipLayerNormalization` (slower on CPU: Builder.skip_norm);
  the sublayer's output bias is an Add after the residual one; GELU with its bias is one
  `BiasGelu` (tanh approximation: `FastGelu`); SwiGLU is one packed gate/up projection, Split,
  and silu(gate) * up; an ungated SiLU (Marian's swish) is `QuickGelu` with alpha 1;
- grouped-query attention: the cache buffers hold the G key/value heads (kv_num_heads);
- a head dim that GroupQueryAttention cannot run (not a multiple of 8: core.format.
  attention_head_size) is zero-padded to the next one: each head's rows of the Q/K/V
  projections get zero rows (zero bias), so the padded dims of Q, K and V are 0, which adds
  nothing to Q.K and gives 0 in the padded output dims; the fused op takes the padded size and
  `scale` 1/sqrt(true head dim); the output projection gets zero input columns there; rotary
  turns the true dims only (`rotary_embedding_dim`). The same numbers as unpadded, exactly;
  the caches and cross K/V hold the padded heads (their last dims 0);
- the decoder returns logits for the last position of each row, (B, V), plus the logits
  bias when the model has one (the head's Gemm / MatMulNBits bias); an LM's also returns those
  after the new tokens `logits_index` names (format 6, `indexed_logits` (B K, V): speculative
  decoding verifies K drafted tokens in one call), an overridable initializer whose default is
  empty, so a plain step runs the head on no extra row;
- linear layers are MatMul (float), `MatMulNBits` (4/8-bit weights, bias fused) or
  `DynamicQuantizeMatMul` (int8, bias fused); the embedding is a Gather or a
  `GatherBlockQuantized` that shares its table with a tied output projection (int8-dynamic:
  rows of the transposed head table, which onnxruntime folds into a constant at load); an
  encoder with its own vocabulary (src_vocab_size) gathers from its own table (`src_embed.*`).

Shapes: B batch, T new tokens, S source, M cache capacity, C d_model, H heads, G key/value heads,
D head dim (padded: Dp), V vocab.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from ..core.config import FULL, SLIDING
from ..core.format import (
    ED_LENGTHS,
    INDEXED_LOGITS,
    LOGITS_3D,
    LOGITS_INDEX,
    attention_head_size,
    io_names,
)  # fmt: skip
from . import gguf_blocks, quantize
from .gptq import Hessians, gptq_int4
from .recipes import VariantSpec, more_bits_layer

OPSET = 21
MS = "com.microsoft"
IR_VERSION = 10  # onnxruntime 1.20+ reads it


def _f32(t) -> np.ndarray:
    if isinstance(t, np.ndarray):
        return t.astype(np.float32)
    return t.detach().float().cpu().numpy().astype(np.float32)


def _packed(*linears) -> SimpleNamespace:
    """Linear layers over the same input as one (weight, bias): one MatMul, then a Split."""
    import torch

    biases = [m.bias for m in linears]
    bias = None if biases[0] is None else torch.cat(biases)
    # source: the layer whose inputs they share (GPTQ's Hessian is keyed by it)
    weight = torch.cat([m.weight for m in linears])
    return SimpleNamespace(weight=weight, bias=bias, source=linears[0])


@dataclass(frozen=True)
class NBits:
    """A weight in MatMulNBits' layout: its initializers' names (zero_points "": implied) and
    the node attributes it needs."""

    packed: str
    scales: str
    zero_points: str
    bits: int
    block: int


@dataclass
class Graph:
    """A graph under construction; initializers are named arrays shared by every graph."""

    name: str
    inits: dict[str, np.ndarray]  # shared across the variant's graphs (one weights file)
    nodes: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    consts: list = field(default_factory=list)  # small inline constants
    n: int = 0

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, domain: str = "", **attrs):
        from onnx import helper

        self.n += 1
        outs = [f"{op_type.lower()}_{self.n}_{i}" for i in range(n_out)]
        self.nodes.append(
            helper.make_node(op_type, inputs, outs, f"{op_type}_{self.n}", domain=domain, **attrs)
        )
        return outs[0] if n_out == 1 else outs

    def weight(self, name: str, value: np.ndarray) -> str:
        if name not in self.inits:
            self.inits[name] = np.ascontiguousarray(value)
        return name

    def const(self, value, dtype=np.int64) -> str:
        from onnx import numpy_helper

        name = f"const_{len(self.consts)}"
        self.consts.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def input(self, name: str, elem, shape: list) -> str:
        from onnx import helper

        self.inputs.append(helper.make_tensor_value_info(name, elem, shape))
        return name

    def output(self, value: str, name: str, elem, shape: list) -> None:
        from onnx import helper

        self.op_rename(value, name)
        self.outputs.append(helper.make_tensor_value_info(name, elem, shape))

    def op_rename(self, old: str, new: str) -> None:
        for node in self.nodes:
            for i, o in enumerate(node.output):
                if o == old:
                    node.output[i] = new
            for i, x in enumerate(node.input):
                if x == old:
                    node.input[i] = new

    def proto(self, opset: int = OPSET):
        """ModelProto, initializers inline (package.write_graphs moves the large ones out)."""
        from onnx import helper, numpy_helper

        # the weights its nodes read, nothing else: one registered for another form of it (the
        # MHA query bias inside its packed qkv bias, a quantized table read as rows) stays out
        read = dict.fromkeys(x for node in self.nodes for x in node.input)
        inits = [numpy_helper.from_array(self.inits[n], n) for n in read if n in self.inits]
        g = helper.make_graph(
            self.nodes, self.name, self.inputs, self.outputs, [*inits, *self.consts]
        )
        model = helper.make_model(
            g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)]
        )
        model.ir_version = IR_VERSION
        model.producer_name = "edgeformer"
        return model


class Builder:
    """Emits one model's graphs for one variant; `linear` and `embedding` follow the variant."""

    def __init__(
        self,
        model,
        spec: VariantSpec,
        inits: dict[str, np.ndarray],
        hessians: Hessians = None,
        native: gguf_blocks.NativeRows | None = None,
    ):
        self.model, self.cfg, self.spec, self.inits = model, model.cfg, spec, inits
        self.hessians = hessians or {}  # GPTQ's, per linear layer (export/gptq.py)
        # the `gguf` variant: the source file's rows, and what was kept of each of its types
        self.native = native
        self.native_report: dict[str, dict] = {}
        self.layouts: dict[str, tuple[int, int]] = {}  # quantized weight -> (bits, block)
        c = self.cfg
        self.H, self.G, self.D, self.C = c.n_heads, c.kv_heads, c.head_dim, c.d_model
        self.Dp = attention_head_size(self.D)  # the fused attention's head size (zero-padded)
        self.R = c.rotary_dims  # the head dims rotary turns
        self._rows: dict[str, str] = {}  # LongRoPE's table rows, per graph
        self.tied = c.tie_embeddings
        self.rms = c.norm_type == "rmsnorm"
        # the embedding scale (sqrt(C), or 1) folded into the table; a tied head divides it out
        self.scale = float(model.embed.scale)
        self.table = _f32(model.embed.weight) * np.float32(self.scale)
        # the encoder's own table (a separate source vocabulary), scaled alike; None: `table`
        own = getattr(model, "src_embed", None)
        self.src_table = None if own is None else _f32(own.weight) * np.float32(self.scale)
        self._bias: dict[str, str] = {}  # relative positions' attention bias, per graph

    # -- padded heads ----------------------------------------------------------------------------
    @property
    def padded(self) -> bool:
        return self.Dp != self.D

    def heads_out(self, mod):
        """A projection whose output rows are whole heads (Q, K, V, packed or not) with each
        head's D rows zero-padded to Dp (its bias too): its padded dims are 0."""
        if not self.padded:
            return mod

        def pad(a: np.ndarray) -> np.ndarray:  # (n D, ...) -> (n Dp, ...), zeros appended
            heads = a.reshape(-1, self.D, *a.shape[1:])
            out = np.zeros((len(heads), self.Dp, *a.shape[1:]), np.float32)
            out[:, : self.D] = heads
            return out.reshape(-1, *a.shape[1:])

        bias = None if mod.bias is None else pad(_f32(mod.bias))
        return SimpleNamespace(
            weight=pad(_f32(mod.weight)), bias=bias, source=getattr(mod, "source", mod)
        )

    def heads_in(self, mod):
        """The output projection over padded heads: zero input columns at each head's padded
        dims (k_index: where its true inputs went, for its GPTQ Hessian)."""
        if not self.padded:
            return mod
        w = _f32(mod.weight)  # (N, n D)
        n = w.shape[1] // self.D
        out = np.zeros((w.shape[0], n, self.Dp), np.float32)
        out[:, :, : self.D] = w.reshape(w.shape[0], n, self.D)
        k_index = (np.arange(n)[:, None] * self.Dp + np.arange(self.D)[None, :]).reshape(-1)
        return SimpleNamespace(
            weight=out.reshape(w.shape[0], -1), bias=mod.bias, source=mod, k_index=k_index
        )

    def attention_attrs(self, layer_type: str = FULL) -> dict:
        """GroupQueryAttention's attributes beyond the head counts: its scale (the model's, or
        1/sqrt(true head dim) when the heads are padded), the logits' soft cap, and a sliding
        layer's window (local_window_size: on onnxruntime 1.32 a query sees that many keys, its
        own included, as transformers' sliding_window; measured, design notes 2026-11-29)."""
        cfg = self.cfg
        attrs: dict = {}
        if cfg.attention_scale is not None:
            attrs["scale"] = float(cfg.attention_scale)
        elif self.padded:
            attrs["scale"] = float(self.D**-0.5)
        if cfg.attn_softcap is not None:
            attrs["softcap"] = float(cfg.attn_softcap)
        if layer_type == SLIDING and cfg.attention_window is not None:
            attrs["local_window_size"] = cfg.attention_window
        return attrs

    # -- weights -------------------------------------------------------------------------------
    def _nbits(
        self,
        g: Graph,
        name: str,
        w_nk: np.ndarray,
        bits: int,
        H: np.ndarray | None = None,
        asymmetric: bool = False,
    ) -> NBits:
        """A (N, K) weight in MatMulNBits' layout (blocks along K): the GGUF file's own blocks
        where the variant keeps them (export/gguf_blocks.py), else quantized here
        (export/quantize.py): GPTQ for 4 bits when the spec has it and H (the layer's input
        Hessian) is known, error-minimising scales (scale_search), with a zero point per block
        when `asymmetric` (4 bits), else onnxruntime's absmax blocks."""
        key = f"{name}.q{bits}"
        if key not in self.layouts:
            found, report = self._native(name, w_nk)
            if found is not None:
                blocks: quantize.Blocks = found
            else:
                blocks = self._quantize(w_nk, bits, H, asymmetric)
                if report is not None:  # the gguf variant re-quantized it: what that cost
                    err = float(np.abs(blocks.values()[:, : w_nk.shape[1]] - w_nk).max())
                    report["max_error"] = max(report["max_error"], err)
            self.layouts[key] = (blocks.bits, blocks.block)
            self.inits[key], self.inits[f"{key}.scales"] = blocks.packed, blocks.scales
            if (zp := blocks.packed_zero_points) is not None:
                self.inits[f"{key}.zero_points"] = zp
        zp_key = f"{key}.zero_points"
        return NBits(
            g.weight(key, self.inits[key]), g.weight(f"{key}.scales", self.inits[f"{key}.scales"]),
            g.weight(zp_key, self.inits[zp_key]) if zp_key in self.inits else "",
            *self.layouts[key],
        )  # fmt: skip

    def _native(
        self, name: str, w_nk: np.ndarray
    ) -> tuple[gguf_blocks.IntBlocks | None, dict | None]:
        """(the weight's blocks as the GGUF file holds them, or None: rows the file does not
        hold in a kept type; its native_report entry) in the `gguf` variant, else (None, None).
        The embedding's rows are the file's unscaled ones, its sqrt(C) (Gemma) folded into the
        scales as into the fp32 table."""
        if self.spec.method != "gguf" or self.native is None:
            return None, None
        scale = 1.0
        if name == "embed" and self.scale != 1.0:
            w_nk, scale = _f32(self.model.embed.weight), self.scale
        found, what = self.native.find(w_nk)
        entry = self.native_report.setdefault(
            what, {"tensors": 0, "max_error": 0.0, "kept": found is not None}
        )
        entry["tensors"] += 1
        if found is not None:
            entry["max_error"] = max(entry["max_error"], found.max_error)
            if scale != 1.0:
                found.scales = found.scales * np.float32(scale)
        return found, entry

    def _quantize(
        self, w_nk: np.ndarray, bits: int, H: np.ndarray | None, asymmetric: bool
    ) -> quantize.Blocks:
        """The weight's blocks quantized here (K zero-padded to whole blocks)."""
        bs = self.spec.block_size
        pad = -w_nk.shape[1] % bs
        w = np.pad(w_nk.astype(np.float32), ((0, 0), (0, pad)))
        if bits == 4 and self.spec.gptq and H is not None:
            return gptq_int4(w, np.pad(H, ((0, pad), (0, pad))), bs, asymmetric)
        if bits == 4 and asymmetric:
            return quantize.asymmetric(w, bs)
        if bits == 4 and self.spec.scale_search:
            return quantize.searched(w, bs)
        return quantize.absmax(w, bits, bs)

    def _matmul_nbits(
        self, g: Graph, x: str, w: NBits, shape: tuple[int, ...], bias: str = ""
    ) -> str:
        """x (.., K) -> (.., N) through MatMulNBits, shape (N, K) (its zero points and bias:
        when given; trailing empty inputs left out)."""
        N, K = shape
        ins = [x, w.packed, w.scales, w.zero_points, "", bias]
        while not ins[-1]:
            ins.pop()
        return g.op(
            "MatMulNBits", ins, domain=MS, K=K, N=N, bits=w.bits, block_size=w.block,
            accuracy_level=self.spec.accuracy_level,
        )  # fmt: skip

    def _int8_columns(self, g: Graph, name: str, w_nk: np.ndarray) -> tuple[str, str, str]:
        """(int8 (K, N) weight, (N,) scales, (N,) zero points) of a (N, K) weight: symmetric,
        one scale per output column (DynamicQuantizeMatMul's B)."""
        key = f"{name}.qcol8"
        if key not in self.inits:
            scales = np.abs(w_nk).max(axis=1) / 127.0
            scales = np.where(scales > 0, scales, 1.0).astype(np.float32)
            q = np.clip(np.rint(w_nk / scales[:, None]), -127, 127).astype(np.int8)
            self.inits[key] = np.ascontiguousarray(q.T)
            self.inits[f"{key}.scales"] = scales
            self.inits[f"{key}.zero"] = np.zeros(len(scales), np.int8)
        names = (key, f"{key}.scales", f"{key}.zero")
        q, scales, zero = (g.weight(k, self.inits[k]) for k in names)
        return q, scales, zero

    def _dynamic(self, g: Graph, x: str, name: str, w_nk: np.ndarray, bias: str | None) -> str:
        q, scales, zero = self._int8_columns(g, name, w_nk)
        ins = [x, q, scales, zero, *([bias] if bias else [])]
        return g.op("DynamicQuantizeMatMul", ins, domain=MS)

    def layer_bits(self, name: str) -> int | None:
        """The variant's bits for the linear layer `name` ("dec.{i}.ffn.down"): 8 where the
        spec keeps more bits (more_bits in llama.cpp's Q4_K_M layers), else the spec's."""
        parts = name.split(".")
        if self.spec.more_bits and parts[0] == "dec" and parts[-1] in self.spec.more_bits:
            if more_bits_layer(int(parts[1]), self.cfg.n_decoder_layers):
                return 8
        return self.spec.bits

    def linear(self, g: Graph, x: str, mod, name: str, add_bias: bool = True, bits=None):
        """y = x W^T (+ b). Returns (y, bias name or None); the bias is left to the consumer
        when add_bias is False (the residual Add, BiasGelu and MultiHeadAttention take one),
        except by DynamicQuantizeMatMul, which always adds it itself."""
        w = _f32(mod.weight)  # (N, K), PyTorch layout
        bias = None if mod.bias is None else g.weight(f"{name}.bias", _f32(mod.bias))
        bits = self.layer_bits(name) if bits is None else bits
        if bits and self.spec.method == "dynamic":  # its bias is free in the GEMM's epilogue
            return self._dynamic(g, x, name, w, bias), None
        if bits:
            H = self.hessians.get(getattr(mod, "source", mod))
            k_index = getattr(mod, "k_index", None)
            if H is not None and k_index is not None:  # zero rows/columns for padded inputs
                padded = np.zeros((w.shape[1], w.shape[1]), H.dtype)
                padded[np.ix_(k_index, k_index)] = H
                H = padded
            nb = self._nbits(g, name, w, bits, H, self.spec.asymmetric and bits == 4)
            y = self._matmul_nbits(g, x, nb, w.shape, bias if (bias and add_bias) else "")
            return (y, None) if add_bias else (y, bias)
        y = g.op("MatMul", [x, g.weight(f"{name}.weight_t", w.T)])
        if bias and add_bias:
            return g.op("Add", [y, bias]), None
        return y, bias

    def embedding(self, g: Graph, ids: str, source: bool = False) -> str:
        """Token vectors (B, T, C), already scaled by sqrt(C); source: the encoder's, from its
        own table where it has one (`src_embed`: never the tied head's int8 rows, which are
        the target table's)."""
        bits = self.spec.embed_bits
        own = source and self.src_table is not None
        name, table = ("src_embed", self.src_table) if own else ("embed", self.table)
        assert table is not None
        if not bits:
            return g.op("Gather", [g.weight(f"{name}.table", table), ids])
        if self.spec.method == "dynamic" and self.tied and not own:  # the head's int8 columns
            return self._int8_rows(g, ids)
        nb = self._nbits(g, name, table, bits)
        data = g.weight(
            f"{name}.q{bits}.rows", self.inits[f"{name}.q{bits}"].reshape(len(table), -1)
        )
        x = g.op(
            "GatherBlockQuantized", [data, ids, nb.scales], domain=MS, gather_axis=0,
            quantize_axis=1, block_size=nb.block, bits=nb.bits,
        )  # fmt: skip
        if self.C % nb.block:  # whole blocks come back: C rounded up; keep C
            x = g.op("Slice", [x, g.const([0]), g.const([self.C]), g.const([-1])])
        return x

    def _int8_rows(self, g: Graph, ids: str) -> str:
        """Embedding rows from the tied head's int8 (C, V) values and per-token scales (one
        table for both): a Gather of whole rows of its transpose, times the row's scale.
        onnxruntime folds the Transpose of the constant table into a row-major copy when it
        loads the graph (constant folding, any optimization level but none: V x C bytes of
        memory, none in the package); gathering the rows as columns of the (C, V) table
        instead copies one byte per element, 13 % of the encoder's kernel time at batch 32
        (docs/design-notes.md, 2026-11-24: int8 embedding rows through a folded
        Transpose)."""
        from onnx import TensorProto as TP

        q, scales, _ = self._int8_columns(g, "embed", self.table)
        table = g.op("Transpose", [q], perm=[1, 0])  # (V, C), a constant after folding
        rows = g.op("Cast", [g.op("Gather", [table, ids])], to=TP.FLOAT)
        scale = g.op("Unsqueeze", [g.op("Gather", [scales, ids]), g.const([-1])])
        return g.op("Mul", [rows, scale])

    def head(self, g: Graph, h: str) -> str:
        """(B, C) -> logits (B, V). A tied head reuses the (scaled) embedding table; the
        logits bias (Marian) is the Gemm's / MatMulNBits' bias."""
        bits = self.spec.head_bits
        w = self.table if self.tied else _f32(self.model.lm_head.weight)
        name = "embed" if self.tied else "lm_head"
        bias = []
        if self.cfg.logits_bias:
            bias = [g.weight("logits.bias", _f32(self.model.logits_bias))]
        if bits and self.spec.method == "dynamic":
            return self._dynamic(g, h, name, w, bias[0] if bias else None)
        if bits:
            nb = self._nbits(g, name, w, bits)
            return self._matmul_nbits(g, h, nb, w.shape, bias[0] if bias else "")
        table = g.weight("embed.table" if self.tied else "lm_head.weight", w)
        return g.op("Gemm", [h, table, *bias], transB=1)

    def capped(self, g: Graph, logits: str) -> str:
        """logit_softcap: X tanh(z / X) (Gemma 2's final_logit_softcapping)."""
        cap = self.cfg.logit_softcap
        if cap is None:
            return logits
        c = g.const(cap, np.float32)
        return g.op("Mul", [g.op("Tanh", [g.op("Div", [logits, c])]), c])

    # -- blocks --------------------------------------------------------------------------------
    def norms(self, prefix: str, layers, final) -> list[tuple[object, str]]:
        """(LayerNorm, weight name) in the order the residual stream meets them (pre-LN adds
        the final norm)."""
        out = []
        for i, layer in enumerate(layers):
            out.append((layer.res_attn.norm, f"{prefix}.{i}.attn_norm"))
            if getattr(layer, "res_cross", None) is not None:
                out.append((layer.res_cross.norm, f"{prefix}.{i}.cross_norm"))
            out.append((layer.res_ffn.norm, f"{prefix}.{i}.ffn_norm"))
        if self.cfg.norm == "pre":
            out.append((final, f"{prefix}.final_norm"))
        return out

    def post_norms(self, prefix: str, layers) -> list[tuple[object, str] | None]:
        """sandwich_norm: each sublayer's output norm, in sublayer order (None: none)."""
        out: list[tuple[object, str] | None] = []
        for i, layer in enumerate(layers):
            for kind, res in (("attn", layer.res_attn), ("cross", getattr(layer, "res_cross",
                              None)), ("ffn", layer.res_ffn)):  # fmt: skip
                if res is not None:
                    post = res.post
                    out.append(None if post is None else (post, f"{prefix}.{i}.{kind}_post_norm"))
        return out

    def norm_params(self, g: Graph, norm_and_name, last: bool) -> list[str]:
        """[gamma, beta] of a LayerNorm, [gamma] of an RMSNorm."""
        norm, name = norm_and_name
        params = {"weight": _f32(norm.weight)}
        if getattr(norm, "bias", None) is not None:
            params["bias"] = _f32(norm.bias)
        factor = 1.0
        if last and self.tied:  # the head multiplies by the scaled table
            factor /= self.scale
        if last and self.cfg.head_scale is not None:  # and by head_scale (T5's d^-0.5)
            factor *= self.cfg.head_scale
        if factor != 1.0:
            s = np.float32(factor)
            params = {k: v * s for k, v in params.items()}
            name += ".head"
        return [g.weight(f"{name}.{k}", v) for k, v in params.items()]

    def norm(self, g: Graph, x: str, params: list[str]) -> str:
        op = "SimplifiedLayerNormalization" if self.rms else "LayerNormalization"
        return g.op(op, [x, *params], axis=-1, epsilon=self.cfg.layer_norm_eps)

    def skip_norm(self, g: Graph, y: str, x: str, params: list[str], bias: str | None, n_out=1):
        """norm(y + x + bias); with n_out=4 the outputs are (normed, _, _, the sum).

        Written as Add, Add(bias), LayerNormalization rather than com.microsoft's fused
        SkipLayerNormalization: onnxruntime 1.32's CPU kernel for the fused op is 3-5x slower
        from 8 rows up (64 x 256: 105 vs 30 us) and no faster at 1 row (docs/design-notes.md,
        2026-11-23: residual + LayerNorm unfused);
        the bias Add after the residual Add keeps onnxruntime's SkipLayerNormFusion from
        rebuilding it."""
        s = g.op("Add", [y, x])
        if bias:
            s = g.op("Add", [s, bias])
        normed = self.norm(g, s, params)
        return (normed, None, None, s) if n_out == 4 else normed

    def residual_stack(
        self, g: Graph, x: str, pos: str | None, sublayers, norms, last: bool, posts=None,
        emb_norm=None,
    ):  # fmt: skip
        """Run sublayers f_k(h) -> (y, bias) with residuals and LayerNorms; returns the output.

        post-LN: x = LN_k(x + f_k(x) + b);   pre-LN: h = LN_k(x); x = x + f_k(h) + b; ...; LN_final.
        sandwich (posts: the sublayers' output norms): x = x + LN'_k(f_k(h) + b) instead.
        `pos` (the position vectors, or None) is added to the token vectors x first; emb_norm
        (BART's layernorm_embedding: (norm, name)) normalizes that sum before the first layer.
        """
        if emb_norm is not None:
            if pos is not None:
                x, pos = g.op("Add", [x, pos]), None
            x = self.norm(g, x, self.norm_params(g, emb_norm, False))
        K = len(sublayers)
        if self.cfg.norm == "post":
            if pos is not None:
                x = g.op("Add", [x, pos])
            for k, f in enumerate(sublayers):
                y, b = f(x)
                x = self.skip_norm(g, y, x, self.norm_params(g, norms[k], last and k == K - 1), b)
            return x
        params = self.norm_params(g, norms[0], False)
        if pos is not None:
            h, _, _, x = self.skip_norm(g, x, pos, params, None, 4)
        else:
            h = self.norm(g, x, params)
        for k, f in enumerate(sublayers):
            y, b = f(h)
            post = None if posts is None else posts[k]
            if post is not None:  # sandwich: the sublayer's output normed before the residual
                y = self.norm(g, g.op("Add", [y, b]) if b else y, self.norm_params(g, post, False))
                b = None
            params = self.norm_params(g, norms[k + 1], last and k == K - 1)
            h, _, _, x = self.skip_norm(g, y, x, params, b, 4)
        return h

    def positions(self, g: Graph, position_ids: str, source: bool = False) -> str | None:
        """Absolute position vectors (B, T, C), or None (rotary, relative); source: the
        encoder's own table where it has one (BART)."""
        if self.cfg.positional not in ("sinusoidal", "learned"):
            return None
        own = source and self.cfg.separate_positions
        table, name = (
            (self.model.src_pos.table, "src_pos") if own else (self.model.pos.table, "pos")
        )
        return g.op("Gather", [g.weight(f"{name}.table", _f32(table)), position_ids])

    def rotary_caches(self, g: Graph, local: bool = False) -> tuple[str, str]:
        """The cos/sin tables (rows, R/2) of the model's rotary (local: the sliding layers')."""
        r = self.model.local_rotary if local else self.model.rotary
        name = "rotary.local" if local else "rotary"
        return g.weight(f"{name}.cos", _f32(r.cos)), g.weight(f"{name}.sin", _f32(r.sin))

    def rotary_rows(self, g: Graph, position_ids: str) -> str:
        """The rotary table rows of position_ids: LongRoPE's tables hold the short set, then
        the long set at rows max_len ...; a call whose positions reach past
        original_max_position_embeddings reads the long set (Rotary.rows), once per graph.

            position_ids -> ReduceMax -> + 1 > switch -> Cast -> * max_len -> + position_ids
        """
        from onnx import TensorProto as TP

        switch = self.model.rotary.switch
        if switch is None:
            return position_ids
        if g.name not in self._rows:
            longest = g.op("ReduceMax", [position_ids], keepdims=0)
            long = g.op("Cast", [g.op("Greater", [longest, g.const(switch - 1)])], to=TP.INT64)
            offset = g.op("Mul", [long, g.const(self.cfg.max_len)])
            self._rows[g.name] = g.op("Add", [position_ids, offset])
        return self._rows[g.name]

    def rotate(
        self, g: Graph, tensors, position_ids: str, head_size: int, local: bool = False
    ) -> list[str]:
        """Rotary positions on (B, T, heads x head_size) tensors, given as (tensor, heads)
        pairs ('rotate half' layout): the first R dims of each head turn (R: rotary_dims; the
        rest, partial rotary's or the zero padding, pass)."""
        cos, sin = self.rotary_caches(g, local)
        dims = {"rotary_embedding_dim": self.R} if self.R != head_size else {}
        rows = self.rotary_rows(g, position_ids)
        return [
            g.op(
                "RotaryEmbedding",
                [t, rows, cos, sin],
                domain=MS,
                num_heads=heads,
                interleaved=0,
                **dims,
            )  # fmt: skip
            for t, heads in tensors
        ]

    def encoder_bias(self, g: Graph, n: str) -> str:
        """T5's bidirectional bias (1, H, S, S) of an n-token source, once per graph: a
        constant (2L - 1, H) table of every distance k - q, gathered at k - q + L - 1.

            Range(n) -> k - q + (L - 1) (S, S) -> Gather(table) (S, S, H) -> (1, H, S, S)
        """
        if g.name not in self._bias:
            L = self.cfg.max_len
            table = _f32(self.model.enc_bias.by_distance(L))
            r = g.op("Range", [g.const(0), n, g.const(1)])
            rows = g.op("Unsqueeze", [r, g.const([1])])  # q (S, 1)
            cols = g.op("Unsqueeze", [r, g.const([0])])  # k (1, S)
            idx = g.op("Add", [g.op("Sub", [cols, rows]), g.const(L - 1)])
            b = g.op("Gather", [g.weight("enc.relative_bias", table), idx])
            self._bias[g.name] = g.op("Unsqueeze", [g.op("Transpose", [b], perm=[2, 0, 1]),
                                                    g.const([0])])  # fmt: skip
        return self._bias[g.name]

    def decoder_bias(self, g: Graph, position_ids: str, total: str) -> str:
        """T5's causal bias of one new token per row over keys 0 .. total - 1, (B, H, 1, total),
        once per graph: a constant (L, H) table of every distance q - k >= 0 (later keys are
        masked by the attention: their bias is the distance-0 one).

            position_ids (B, 1) - Range(total) -> clip 0 .. L - 1 -> Gather(table) -> (B, H, 1, K)
        """
        if g.name not in self._bias:
            from onnx import TensorProto as TP

            L = self.cfg.max_len
            table = _f32(self.model.dec_bias.by_distance(L)[:L].flip(0))  # q - k = 0 .. L - 1
            k = g.op("Range", [g.const(0), g.op("Cast", [total], to=TP.INT64), g.const(1)])
            dist = g.op("Sub", [position_ids, g.op("Unsqueeze", [k, g.const([0])])])  # (B, K)
            dist = g.op("Clip", [dist, g.const(0), g.const(L - 1)])
            b = g.op("Gather", [g.weight("dec.relative_bias", table), dist])  # (B, K, H)
            b = g.op("Transpose", [b], perm=[0, 2, 1])
            self._bias[g.name] = g.op("Unsqueeze", [b, g.const([2])])
        return self._bias[g.name]

    def head_norm(self, g: Graph, t: str, heads: int, norm, name: str) -> str:
        """qk_norm: an RMSNorm over each head's D dims of a (B, T, heads x D) tensor.

        (B, T, heads D) -> Reshape (B, T, heads, D) -> SimplifiedLayerNormalization -> back
        """
        x = g.op("Reshape", [t, g.const([0, 0, heads, self.D])])
        x = self.norm(g, x, [g.weight(f"{name}.weight", _f32(norm.weight))])
        return g.op("Reshape", [x, g.const([0, 0, heads * self.D])])

    def self_attention(
        self, g: Graph, attn, name: str, cache, lengths, position_ids: str, layer: int
    ):
        r"""GQA over the shared cache buffer: (B, T, C) -> (y, out bias); writes present K/V.

        h -> MatMul (packed Q K V) ----------------------------------> GQA (rotary inside)
                                   \-> Split -> [q/k norm] -> [Rotary] -/   (otherwise)
        """
        seqlens_k, total = lengths
        cfg = self.cfg
        rotary = cfg.positional == "rotary"
        local = rotary and self.model.layer_rotary(layer) is not self.model.rotary
        # GQA's own rotary: whole heads of a multiple of 16 dims (no padding), positions
        # counted by the op itself (no LongRoPE switch)
        fused_rotary = (
            rotary and self.D % 16 == 0 and self.R == self.D and self.model.rotary.switch is None
        )
        Dp = self.Dp
        if cfg.qk_norm and self.padded:
            raise ValueError(
                f"qk_norm with a head dim of {self.D} (not a multiple of 8) is not exported"
            )

        def f(h):
            qkv, _ = self.linear(g, h, self.heads_out(attn.qkv), f"{name}.qkv")
            qkv = [qkv, "", ""]  # packed Q, K, V
            if cfg.qk_norm or (rotary and not fused_rotary):
                sizes = g.const([self.H * Dp, self.G * Dp, self.G * Dp])
                q, k, v = g.op("Split", [qkv[0], sizes], 3, axis=-1)
                if cfg.qk_norm:
                    q = self.head_norm(g, q, self.H, attn.q_norm, f"{name}.q_norm")
                    k = self.head_norm(g, k, self.G, attn.k_norm, f"{name}.k_norm")
                if rotary and not fused_rotary:
                    q, k = self.rotate(g, ((q, self.H), (k, self.G)), position_ids, Dp, local)
                qkv = [q, k, v]
            ins = [*qkv, cache[0], cache[1], seqlens_k, total]
            if fused_rotary:
                ins += list(self.rotary_caches(g, local))
            if cfg.positional == "relative":  # cos, sin, position_ids unused; attention_bias
                ins += ["", "", "", self.decoder_bias(g, position_ids, total)]
            y, pk, pv = g.op(
                "GroupQueryAttention", ins, 3, MS, num_heads=self.H, kv_num_heads=self.G,
                do_rotary=int(fused_rotary), rotary_interleaved=0,
                **self.attention_attrs(cfg.layer_type(layer)),
            )  # fmt: skip
            self.presents += [pk, pv]
            return self.linear(g, y, self.heads_in(attn.out), f"{name}.out", add_bias=False)

        return f

    def cross_attention(self, g: Graph, cross, name: str, kv: Sequence[str], lengths):
        """One new token's attention over the encoder's K/V, as a GroupQueryAttention step.

        kv: the (B, H, S, D) K/V buffers and each row's last-source-token K/V (B, 1, C).
        GQA takes the latter as the step's "new" key/value, writes them at position
        seqlens_k = L_b - 1 (where they already are: the buffer is unchanged) and attends over
        positions 0 .. L_b - 1, so each row sees its own source and no padding, without a
        mask. It is the same attention as MultiHeadAttention's and ~1.9x faster on the CPU
        (onnxruntime 1.32: 39 vs 75 us at 32 rows, 4 heads, 14 source tokens).
        """
        seqlens_k, total = lengths

        def f(h):
            q, _ = self.linear(g, h, self.heads_out(cross.q), f"{name}.q")
            key, value, last_key, last_value = kv
            y, pk, pv = g.op(
                "GroupQueryAttention", [q, last_key, last_value, key, value, seqlens_k, total],
                3, MS, num_heads=self.H, kv_num_heads=self.H, **self.attention_attrs(),
            )  # fmt: skip
            self.cross_presents += [pk, pv]
            return self.linear(g, y, self.heads_in(cross.out), f"{name}.out", add_bias=False)

        return f

    def feed_forward(self, g: Graph, ffn, name: str):
        act = self.cfg.activation

        def f(h):
            if act in ("swiglu", "geglu"):  # act(gate) * up, gate and up in one MatMul
                gate_up, _ = self.linear(g, h, _packed(ffn.gate, ffn.up), f"{name}.gate_up")
                gate, up = g.op("Split", [gate_up], 2, axis=-1, num_outputs=2)
                if act == "swiglu":  # silu
                    a = g.op("Mul", [gate, g.op("Sigmoid", [gate])])
                else:  # gelu_tanh (Gemma's gelu_pytorch_tanh)
                    a = g.op("FastGelu", [gate], domain=MS)
                u = g.op("Mul", [a, up])
            elif act == "gelu":
                u, b = self.linear(g, h, ffn.up, f"{name}.up", add_bias=False)
                u = g.op("BiasGelu", [u, b], domain=MS) if b else g.op("Gelu", [u])
            elif act == "gelu_tanh":  # FastGelu: the tanh approximation (GPT-2's gelu_new)
                u, b = self.linear(g, h, ffn.up, f"{name}.up", add_bias=False)
                u = g.op("FastGelu", [u, *([b] if b else [])], domain=MS)
            elif act == "silu":  # QuickGelu: x * sigmoid(alpha x), alpha 1 (Marian's swish)
                u, _ = self.linear(g, h, ffn.up, f"{name}.up")
                u = g.op("QuickGelu", [u], domain=MS, alpha=1.0)
            else:
                u, _ = self.linear(g, h, ffn.up, f"{name}.up")
                u = g.op("Relu", [u])
            return self.linear(g, u, ffn.down, f"{name}.down", add_bias=False)

        return f

    # -- graphs --------------------------------------------------------------------------------
    def encoder(self) -> Graph:
        """input_ids, attention_mask (B, S) -> cross K/V of every decoder layer (B, H, S, Dp);
        its own self-attention (MultiHeadAttention) runs any head dim: not padded."""
        from onnx import TensorProto as TP

        m, g = self.model, Graph("encoder", self.inits)
        ids = g.input("input_ids", TP.INT64, ["batch", "src_len"])
        mask = g.input("attention_mask", TP.INT64, ["batch", "src_len"])
        mask32 = g.op("Cast", [mask], to=TP.INT32)
        x = self.embedding(g, ids, source=True)
        shape = g.op("Shape", [ids])
        n = g.op("Gather", [shape, g.const(1)], axis=0)
        position_ids = g.op("Range", [g.const(0), n, g.const(1)])
        position_ids = g.op("Expand", [g.op("Unsqueeze", [position_ids, g.const([0])]), shape])
        sublayers = []
        for i, layer in enumerate(m.encoder):
            sublayers.append(self._encoder_attention(g, layer.attn, f"enc.{i}.attn", mask32,
                                                     position_ids, n))  # fmt: skip
            sublayers.append(self.feed_forward(g, layer.ffn, f"enc.{i}.ffn"))
        norms = self.norms("enc", m.encoder, m.enc_norm)
        pos = self.positions(g, position_ids, source=True)
        emb_norm = None if m.enc_emb_norm is None else (m.enc_emb_norm, "enc.emb_norm")
        memory = self.residual_stack(g, x, pos, sublayers, norms, last=False, emb_norm=emb_norm)
        outs = io_names("encoder-decoder", self.cfg.n_decoder_layers)["encoder"]["outputs"]
        B, S, Dp = "batch", "src_len", self.Dp
        # each row's last source position (B, 1): its K/V are the cross GQA's "new" K/V
        last = g.op("Sub", [g.op("ReduceSum", [mask, g.const([1])], keepdims=1), g.const(1)])
        for i, layer in enumerate(m.decoder):
            kv, _ = self.linear(g, memory, self.heads_out(layer.cross.kv), f"dec.{i}.cross.kv")
            k, v = g.op("Split", [kv], 2, axis=-1, num_outputs=2)
            key, value, last_key, last_value = outs[4 * i : 4 * i + 4]
            for t, out in ((k, key), (v, value)):
                t = g.op("Reshape", [t, g.const([0, 0, self.H, Dp])])
                t = g.op("Transpose", [t], perm=[0, 2, 1, 3])
                g.output(t, out, TP.FLOAT, [B, self.H, S, Dp])
            for t, out in ((k, last_key), (v, last_value)):
                t = g.op("GatherND", [t, last], batch_dims=1)  # (B, H Dp)
                g.output(g.op("Unsqueeze", [t, g.const([1])]), out, TP.FLOAT, [B, 1, self.H * Dp])
        return g

    def _encoder_attention(self, g: Graph, attn, name: str, mask32: str, position_ids: str, n: str):
        """Bidirectional self-attention with a key padding mask (MultiHeadAttention); T5's
        relative positions as its attention_bias."""
        rotary = self.cfg.positional == "rotary"
        relative = self.cfg.positional == "relative"

        def f(h):
            qkv, b = self.linear(g, h, attn.qkv, f"{name}.qkv", add_bias=rotary)
            q, k, v = g.op("Split", [qkv], 3, axis=-1, num_outputs=3)
            if rotary:
                q, k = self.rotate(g, ((q, self.H), (k, self.H)), position_ids, self.D)
            scale = {} if self.cfg.attention_scale is None else {"scale": self.cfg.attention_scale}
            ins = [q, k, v, b or "", mask32, *([self.encoder_bias(g, n)] if relative else [])]
            y = g.op("MultiHeadAttention", ins, domain=MS, num_heads=self.H, **scale)
            return self.linear(g, y, attn.out, f"{name}.out", add_bias=False)

        return f

    @staticmethod
    def gqa_lengths(g: Graph, mask: str) -> tuple[str, str]:
        """GroupQueryAttention's lengths from a right-padded (B, L) mask: seqlens_k (B,) =
        tokens per row - 1, total_sequence_length = L (int32)."""
        from onnx import TensorProto as TP

        seqlens = g.op("ReduceSum", [mask, g.const([1])], keepdims=0)
        seqlens_k = g.op("Cast", [g.op("Sub", [seqlens, g.const(1)])], to=TP.INT32)
        total = g.op("Cast", [g.op("Gather", [g.op("Shape", [mask]), g.const(1)], axis=0)],
                     to=TP.INT32)  # fmt: skip
        return seqlens_k, total

    def decoder(self) -> Graph:
        """One decoding step (LM: or a prefill) over the shared cache; logits of the last position.

        input_ids, position_ids (B, T); attention_mask (B, P + T): 1 for the tokens in the
        cache after this step, right-padded (row b's tokens are its first L_b positions); the
        new tokens of row b go to cache positions L_b - T' ... where L_b = sum(mask[b]).
        An encoder-decoder step (T = 1) takes those lengths as GroupQueryAttention does instead
        of the masks (format 5: seqlens_k = L_b - 1, total_sequence_length = max L_b, and the
        same of the source), so a step runs no Shape / ReduceSum / Sub / Cast chain (12 nodes).
        """
        from onnx import TensorProto as TP

        m, cfg = self.model, self.cfg
        ed = cfg.family == "encoder-decoder"
        g = Graph("decoder", self.inits)
        names = io_names(cfg.family, cfg.n_decoder_layers)["decoder"]
        # an encoder-decoder step feeds one token per row (its cross-attention is a GQA step)
        B, T, M, Dp = "batch", 1 if ed else "tgt_len", "max_cache_len", self.Dp
        ids = g.input("input_ids", TP.INT64, [B, T])
        position_ids = g.input("position_ids", TP.INT64, [B, T])
        if ed:  # the runtime feeds GQA's lengths (format 5): no mask arithmetic in the step
            seqlens_k, total, enc_seqlens_k, enc_total = ED_LENGTHS
            lengths = (g.input(seqlens_k, TP.INT32, [B]), g.input(total, TP.INT32, []))
            enc_lengths = (g.input(enc_seqlens_k, TP.INT32, [B]), g.input(enc_total, TP.INT32, []))
        else:  # an LM keeps its attention_mask (onnxruntime-genai feeds one)
            mask = g.input("attention_mask", TP.INT64, [B, "total_len"])
            lengths = self.gqa_lengths(g, mask)
        past = [n for n in names["inputs"] if n.startswith("past_key_values")]
        self.presents: list[str] = []
        self.cross_presents: list[str] = []
        layers = m.decoder if ed else m.layers
        sublayers = []
        for i, layer in enumerate(layers):
            if ed:
                self_kv = [p for p in past if p.startswith(f"past_key_values.{i}.decoder.")]
                cross_kv = [p for p in past if p.startswith(f"past_key_values.{i}.encoder.")]
            else:
                self_kv, cross_kv = [p for p in past if p.startswith(f"past_key_values.{i}.")], []
            for p in self_kv:
                g.input(p, TP.FLOAT, [B, self.G, M, Dp])
            sublayers.append(self.self_attention(g, layer.attn, f"dec.{i}.attn", self_kv, lengths,
                                                 position_ids, i))  # fmt: skip
            if ed:
                for p in cross_kv:  # K/V, then the last source token's (a new token's shape)
                    last_kv = ".last_" in p
                    shape = [B, 1, self.H * Dp] if last_kv else [B, self.H, "src_len", Dp]
                    g.input(p, TP.FLOAT, shape)
                sublayers.append(self.cross_attention(g, layer.cross, f"dec.{i}.cross", cross_kv,
                                                      enc_lengths))  # fmt: skip
            sublayers.append(self.feed_forward(g, layer.ffn, f"dec.{i}.ffn"))
        norms = self.norms("dec", layers, m.dec_norm if ed else m.norm)
        posts = self.post_norms("dec", layers) if cfg.sandwich_norm else None
        emb_norm = getattr(m, "dec_emb_norm", None)
        emb_norm = None if emb_norm is None else (emb_norm, "dec.emb_norm")
        x, pos = self.embedding(g, ids), self.positions(g, position_ids)
        h = self.residual_stack(g, x, pos, sublayers, norms, True, posts, emb_norm)
        if ed:  # one token a row: its hidden state (B, 1, C) -> (B, C)
            h_last = g.op("Squeeze", [h, g.const([1])])
        else:  # the last real position of each row: the largest position id (padding: id 0)
            last = g.op("ArgMax", [position_ids], axis=1, keepdims=1)  # (B, 1)
            h_last = g.op("GatherND", [h, last], batch_dims=1)  # (B, C)
        g.output(self.capped(g, self.head(g, h_last)), "logits", TP.FLOAT, [B, cfg.vocab_size])
        presents = [n for n in names["outputs"] if n.startswith("present.")]
        cross_presents = [n for n in presents if ".encoder." in n]
        for value, out in zip(self.presents, presents[: len(self.presents)], strict=True):
            g.output(value, out, TP.FLOAT, [B, self.G, M, Dp])
        for value, out in zip(self.cross_presents, cross_presents, strict=True):
            g.output(value, out, TP.FLOAT, [B, self.H, "src_len", Dp])
        if LOGITS_3D in names["outputs"]:  # the same logits (B, 1, V), for onnxruntime-genai
            logits_3d = g.op("Unsqueeze", ["logits", g.const([1])])  # output renamed above
            g.output(logits_3d, LOGITS_3D, TP.FLOAT, [B, 1, cfg.vocab_size])
        if INDEXED_LOGITS in names["outputs"]:
            self.indexed_logits(g, h)
        return g

    def indexed_logits(self, g: Graph, h: str) -> None:
        """The logits after the new tokens `logits_index` (K,) names, of every row: (B, T, C)
        -> Gather (B, K, C) -> (B K, C) -> head (B K, V). The index is an overridable
        initializer (a graph input with a default, empty): a reader that does not feed it (a
        plain step, onnxruntime-genai) gets K = 0 rows, no head computed."""
        from onnx import TensorProto as TP
        from onnx import numpy_helper

        g.input(LOGITS_INDEX, TP.INT64, ["logits_count"])
        g.consts.append(numpy_helper.from_array(np.zeros(0, dtype=np.int64), LOGITS_INDEX))
        rows = g.op("Gather", [h, LOGITS_INDEX], axis=1)  # (B, K, C)
        flat = g.op("Reshape", [rows, g.const([-1, self.cfg.d_model])])  # (B K, C)
        logits = self.capped(g, self.head(g, flat))
        g.output(logits, INDEXED_LOGITS, TP.FLOAT, ["indexed_rows", self.cfg.vocab_size])


def build_graphs(
    model,
    spec: VariantSpec,
    hessians: Hessians = None,
    native: gguf_blocks.NativeRows | None = None,
) -> tuple[dict, dict[str, np.ndarray], dict[str, dict]]:
    """({graph name: Graph} of one variant, the initializers they share, what the `gguf`
    variant kept of each GGUF type: {type: {"tensors", "max_error"}}).
    hessians: {linear layer: its inputs' X^T X} for a GPTQ variant (export/gptq.py); native:
    the GGUF file's rows, for the `gguf` variant."""
    inits: dict[str, np.ndarray] = {}
    b = Builder(model, spec, inits, hessians, native)
    graphs = [b.encoder(), b.decoder()] if model.cfg.family == "encoder-decoder" else [b.decoder()]
    return {g.name: g for g in graphs}, inits, b.native_report
