"""Hostile GGUF files (issue 57): each one a clear error naming the file and the field, before
anything is written: truncated, a tensor's extent past the end, a shape the metadata does not
explain, an unknown type id, a missing or mistyped metadata key, another architecture, a type
gguf-py cannot dequantize, a tensor the family does not have."""

from __future__ import annotations

import struct

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

from gguf_files import byte_level_tokenizer, write_gguf  # noqa: E402

from edgeformer.models.gguf import GGUFFile, convert_gguf  # noqa: E402

V = gguf.GGUFValueType
CONFIG = dict(vocab_size=280, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
              bos_token_id=0, eos_token_id=0, tie_word_embeddings=True)  # fmt: skip


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf-hostile")
    byte_level_tokenizer(root / "tokenizer.json")
    torch.manual_seed(0)
    return root, transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).eval()


def written(model, name: str, **kw):
    root, hf = model
    path = root / f"{name}.gguf"
    write_gguf(path, "llama", hf, root / "tokenizer.json", "Q8_0", **kw)
    return path


def refused(path, *words: str, where=None):
    """convert_gguf's error: names the file and each of `words`; nothing written."""
    out = path.parent / f"{path.stem}-checkpoint"
    with pytest.raises((ValueError, FileNotFoundError)) as e:
        convert_gguf(path, out)
    text = str(e.value)
    assert str(path) in text, text
    for w in words:
        assert w in text, text
    assert not out.exists()
    return text


def test_truncated_file_names_the_tensor(model):
    path = written(model, "truncated")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 1000])
    refused(path, "tensor '", "ends past the end of the file")


def test_truncated_header(model):
    path = written(model, "header")
    path.write_bytes(path.read_bytes()[:200])
    refused(path, "not a readable GGUF file")


def test_extent_past_the_end(model):
    """A header that claims more rows than the data holds (the last tensor's extent)."""

    def bigger(name, t):
        return (name, np.concatenate([t, t])) if name == "output_norm.weight" else (name, t)

    path = written(model, "extent", tensors=bigger)
    f = gguf.GGUFReader(path)
    last = max(f.tensors, key=lambda t: t.data_offset)
    data = bytearray(path.read_bytes())
    path.write_bytes(bytes(data[: last.data_offset + 16]))
    refused(path, repr(last.name), "ends past the end of the file")


def test_shape_the_metadata_does_not_explain(model):
    path = written(model, "shape", metadata={"llama.feed_forward_length": (96, V.UINT32)})
    refused(path, "'blk.0.ffn_gate.weight'", "(128, 64)", "(96, 64)")


def tensor_info_at(data: bytes, name: str) -> tuple[int, int]:
    """(where a tensor's info starts after its name, its n_dims): name (u64 length + bytes),
    n_dims u32, dims u64 each (innermost first), type u32, offset u64."""
    raw = name.encode()
    at = data.index(struct.pack("<Q", len(raw)) + raw) + 8 + len(raw)
    return at, struct.unpack_from("<I", data, at)[0]


def test_unknown_type_id(model):
    path = written(model, "type-id")
    name = gguf.GGUFReader(path).tensors[0].name
    data = bytearray(path.read_bytes())
    at, n_dims = tensor_info_at(data, name)
    struct.pack_into("<I", data, at + 4 + 8 * n_dims, 99)
    path.write_bytes(bytes(data))
    refused(path, repr(name), "GGML type id 99")


def test_row_not_whole_blocks(model):
    """A Q8_0 matrix whose header says rows of 48 values (blocks of 32)."""
    path = written(model, "blocks")
    data = bytearray(path.read_bytes())
    at, _ = tensor_info_at(data, "blk.0.attn_q.weight")
    struct.pack_into("<Q", data, at + 4, 48)
    path.write_bytes(bytes(data))
    refused(path, "'blk.0.attn_q.weight'", "does not fit Q8_0 blocks of 32")


def test_missing_metadata_key(model):
    path = written(model, "missing", metadata={"llama.block_count": None})
    refused(path, "'llama.block_count'")


def test_mistyped_metadata_key(model):
    path = written(model, "mistyped", metadata={"llama.block_count": ("two", V.STRING)})
    refused(path, "llama.block_count", "'two'")


def test_missing_tensor(model):
    path = written(model, "no-down", tensors=lambda n, t: None if "ffn_down" in n else (n, t))
    refused(path, "'blk.0.ffn_down.weight'")


def test_tensor_the_family_does_not_have(model):
    def extra(name, t):
        return ("blk.0.ffn_gate_inp.weight", t) if name == "blk.0.ffn_gate.weight" else (name, t)

    path = written(model, "extra", tensors=extra)
    refused(path, "blk.0.ffn_gate_inp.weight")


def test_another_architecture_lists_the_converted_ones(model):
    root, _ = model
    path = root / "mamba.gguf"
    w = gguf.GGUFWriter(str(path), "mamba")
    w.add_block_count(1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    text = refused(path, "'mamba'", "llama", "qwen3", "phi3", "gemma3", "gpt2")
    assert "Hugging Face folder" in text


def test_type_gguf_cannot_dequantize(model):
    root, _ = model
    path = root / "q8k.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tensor("token_embd.weight", np.zeros((280, 292), np.uint8),
                 raw_dtype=gguf.GGMLQuantizationType.Q8_K)  # fmt: skip
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ValueError) as e:
        GGUFFile(path).dequantized("token_embd.weight")
    assert str(path) in str(e.value) and "'token_embd.weight'" in str(e.value)
    assert "Q8_K" in str(e.value) and "cannot dequantize" in str(e.value)
