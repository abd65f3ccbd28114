"""Bundled data loading and its errors."""

from __future__ import annotations

import gzip

import pytest

from edgeformer.core.data import load_multi30k, load_shakespeare


def write(path, lines, gz=False):
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(line + "\n" for line in lines)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")


def test_bundled_multi30k_both_directions():
    en, de = load_multi30k("val", "en", "de")
    de2, en2 = load_multi30k("val", "de", "en")
    assert len(en) == len(de) == 1014 and en == en2 and de == de2
    assert len(load_multi30k("test_2016_flickr", max_sentences=10)[0]) == 10


def test_bundled_shakespeare_split():
    train, val = load_shakespeare()
    assert train.startswith("First Citizen")
    assert len(train) // 9 == pytest.approx(len(val), rel=1e-3)


def test_plain_and_gzip_files(tmp_path):
    write(tmp_path / "multi30k/val.en.gz", ["a b", "", "c d"], gz=True)
    write(tmp_path / "multi30k/val.de", ["x y", "z", "w"])
    src, tgt = load_multi30k("val", "en", "de", data_dir=tmp_path)
    assert src == ["a b", "c d"] and tgt == ["x y", "w"]  # pair with an empty side dropped


def test_missing_file_names_it(tmp_path):
    write(tmp_path / "multi30k/train.en", ["a"])
    with pytest.raises(FileNotFoundError, match=r"train\.de"):
        load_multi30k("train", "en", "de", data_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="input.txt"):
        load_shakespeare(tmp_path)
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_multi30k("train", data_dir=tmp_path / "nowhere")


def test_empty_and_misaligned_datasets(tmp_path):
    write(tmp_path / "multi30k/train.en", ["", "  "])
    write(tmp_path / "multi30k/train.de", ["a", "b"])
    with pytest.raises(ValueError, match=r"empty dataset: .*train\.en"):
        load_multi30k("train", "en", "de", data_dir=tmp_path)
    write(tmp_path / "multi30k/val.en", ["a", "b"])
    write(tmp_path / "multi30k/val.de", ["a"])
    with pytest.raises(ValueError, match="not aligned"):
        load_multi30k("val", "en", "de", data_dir=tmp_path)
    write(tmp_path / "tinyshakespeare/input.txt", ["", ""])
    with pytest.raises(ValueError, match="empty dataset"):
        load_shakespeare(tmp_path)


def test_bad_split_and_direction():
    with pytest.raises(ValueError, match="split"):
        load_multi30k("dev")
    with pytest.raises(ValueError, match="direction"):
        load_multi30k("val", "en", "fr")
