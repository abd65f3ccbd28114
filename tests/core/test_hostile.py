"""Packages and requests built to hurt: every case is a clear error naming the problem.

Hostile tokenizer.json files whose checksum was updated to match, config.json sizes that
disagree with the graphs, JSON nested thousands deep, weights files a graph reads without the
checksum list knowing, and requests with no upper bound (beams, penalties, threads).
"""

from __future__ import annotations

import functools
import json
import re
import shutil

import hypothesis
import hypothesis.strategies as st
import numpy as np
import pytest

from edgeformer.cli import main
from edgeformer.core.contract import max_threads
from edgeformer.core.decoding import MAX_BEAMS, GenerationOptions
from edgeformer.core.files import sha256
from edgeformer.runtime import Generator, PackageError, Translator


def copy_package(src, dst):
    shutil.copytree(src, dst)
    return dst


def rewrite(pkg, name: str, text: str) -> None:
    """Replace a package file and update its checksum: a file the checksum list vouches for."""
    (pkg / name).write_text(text)
    config = json.loads((pkg / "config.json").read_text())
    config["files"][name] = sha256(pkg / name)
    (pkg / "config.json").write_text(json.dumps(config))


def nested(depth: int, leaf: str) -> str:
    """JSON text of an object nested `depth` deep (too deep for Python's json.dumps)."""
    return '{"a": ' * depth + leaf + "}" * depth


# ---------------------------------------------------------------- tokenizer.json


def edited_tokenizer(ed_package, tmp_path, edit) -> object:
    pkg = copy_package(ed_package, tmp_path / "pkg")
    tok = json.loads((pkg / "tokenizer.json").read_text())
    text = edit(tok)
    rewrite(pkg, "tokenizer.json", text if isinstance(text, str) else json.dumps(tok))
    return pkg


def bad_regex(tok):
    tok["pre_tokenizer"] = {
        "type": "Split", "pattern": {"Regex": "(("}, "behavior": "Isolated", "invert": False
    }  # fmt: skip


def deep_normalizer(tok):
    text = json.dumps(tok)
    deep = '{"type": "NFKC"}'
    for _ in range(5000):
        deep = '{"type": "Sequence", "normalizers": [' + deep + "]}"
    return text.replace('"normalizer": null', f'"normalizer": {deep}')


def chained_replaces(tok):
    """Two Replace normalizers: one '§' becomes 400 M characters (issue 63: SIGABRT)."""
    tok["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Replace", "pattern": {"String": "§"}, "content": "x" * 20_000},
        {"type": "Replace", "pattern": {"String": "x"}, "content": "y" * 20_000},
    ]}  # fmt: skip


def id_beyond_vocab(tok):
    tok["model"]["vocab"]["zzz"] = 10**6


def permuted(tok):
    vocab = tok["model"]["vocab"]
    names = [t for t in vocab if vocab[t] > 10][:20]
    ids = [vocab[t] for t in names]
    for t, i in zip(names, ids[1:] + ids[:1]):  # a rotation of 20 entries
        vocab[t] = i


@pytest.mark.parametrize(
    "edit, message",
    [
        (bad_regex, "tokenizer.json has a refused regular expression: pre_tokenizer.pattern"),
        (deep_normalizer, "tokenizer.json cannot be read"),
        (chained_replaces, "tokenizer.json has a refused normalizer expansion: one character"),
        (id_beyond_vocab, "has token id 1000000, beyond the model's vocabulary"),
        (permuted, "tokenizer.json does not encode as it did at export"),
    ],
)
def test_hostile_tokenizers_are_package_errors(edit, message, ed_package, tmp_path, capsys):
    pkg = edited_tokenizer(ed_package, tmp_path, edit)
    with pytest.raises(PackageError, match=message):
        Translator(pkg)
    assert main(["translate", str(pkg), "two dogs ."]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert message in line


def test_a_tokenizer_panic_is_a_package_error(ed_package, monkeypatch):
    """pyo3's PanicException derives from BaseException: it must not escape as a traceback."""
    from edgeformer.runtime import tokenizer

    class PanicException(BaseException):
        pass

    def panic(text):
        raise PanicException("regex compile failed")

    monkeypatch.setattr(tokenizer.Tokenizer, "from_str", staticmethod(panic))
    with pytest.raises(PackageError, match="tokenizer.json cannot be read.*regex compile failed"):
        Translator(ed_package)


def catastrophic_regex(tok):
    """A pattern that the probe text never triggers; "xxxx...x" backtracks 2^n ways. Put
    before the package's own pre-tokenizer, it changes nothing else."""
    split = {
        "type": "Split", "pattern": {"Regex": "(x+x+)+y"}, "behavior": "Isolated", "invert": False
    }  # fmt: skip
    own = [tok["pre_tokenizer"]] if tok["pre_tokenizer"] else []
    tok["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split, *own]}


def test_a_catastrophic_tokenizer_regex_is_refused_at_load(ed_package, tmp_path, capsys):
    """Before: the package loaded, and the first "xxx...x" input raised pyo3's PanicException
    (a BaseException) out of translate. Now: refused at load, naming the pattern's path."""
    pkg = edited_tokenizer(ed_package, tmp_path, catastrophic_regex)
    message = (
        "tokenizer.json has a refused regular expression: pre_tokenizer.pretokenizers[0]."
        "pattern.Regex"
    )
    with pytest.raises(PackageError, match=re.escape(message + " '(x+x+)+y': more than one rep")):
        Translator(pkg)
    assert main(["translate", str(pkg), "x" * 40]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert message in line


def test_a_tokenizer_panic_at_encode_time_is_a_package_error(ed_package, tmp_path, monkeypatch):
    """The load-time bound switched off: the regex engine's panic on one input (its retry
    limit) comes out of translate as a PackageError, an Exception, never a BaseException."""
    from edgeformer.runtime import tokenizer

    pkg = edited_tokenizer(ed_package, tmp_path, catastrophic_regex)
    monkeypatch.setattr(tokenizer, "tokenizer_pattern_problem", lambda data: None)
    translator = Translator(pkg)  # the probe text does not trigger the pattern
    assert translator.translate("two dogs .")  # nor does a plain input
    with pytest.raises(PackageError, match="tokenizer.json failed on this input .*retry-limit"):
        translator.translate("x" * 40)


# ---------------------------------------------------------------- config.json against the graphs


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("max_position_embeddings", 128, "max_position_embeddings is 128 but the decoder graph"),
        ("num_attention_heads", 2, "num_attention_heads is 2 but the"),
        ("hidden_size", 64, "hidden_size is 64 but the"),
        ("vocab_size", 4000, "vocab_size is 4000 but the"),
    ],
)
def test_config_sizes_are_checked_against_the_graphs(key, value, message, lm_package, tmp_path):
    pkg = copy_package(lm_package, tmp_path / "pkg")
    config = json.loads((pkg / "config.json").read_text())
    config["model"][key] = value
    (pkg / "config.json").write_text(json.dumps(config))
    with pytest.raises(PackageError, match=message):
        Generator(pkg)


def test_graphs_without_size_metadata_are_checked_by_their_shapes(ed_package, tmp_path):
    """Packages exported before the graphs carried their sizes: the IO shapes still tell."""
    onnx = pytest.importorskip("onnx")
    pkg = copy_package(ed_package, tmp_path / "pkg")
    for graph in ("encoder.onnx", "decoder.onnx"):
        proto = onnx.load(str(pkg / graph), load_external_data=False)
        del proto.metadata_props[:]
        onnx.save_model(proto, str(pkg / graph))
        config = json.loads((pkg / "config.json").read_text())
        config["files"][graph] = sha256(pkg / graph)
        (pkg / "config.json").write_text(json.dumps(config))
    Translator(pkg)  # still loads
    config = json.loads((pkg / "config.json").read_text())
    config["model"]["num_attention_heads"] = 2
    (pkg / "config.json").write_text(json.dumps(config))
    with pytest.raises(PackageError, match="disagree with the encoder graph: present.0.encoder"):
        Translator(pkg)


# ---------------------------------------------------------------- nesting and external data


@pytest.mark.parametrize("name", ["config.json", "golden.json", "generation_config.json"])
def test_deeply_nested_json_is_a_package_error(name, ed_package, tmp_path):
    pkg = copy_package(ed_package, tmp_path / "pkg")
    text = nested(100_000, "1")
    if name == "config.json":
        (pkg / name).write_text(text)
    else:
        rewrite(pkg, name, text)
    with pytest.raises(PackageError, match="nested too deeply"):
        Translator(pkg).model.package.golden()


@pytest.mark.parametrize("value_first", [False, True])
def test_a_graph_may_read_only_listed_weights(value_first, ed_package, tmp_path):
    """An .onnx (checksummed) that points one tensor at a file the list does not have: that
    file would change the outputs unchecked. The entry's fields in either order (value before
    key loaded the file unchecked while the check grepped for one encoding)."""
    onnx = pytest.importorskip("onnx")
    pkg = copy_package(ed_package, tmp_path / "pkg")
    proto = onnx.load(str(pkg / "decoder.onnx"), load_external_data=False)
    tensor = next(t for t in proto.graph.initializer if t.external_data)
    for entry in tensor.external_data:
        if entry.key == "location":
            entry.value = "extra.data"
    shutil.copyfile(pkg / "weights.data", pkg / "extra.data")
    data = proto.SerializeToString()
    key, value = b"\x0a\x08location", b"\x12\x0aextra.data"
    if value_first:  # the same entry, same length: {value, key}
        assert data.count(key + value) == 1
        data = data.replace(key + value, value + key)
    (pkg / "decoder.onnx").write_bytes(data)
    config = json.loads((pkg / "config.json").read_text())
    config["files"]["decoder.onnx"] = sha256(pkg / "decoder.onnx")
    (pkg / "config.json").write_text(json.dumps(config))
    with pytest.raises(PackageError, match="decoder.onnx reads the weights file 'extra.data'"):
        Translator(pkg)


# ---------------------------------------------------------------- upper bounds


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(num_beams=10**6), f"num_beams=1000000 must be <= {MAX_BEAMS}"),
        (dict(num_hypotheses=10**6, sampling=True), f"must be <= {MAX_BEAMS}"),
        (dict(length_penalty=1e308), "length_penalty=1e+308 must be in [-10.0, 10.0]"),
        (dict(length_penalty=-1e308), "must be in [-10.0, 10.0]"),
    ],
)
def test_options_have_upper_bounds(options, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("+", r"\+")):
        GenerationOptions(**options)


def test_threads_and_batches_have_upper_bounds(ed_package, capsys):
    limit = max_threads()
    with pytest.raises(ValueError, match=rf"threads=100000 must be in \[1, {limit}\]"):
        Translator(ed_package, threads=100_000)
    with pytest.raises(ValueError, match="inter_threads=1000000 must be in"):
        Translator(ed_package, inter_threads=10**6)
    with pytest.raises(ValueError, match="max_batch_size=1000000000 must be <= "):
        list(Translator(ed_package).translate_iterable(["a"], max_batch_size=10**9))
    for args in (["--threads", "100000"], ["--n-best", "0"], ["--batch-size", "0"],
                 ["--beam", "1000000"], ["--inter-threads", "0"]):  # fmt: skip
        assert main(["translate", str(ed_package), "two dogs .", *args]) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("edgeformer translate: error: ") and len(err.splitlines()) == 1


@functools.lru_cache(maxsize=1)
def _translator(path: str):
    return Translator(path, threads=1)


@hypothesis.settings(
    max_examples=40, deadline=None,
    suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture],
)  # fmt: skip
@hypothesis.given(
    beams=st.one_of(st.integers(-(10**12), 10**12), st.integers(1, 8)),
    penalty=st.floats(allow_nan=True, allow_infinity=True),
)  # fmt: skip
def test_property_beams_and_penalties_are_bounded_or_refused(ed_package, beams, penalty):
    """Any beam count and length penalty: refused with the options' message, or accepted
    within the bounds and then translating with finite scores (the package runs them)."""
    try:
        opts = GenerationOptions(num_beams=beams, length_penalty=penalty, max_new_tokens=4)
    except ValueError as e:
        assert str(e).startswith("invalid generation option: ")
        return
    assert 1 <= opts.num_beams <= MAX_BEAMS and abs(opts.length_penalty) <= 10
    assert (2**20) ** opts.length_penalty < float("inf")  # the score normalisation is finite
    if opts.num_beams <= 8:  # runs: one hypothesis of at most 4 tokens, a finite score
        found = _translator(str(ed_package)).translate_ids_nbest([[5, 6, 7, 2]], opts)[0]
        assert len(found) == 1 and len(found[0].tokens) <= 4
        assert np.isfinite(found[0].score)


# ---------------------------------------------------------------- edgeformer bench's inputs


def _config_json(path, **fields) -> str:
    base = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 4, "vocab_size": 1000}  # fmt: skip
    path.write_text(json.dumps(base | fields))
    return str(path)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--name", "../x"], "--name '../x' must be a plain file name"),
        (["--name", "/tmp/x"], "--name '/tmp/x' must be a plain file name"),
        (["--name", ".."], "must be a plain file name"),
        (["--threads", "100000"], "--threads=100000 must be in [1, "),
        (["--sweep-batches", "0,-1"], "--sweep-batches: 0 must be in [1, 4096]"),
        (["--sweep-batches", "1,x"], "--sweep-batches: 'x' is not a whole number"),
        (["--shapes", "HUGE"], "B parameters"),
        (["--shapes", "STRING"], "transformers cannot make a 'llama' config: "),
        (["--shapes", "DEEP"], "nested too deeply to be a config.json"),
    ],
)
def test_bench_refuses_what_it_cannot_run_before_any_work(args, message, tmp_path, capsys):
    """A results name outside --out, threads or batches out of bounds, and --shapes configs
    that ask for a model no machine holds (a 1 KB file: 4.4 TB of weights), give a size as
    a string or nest 100,000 deep: one line, exit 2, nothing built or written."""
    configs = {
        "HUGE": _config_json(
            tmp_path / "huge.json",
            hidden_size=65536,
            num_attention_heads=512,
            num_key_value_heads=512,
            intermediate_size=1 << 20,
            num_hidden_layers=1000,
            vocab_size=1 << 22,
        ),  # fmt: skip
        "STRING": _config_json(tmp_path / "string.json", hidden_size="64"),
        "DEEP": _config_json(tmp_path / "deep.json"),
    }
    deep = json.loads((tmp_path / "deep.json").read_text())
    text = json.dumps(deep)[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    (tmp_path / "deep.json").write_text(text)
    args = [configs.get(a, a) for a in args]
    out = tmp_path / "out"
    argv = ["bench", "--quick", "--stacks", "edgeformer-fp32", "--workloads", "W1",
            "--memory", "off", "--out", str(out), *args]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not out.exists() and not (tmp_path / "x.json").exists()
