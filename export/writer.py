"""The package writer's low-level parts: graphs and their shared weights file, genai_config.json.

export/exporter.py assembles a package from these; core.format names the files, core.schema
types config.json, runtime/package.py reads it all back.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..core.format import LOGITS_3D, attention_head_size, graph_file, weights_file
from ..core.schema import PackageConfig

ALIGN = 4096  # external-data offsets on page boundaries: onnxruntime can mmap them
INLINE_BYTES = 1024  # smaller initializers stay inside the graph


def write_graphs(
    folder: Path, variant: str, protos: dict, metadata: dict[str, str] | None = None
) -> dict[str, str]:
    """Save a variant's graphs (onnx ModelProtos with inline initializers) into `folder`.

    Initializers of INLINE_BYTES or more go to the variant's one weights file, each distinct
    content once (the tied embedding and output projection, shared by encoder and decoder,
    are stored once). `metadata` goes into each graph's metadata_props (core.format.
    graph_metadata: the sizes the runtime checks config.json against). Returns {graph: file
    name}, the weights file under "weights".
    """
    import onnx
    from onnx.external_data_helper import set_external_data

    weights = weights_file(variant)
    offsets: dict[bytes, tuple[int, int]] = {}
    files = {}
    with open(folder / weights, "wb") as data:
        for graph, proto in protos.items():
            for t in proto.graph.initializer:
                raw = t.raw_data
                if len(raw) < INLINE_BYTES:
                    continue
                key = hashlib.sha256(raw).digest()
                if key not in offsets:
                    data.seek(-data.tell() % ALIGN, os.SEEK_CUR)
                    offsets[key] = (data.tell(), len(raw))
                    data.write(raw)
                offset, length = offsets[key]
                set_external_data(t, weights, offset, length)
                t.ClearField("raw_data")
            onnx.helper.set_model_props(proto, dict(metadata or {}))
            onnx.save_model(proto, folder / graph_file(graph, variant))
            files[graph] = graph_file(graph, variant)
    return {**files, "weights": weights}


def write_accuracy_variant(
    folder: Path, base: dict[str, str], variant: str, accuracy_level: int
) -> dict[str, str]:
    """Copies of the graphs `base` ({graph: file} in `folder`) with every MatMulNBits set to
    `accuracy_level`, saved as `variant`'s graphs; they read the base's weights file.

        decoder.int4.onnx ──► decoder.int4-web.onnx   (accuracy_level 4 -> 0)
                 └────── weights.int4.data ──────┘
    """
    import onnx

    files = {}
    for graph, file in base.items():
        proto = onnx.load(str(folder / file), load_external_data=False)
        for node in proto.graph.node:
            if node.op_type == "MatMulNBits":
                attrs = [a for a in node.attribute if a.name != "accuracy_level"]
                del node.attribute[:]
                node.attribute.extend(
                    [*attrs, onnx.helper.make_attribute("accuracy_level", accuracy_level)]
                )
        files[graph] = graph_file(graph, variant)
        onnx.save_model(proto, folder / files[graph])
    return files


def genai_config(
    config: PackageConfig, variant: str = "fp32", end_ids: list[int] | None = None
) -> dict:
    """onnxruntime-genai's config for a decoder-only package's `variant` (model type "decoder":
    genai's generic decoder-only LLM): our IO names, the 3-D logits, the shared cache buffer;
    end_ids: every id that ends generation (generation_config.json's eos_token_id list)."""
    m = config.model
    sp = config.special_tokens
    decoder = {
        "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
        "filename": graph_file("decoder", variant),
        "head_size": attention_head_size(m.head_dim),  # the cache's (zero-padded) head size
        "hidden_size": m.d_model,
        "num_attention_heads": m.n_heads,
        "num_hidden_layers": m.n_decoder_layers,
        "num_key_value_heads": m.kv_heads,
        "inputs": {
            "input_ids": "input_ids",
            "position_ids": "position_ids",
            "attention_mask": "attention_mask",
            "past_key_names": "past_key_values.%d.key",
            "past_value_names": "past_key_values.%d.value",
        },
        "outputs": {
            "logits": LOGITS_3D,
            "present_key_names": "present.%d.key",
            "present_value_names": "present.%d.value",
        },
    }
    model = {
        "type": "decoder",
        "vocab_size": m.vocab_size,
        "context_length": m.max_len,
        "bos_token_id": sp.bos_id,
        "eos_token_id": sp.eos_id if not end_ids or end_ids == [sp.eos_id] else end_ids,
        "pad_token_id": sp.pad_id,
        "decoder": decoder,
    }
    search = {
        "max_length": m.max_len,
        "past_present_share_buffer": True,
        "do_sample": False,
        "num_beams": 1,
    }
    return {"model": model, "search": search}


def _byte_chars() -> dict[int, str]:
    """GPT-2's byte -> printable character map (byte-level BPE's token strings)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    extra = (b for b in range(256) if b not in printable)
    return {b: chr(b) for b in printable} | {b: chr(256 + i) for i, b in enumerate(extra)}


BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
              "use_regex": False}  # fmt: skip


def byte_level_char_tokenizer(tokenizer_json: Path) -> bool:
    """Rewrite a character tokenizer (train/tokenizer.py's: a BPE without merges, no
    normalizer or pre-tokenizer, a Fuse decoder) over ASCII characters as the same vocabulary in
    byte-level form (GPT-2's: a space is 'Ġ', a newline 'Ċ'), in place: the same ids for every
    text, and the form onnxruntime-genai's og.Tokenizer reads (it takes a tokenizer without a
    SentencePiece decoder for a byte-level one, and gave -1 for the space of the original).
    False, untouched, for any other tokenizer."""
    data = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    model = data.get("model") or {}
    decoder = data.get("decoder") or {}
    if (
        model.get("type") != "BPE" or model.get("merges") or data.get("normalizer")
        or data.get("pre_tokenizer") or decoder.get("type") != "Fuse"
    ):  # fmt: skip
        return False
    special = {t["content"] for t in data.get("added_tokens", [])}
    chars = [t for t in model.get("vocab", {}) if t not in special]
    if not all(len(c) == 1 and ord(c) < 128 for c in chars):
        return False  # a multi-byte character would need merges: left as it is
    byte = _byte_chars()
    model["vocab"] = {(t if t in special else byte[ord(t)]): i for t, i in model["vocab"].items()}
    data["pre_tokenizer"] = BYTE_LEVEL
    data["decoder"] = BYTE_LEVEL
    tokenizer_json.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return True
