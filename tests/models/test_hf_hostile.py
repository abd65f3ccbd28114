"""`convert hf` on hostile Hugging Face folders: every case is a one-line error naming the file
(and the tensor or key), raised before the model is built, with nothing written.

Lying config.json sizes (a 1 KB config asking for terabytes), damaged or lying safetensors
headers, index shard names that leave the folder, symlinks out, invalid generation_config.json
and tokenizer.json, NaN weights; on Llama and on the newer families (Qwen2, Gemma).
"""

from __future__ import annotations

import json
import os
import shutil
import struct

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from test_hf_families import build_hf  # noqa: E402

from edgeformer.cli import main  # noqa: E402
from edgeformer.models.hf import convert, convert_hf  # noqa: E402


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Pristine Hugging Face folders of three families (copied by each test)."""
    root = tmp_path_factory.mktemp("hostile-hf")
    for name in ("llama3", "qwen2", "gemma"):
        build_hf(name, root / name)
    return root


@pytest.fixture
def no_build(monkeypatch):
    """Fails the test if the converter builds (allocates) the model."""

    def refuse(cfg):
        raise AssertionError(f"the model was built from config.json ({cfg.d_model=})")

    monkeypatch.setattr(convert, "build_model", refuse)


def copy(folders, tmp_path, name: str = "llama3"):
    return shutil.copytree(folders / name, tmp_path / "hf")


def edit_json(path, **changes):
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, **changes}))


def refused(src, out, match: str, capsys=None) -> str:
    """convert_hf raises a ValueError matching `match`, the CLI exits 2 with one line naming
    the same, and nothing is written."""
    with pytest.raises((ValueError, FileNotFoundError)) as info:
        convert_hf(src, out)
    assert match in str(info.value), str(info.value)
    assert not out.exists()
    if capsys is not None:
        capsys.readouterr()
        assert main(["convert", "hf", str(src), str(out), "-q"]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert match in line, line
        assert not out.exists()
    return str(info.value)


# ---------------------------------------------------------------- config.json against the tensors


@pytest.mark.parametrize("family", ["llama3", "qwen2", "gemma"])
@pytest.mark.parametrize(
    "changes, match",
    [
        # 4096-wide layers over 64-wide tensors: ~25 GB of float32 asked for
        (dict(hidden_size=4096, intermediate_size=16384), "the sizes of config.json make it"),
        (dict(vocab_size=50_000_000), "the sizes of config.json make it [50000000, "),
        (dict(num_hidden_layers=100_000, layer_types=None), "missing tensor 'layers.2."),
        (dict(num_key_value_heads=4), "the sizes of config.json make it"),
        # rotary tables of 10^9 positions: ~250 GB, no weight tells
        (dict(max_position_embeddings=1_000_000_000), "max_position_embeddings 1000000000"),
    ],
)
def test_lying_config_sizes_are_refused_before_the_model_is_built(
    family, changes, match, folders, tmp_path, no_build
):
    src = copy(folders, tmp_path, family)
    edit_json(src / "config.json", **changes)
    refused(src, tmp_path / "out", match)


def rewrite_weights(src, edit):
    """model.safetensors with its tensors edited by `edit(dict)` (a lying shape is a real one)."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(src / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(src / "model.safetensors"), metadata={"format": "pt"})


@pytest.mark.parametrize("family", ["qwen2", "gemma"])
def test_a_tensor_of_another_shape_is_named(family, folders, tmp_path, no_build):
    src = copy(folders, tmp_path, family)

    def widen(t):
        name = "model.layers.1.mlp.down_proj.weight"
        t[name] = torch.zeros(t[name].shape[0], t[name].shape[1] + 8)

    rewrite_weights(src, widen)
    refused(src, tmp_path / "out", "'layers.1.ffn.down.weight' has shape [64, 136]")


def test_nan_weights_are_named(folders, tmp_path, no_build, capsys):
    src = copy(folders, tmp_path)

    def poison(t):
        t["model.layers.0.self_attn.o_proj.weight"][3, 5] = float("nan")

    rewrite_weights(src, poison)
    refused(src, tmp_path / "out", "'model.layers.0.self_attn.o_proj.weight' holds 1 NaN", capsys)


# ---------------------------------------------------------------- safetensors headers


def header_of(path) -> tuple[dict, bytes]:
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + n]), data[8 + n :]


def write_with_header(path, header: dict, body: bytes) -> None:
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + body)


def first_tensor(header: dict) -> str:
    return min((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"])


def damage(kind: str, path) -> str:
    """Damage model.safetensors one way; returns what the error must say."""
    header, body = header_of(path)
    name = first_tensor(header)
    if kind == "length":
        data = path.read_bytes()
        path.write_bytes(struct.pack("<Q", 1 << 40) + data[8:])
        return "header length 1099511627776 is beyond the file"
    if kind == "json":
        data = bytearray(path.read_bytes())
        data[8] = ord("[")
        path.write_bytes(bytes(data))
        return "the safetensors header is not valid JSON"
    if kind == "dtype":
        header[name]["dtype"] = "F128"
        write_with_header(path, header, body)
        return f"tensor {name!r} has dtype 'F128'"
    if kind == "shape":  # a shape that the bytes do not hold (1 TB of floats)
        header[name]["shape"] = [1 << 20, 1 << 18]
        write_with_header(path, header, body)
        return f"tensor {name!r}: shape [1048576, 262144] of "
    if kind == "offsets":  # two tensors over the same bytes
        other = sorted(
            (k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"]
        )[1]  # noqa: E501
        header[other]["data_offsets"] = header[name]["data_offsets"]
        header[other]["shape"], header[other]["dtype"] = (
            header[name]["shape"],
            header[name]["dtype"],
        )  # noqa: E501
        write_with_header(path, header, body)
        return "(tensors overlap or leave a gap)"
    if kind == "negative":
        header[name]["shape"] = [-1, 4]
        write_with_header(path, header, body)
        return f"tensor {name!r} has shape [-1, 4]"
    if kind == "truncated":
        last = max(
            (k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"]
        )  # noqa: E501
        path.write_bytes(path.read_bytes()[:-100])
        return f"tensor {last!r} ends at byte"
    if kind == "empty":
        path.write_bytes(b"\x01\x02")
        return "is not a safetensors file (2 bytes, no header)"
    raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind", ["length", "json", "dtype", "shape", "offsets", "negative", "truncated", "empty"]
)
def test_damaged_safetensors_headers_name_the_file_and_tensor(kind, folders, tmp_path, capsys):
    src = copy(folders, tmp_path)
    match = damage(kind, src / "model.safetensors")
    message = refused(src, tmp_path / "out", match, capsys)
    assert "model.safetensors" in message


# ---------------------------------------------------------------- files stay inside the folder


def shard(folders, tmp_path, name: str):
    """A sharded folder whose index puts every tensor in the file `name`."""
    src = copy(folders, tmp_path)
    header, _ = header_of(src / "model.safetensors")
    weight_map = {k: name for k in header if k != "__metadata__"}
    index = {"metadata": {}, "weight_map": weight_map}
    (src / "model.safetensors.index.json").write_text(json.dumps(index))
    return src


@pytest.mark.parametrize("name", ["../outside/model.safetensors", "/etc/passwd", "a/../../x"])
def test_index_shard_names_stay_inside_the_folder(name, folders, tmp_path, capsys):
    src = shard(folders, tmp_path, name)
    (tmp_path / "outside").mkdir()
    os.replace(src / "model.safetensors", tmp_path / "outside" / "model.safetensors")
    refused(src, tmp_path / "out", f"names {name!r}, which is not a file inside the folder", capsys)


def test_a_shard_or_file_linked_out_of_the_folder_is_refused(folders, tmp_path):
    src = shard(folders, tmp_path, "linked.safetensors")
    (tmp_path / "outside").mkdir()
    os.replace(src / "model.safetensors", tmp_path / "outside" / "w.safetensors")
    (src / "linked.safetensors").symlink_to(tmp_path / "outside" / "w.safetensors")
    refused(src, tmp_path / "out", "'linked.safetensors', which is not a file inside the folder")
    (src / "linked.safetensors").unlink()
    os.replace(tmp_path / "outside" / "w.safetensors", src / "linked.safetensors")
    os.replace(src / "tokenizer.json", tmp_path / "outside" / "tokenizer.json")
    (src / "tokenizer.json").symlink_to(tmp_path / "outside" / "tokenizer.json")
    refused(src, tmp_path / "out", "'tokenizer.json', which is not a file inside the folder")
    (src / "tokenizer.json").unlink()
    os.replace(tmp_path / "outside" / "tokenizer.json", src / "tokenizer.json")
    assert convert_hf(src, tmp_path / "out").is_dir()  # the same files, inside: converts


def test_a_hugging_face_cache_snapshot_converts(folders, tmp_path):
    """The cache's layout: snapshots/REV/* are links into ../../blobs: allowed."""
    repo = tmp_path / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    for i, f in enumerate(sorted((folders / "llama3").iterdir())):
        shutil.copy(f, repo / "blobs" / f"blob{i}")
        (snap / f.name).symlink_to(os.path.relpath(repo / "blobs" / f"blob{i}", snap))
    assert convert_hf(snap, tmp_path / "out").is_dir()


def test_an_index_that_lies_is_named(folders, tmp_path, capsys):
    src = shard(folders, tmp_path, "model.safetensors")
    index = json.loads((src / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.ghost.weight"] = "model.safetensors"
    (src / "model.safetensors.index.json").write_text(json.dumps(index))
    os.replace(src / "model.safetensors", src / "model.safetensors")  # the index is read
    (src / "model.safetensors").rename(src / "shard.safetensors")
    index["weight_map"] = {k: "shard.safetensors" for k in index["weight_map"]}
    (src / "model.safetensors.index.json").write_text(json.dumps(index))
    refused(src, tmp_path / "out", "puts tensor 'model.ghost.weight' in", capsys)
    (src / "model.safetensors.index.json").write_text("{not json")
    refused(src, tmp_path / "out", "model.safetensors.index.json is not valid JSON", capsys)


# ---------------------------------------------------------------- files copied into the checkpoint


@pytest.mark.parametrize(
    "text, match",
    [
        ("{not json", "generation_config.json is not valid JSON"),
        ('{"temperature": -1, "do_sample": true}', "temperature"),
        (
            '{"eos_token_id": [2, 1000000]}',
            "eos_token_id is [2, 1000000], not token ids in [0, 300)",
        ),
        ('{"max_new_tokens": "many"}', "max_new_tokens"),
        ("[1, 2]", "generation_config.json is not a JSON object"),
    ],
)
def test_an_invalid_generation_config_is_named_at_conversion(text, match, folders, tmp_path):
    src = copy(folders, tmp_path)
    (src / "generation_config.json").write_text(text)
    message = refused(src, tmp_path / "out", match)
    assert "generation_config.json" in message


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda t: "{not json", "tokenizer.json is not valid JSON"),
        (lambda t: json.dumps({**t, "pre_tokenizer": {"type": "Split", "pattern": {
            "Regex": "(a+)+"}, "behavior": "Isolated", "invert": False}}),
         "tokenizer.json has a refused regular expression: pre_tokenizer.pattern.Regex"),
        (lambda t: json.dumps({**t, "model": {"type": "Nonsense"}}),
         "tokenizer.json cannot be loaded by the tokenizers library"),
    ],
)  # fmt: skip
def test_an_invalid_tokenizer_is_named_at_conversion(edit, match, folders, tmp_path, capsys):
    src = copy(folders, tmp_path)
    path = src / "tokenizer.json"
    path.write_text(edit(json.loads(path.read_text())))
    refused(src, tmp_path / "out", match, capsys)


@pytest.mark.parametrize("name", ["config.json", "tokenizer_config.json"])
def test_json_that_is_not_utf8_or_too_deep_is_named(name, folders, tmp_path, capsys):
    src = copy(folders, tmp_path)
    (src / name).write_bytes(b'{"a": "\xff"}')
    refused(src, tmp_path / "out", f"{name} is not valid JSON", capsys)
    (src / name).write_text('{"a": ' * 100_000 + "1" + "}" * 100_000)
    refused(src, tmp_path / "out", f"{name} is nested too deeply", capsys)


# ---------------------------------------------------------------- a full disk


def test_a_full_disk_is_one_line_and_leaves_nothing(folders, tmp_path, capsys, monkeypatch):
    """safetensors reports a full disk as SafetensorError "... (os error 28)": a traceback
    before; now the OSError it is, printed as one line (exit 1), and no folder is left.
    (Measured for real on a 1 MB tmpfs: the same line.)"""
    from safetensors import SafetensorError

    from edgeformer.models import checkpoint

    def full(model, path):
        with open(path, "wb") as f:
            f.write(b"x" * 10)  # a part written, then the device is full
        raise SafetensorError(
            "Error while serializing: I/O error: No space left on device (os error 28)"
        )

    monkeypatch.setattr(checkpoint, "save_model", full)
    src, out = copy(folders, tmp_path), tmp_path / "out"
    assert main(["convert", "hf", str(src), str(out), "-q"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("edgeformer convert: error: no space left on the device"), line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]


# ---------------------------------------------------------------- the translators


@pytest.fixture(scope="module")
def translators(tmp_path_factory):
    """Pristine NLLB (M2M100) and T5 folders, with their tokenizers."""
    from test_hf_translators import built  # the family tests' folders (built once)

    root = tmp_path_factory.mktemp("hostile-translators")
    for name in ("nllb", "t5", "m2m100"):
        shutil.copytree(built(name, tmp_path_factory)[3], root / name)
    return root


def _no_file(name: str):
    return lambda src: (src / name).unlink()


def _vocab_json(change):
    def edit(src):
        vocab = json.loads((src / "vocab.json").read_text())
        (src / "vocab.json").write_text(json.dumps(change(vocab)))

    return edit


def _unigram_spm(src):
    """sentencepiece.bpe.model replaced by a Unigram model (M2M100's is BPE)."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    proto = pb.ModelProto()
    proto.ParseFromString((src / "sentencepiece.bpe.model").read_bytes())
    proto.trainer_spec.model_type = 1
    (src / "sentencepiece.bpe.model").write_bytes(proto.SerializeToString())


@pytest.mark.parametrize(
    "change, match",
    [
        (_no_file("vocab.json"), "has no tokenizer.json and no vocab.json"),
        (_no_file("sentencepiece.bpe.model"), "no sentencepiece.bpe.model"),
        (_unigram_spm, "trainer_spec.model_type=1"),
        (_vocab_json(lambda v: {k: i + 1 for k, i in v.items()}), "ids must be 0 .."),
        (_vocab_json(lambda v: {("<oov>" if k == "<unk>" else k): i for k, i in v.items()}),
         "has no <unk>"),
        (_vocab_json(lambda v: [1, 2]), "must map tokens to integer ids"),
        (lambda src: (src / "vocab.json").write_text("{"), "vocab.json is not valid JSON"),
        (lambda src: (src / "vocab.json").write_text("[" * 100_000 + "]" * 100_000),
         "vocab.json is nested too deeply"),
        # transformers numbers language tokens after vocab.json's: ours would be one lower
        (_vocab_json(lambda v: {**v, "__en__": len(v)}), "holds the language token '__en__'"),
        (lambda src: edit_json(src / "tokenizer_config.json", language_codes="xx"),
         "language_codes='xx'"),
        (lambda src: edit_json(src / "tokenizer_config.json", src_lang="klingon"),
         "src_lang='klingon'"),
        (lambda src: edit_json(src / "config.json", vocab_size=450), "vocab_size=450"),
    ],
)  # fmt: skip
def test_hostile_m2m100_tokenizers_are_refused(change, match, translators, tmp_path, capsys):
    """An M2M100 folder's SentencePiece-only tokenizer (no tokenizer.json) with a file missing,
    the wrong kind of model, a broken vocab.json, unknown language settings or a vocabulary
    larger than the model's: one line naming it, nothing written."""
    src = shutil.copytree(translators / "m2m100", tmp_path / "hf")
    change(src)
    refused(src, tmp_path / "out", match, capsys)


@pytest.mark.parametrize(
    "family, changes, match",
    [
        ("nllb", dict(d_model=4096, encoder_ffn_dim=16384), "d_model 4096"),
        # fairseq's position table is made from config.json alone: bounded first
        ("nllb", dict(max_position_embeddings=10**9), "max_position_embeddings=1000000000"),
        ("nllb", dict(vocab_size=50_000_000), "make it [50000000, "),
        ("nllb", dict(encoder_layers=100_000), "missing tensor 'encoder.layers.2."),
        ("t5", dict(n_positions=10**9), "n_positions=1000000000"),
        ("t5", dict(d_kv=4096), "make it"),
        ("t5", dict(num_layers=100_000), "missing tensor 'encoder.block.2."),
    ],
)  # fmt: skip
def test_lying_translator_configs_are_refused(family, changes, match, translators, tmp_path,
                                              no_build, capsys):  # fmt: skip
    """NLLB and T5 folders whose config.json lies about sizes: one line naming the field,
    before the model (or a position table the size of the lie) is built."""
    src = shutil.copytree(translators / family, tmp_path / "hf")
    edit_json(src / "config.json", **changes)
    refused(src, tmp_path / "out", match, capsys)


def test_a_lying_translator_tensor_is_named(translators, tmp_path, no_build):
    src = shutil.copytree(translators / "nllb", tmp_path / "hf")

    def widen(t):
        name = "model.decoder.layers.1.fc2.weight"
        t[name] = torch.zeros(t[name].shape[0], t[name].shape[1] + 8)

    rewrite_weights(src, widen)
    refused(src, tmp_path / "out", "'decoder.1.ffn.down.weight' has shape [32, 56]")
