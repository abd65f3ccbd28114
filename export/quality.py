"""Quality of a package's variants on held-out data: BLEU (translation) and perplexity (LM),
through the runtime's own decoding and scoring, so it measures exactly what ships.

Export records them per variant (`measured`, read by variant="auto") when the checkpoint was
trained on the bundled data (core.data.TrainingData): a Multi30k translator gets BLEU on the
validation pairs of its direction (all 1,014: on 200, a variant 1.4 BLEU worse on the test set
measured 0.3 worse), a Tiny Shakespeare LM perplexity on the first HELD_OUT_WINDOWS windows of
the validation split. The benchmark's quality rows use the same functions on the test set and
the whole validation split. GPTQ's calibration examples come from the training split here too.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

from ..core.data import (
    CONVERTED_WINDOW_TOKENS,
    CONVERTED_WINDOWS,
    HELD_OUT_WINDOWS,
    TrainingData,
    held_out_description,
    load_multi30k,
    load_shakespeare,
)
from ..core.format import TOKENIZER_FILE
from ..core.metrics import bleu_scores, windows
from ..core.progress import Progress

# HELD_OUT_WINDOWS; a converted LM (no bundled training data): perplexity on the first
# CONVERTED_WINDOWS windows of Tiny Shakespeare's validation split (public domain, bundled), in
# its own tokens (core.data, whose held_out_description says what each figure is measured on)


def translation_bleu(
    package: str | Path,
    variant: str,
    sources: list[str],
    refs: list[str],
    threads: int | None = None,
    batch_size: int = 32,
    verbose: bool = False,
) -> tuple[dict, list[str]]:
    """(cased and lowercased sacreBLEU of greedy translations, the translations). Each
    translation may use the model's whole length (max_new_tokens=None, as training's BLEU)."""
    from ..runtime import Translator

    tr = Translator(package, variant=variant, provider="cpu", threads=threads)
    bar = Progress(f"{variant}: held-out BLEU", len(sources), "sentences", quiet=not verbose)
    hyps = list(bar.iterate(tr.translate_iterable(sources, batch_size, truncate=True)))
    bar.close()
    return bleu_scores(hyps, refs), hyps


def line_ids(tokenizer_json: str | Path, text: str) -> list[int]:
    """`text` in a tokenizer's ids, line by line (its line ends kept, as training encodes it),
    no special tokens: the stream perplexity windows and calibration windows are cut from."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_json))
    enc = tok.encode_batch(text.splitlines(keepends=True), add_special_tokens=False)
    return [i for e in enc for i in e.ids]


def text_windows(
    package: str | Path, text: str, limit: int | None = None, tokens: int | None = None
) -> list[list[int]]:
    """`text` in the package's ids (line_ids) cut into non-overlapping windows of T + 1 tokens
    (core.metrics.windows), T = `tokens` or the model's max_len."""
    from ..runtime.package import load_package

    T = load_package(package, verify=False).config.model.max_len
    T = T if tokens is None else min(tokens, T)
    return windows(line_ids(Path(package) / TOKENIZER_FILE, text), T, limit)


def windows_perplexity(
    package: str | Path,
    variant: str,
    windows: list[list[int]],
    threads: int | None = None,
    batch_size: int = 64,
    verbose: bool = False,
) -> dict:
    """{"loss", "ppl", "tokens"}: teacher-forced through the runtime's step loop."""
    from ..runtime import Generator

    gen = Generator(package, variant=variant, provider="cpu", threads=threads)
    nll, count = 0.0, 0
    bar = Progress(f"{variant}: held-out perplexity", len(windows), "windows", quiet=not verbose)
    for b in bar.iterate(range(0, len(windows), batch_size)):
        for logp in gen.score_ids(windows[b : b + batch_size]):
            nll -= float(logp.sum())
            count += len(logp)
    bar.close()
    loss = nll / max(count, 1)
    return {"loss": loss, "ppl": math.exp(loss), "tokens": count}


def held_out_quality(
    package: Path, data: TrainingData | None, variants: list[str], verbose: bool = True
) -> dict:
    """{variant: {"bleu": ...} or {"perplexity": ...}} on the held-out split of the bundled data
    the checkpoint was trained on; for a converted LM (a Hugging Face folder, a GGUF file),
    perplexity on CONVERTED_WINDOWS windows of Tiny Shakespeare's validation split; {} when
    there is none (a converted translator, a run on the user's own data)."""

    def say(message: str) -> None:
        if verbose:
            print(message, file=sys.stderr, flush=True)

    if data is None:
        from ..runtime.package import load_package

        config = load_package(package, verify=False).config
        if config.family != "decoder-only" or not config.source:
            return {}
        held = text_windows(package, load_shakespeare()[1], CONVERTED_WINDOWS,
                            CONVERTED_WINDOW_TOKENS)  # fmt: skip
        out = {}
        for v in variants:
            out[v] = {"perplexity": windows_perplexity(package, v, held, verbose=verbose)["ppl"]}
            what = held_out_description("perplexity", converted=True)
            say(f"{v}: held-out perplexity {out[v]['perplexity']:.3f} ({what})")
        return out
    if not data.held_out:
        return {}

    out = {}
    if data.dataset == "multi30k":
        assert data.src_lang is not None and data.tgt_lang is not None
        src, refs = load_multi30k("val", data.src_lang, data.tgt_lang)
        for v in variants:
            out[v] = {"bleu": translation_bleu(package, v, src, refs, verbose=verbose)[0]["bleu"]}
            what = held_out_description("bleu", pair=f"{data.src_lang}-{data.tgt_lang}")
            say(f"{v}: held-out BLEU {out[v]['bleu']:.2f} ({what}: {len(src):,} sentences)")
        return out
    held = text_windows(package, load_shakespeare()[1], HELD_OUT_WINDOWS)
    for v in variants:
        out[v] = {"perplexity": windows_perplexity(package, v, held, verbose=verbose)["ppl"]}
        say(f"{v}: held-out perplexity {out[v]['perplexity']:.3f} "
            f"({held_out_description('perplexity')})")  # fmt: skip
    return out


# GPTQ on a text (`calibrate`, a converted LM): windows of up to CALIBRATION_WINDOW_TOKENS
# tokens spread over the text, CALIBRATION_TOKENS in all
CALIBRATION_TOKENS, CALIBRATION_WINDOW_TOKENS = 16_384, 256
CALIBRATION_TEXTS = ("shakespeare", "multi30k")  # bundled: their training splits


def calibration_text(name: str | Path) -> tuple[str, str]:
    """(text, what it is) for GPTQ: a bundled text by name (Tiny Shakespeare's training split,
    Multi30k's English training captions: never a split export's held-out check reads) or a
    UTF-8 text file."""
    if str(name) == "shakespeare":
        return load_shakespeare()[0], "Tiny Shakespeare's training split"
    if str(name) == "multi30k":
        return "\n".join(load_multi30k("train", "en", "de")[0]) + "\n", "Multi30k's English train"
    path = Path(name)
    if not path.is_file():
        raise FileNotFoundError(
            f"calibration text {str(name)!r}: no such file (or a bundled text: "
            f"{', '.join(CALIBRATION_TEXTS)})"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"calibration text {path}: not UTF-8 text ({e.reason} at byte {e.start})"
        ) from None
    return text, path.name


def text_calibration_batches(model, tokenizer_json: Path, text: str, what: str):
    """(model(*batch) inputs, what they are): CALIBRATION_TOKENS tokens of `text` in windows of
    min(max_len, CALIBRATION_WINDOW_TOKENS) spread over it; a decoder-only model only."""
    cfg = model.cfg
    if cfg.family != "decoder-only":
        raise ValueError(
            "a calibration text is for a decoder-only model (a translator's GPTQ uses its "
            "training pairs)"
        )
    stream = np.asarray(line_ids(tokenizer_json, text), dtype=np.int64)
    T = min(cfg.max_len, CALIBRATION_WINDOW_TOKENS)
    if len(stream) < T:
        raise ValueError(f"calibration text {what}: {len(stream)} tokens, fewer than a window "
                         f"of {T}")  # fmt: skip
    n = max(1, min(CALIBRATION_TOKENS // T, len(stream) // T))
    x = spread_windows(stream, T, n)
    return [(x[b : b + 8],) for b in range(0, n, 8)], f"GPTQ on {n * T:,} tokens of {what}"


def spread_windows(stream: np.ndarray, T: int, n: int):
    """(n, T) int64 tensor: n windows of T tokens of `stream`, spread evenly over it."""
    import torch

    starts = np.linspace(0, len(stream) - T, n).astype(np.int64)
    return torch.from_numpy(np.stack([stream[s : s + T] for s in starts]))


def calibration_batches(
    model, checkpoint_dir: Path, data: TrainingData | None, examples: int
) -> tuple[list[tuple], str] | None:
    """(model(*batch) inputs, what they are) from the first `examples` training examples of the
    bundled data the checkpoint was trained on (GPTQ's calibration, export/gptq.py); None when
    there is none (as held_out_quality). Never the validation split, which the held-out check
    reads."""
    from tokenizers import Tokenizer

    from ..models.batch import collate, make_pairs

    if data is None or not data.bundled:
        return None
    tok = Tokenizer.from_file(str(checkpoint_dir / TOKENIZER_FILE))
    cfg = model.cfg

    def encode(texts: list[str]) -> list[list[int]]:
        return [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]

    if data.dataset == "multi30k":
        assert data.src_lang is not None and data.tgt_lang is not None
        src, tgt = load_multi30k("train", data.src_lang, data.tgt_lang, None, examples)
        pairs, _ = make_pairs(encode(src), encode(tgt), cfg.max_len, cfg.eos_id)
        ids = (cfg.pad_id, cfg.bos_id, cfg.eos_id)
        batches = [tuple(collate(pairs[b : b + 64], *ids)[:2]) for b in range(0, len(pairs), 64)]
        return batches, f"GPTQ on {len(pairs)} training pairs"
    lines = load_shakespeare()[0].splitlines(keepends=True)
    stream = np.asarray([i for ids in encode(lines) for i in ids], dtype=np.int64)
    T = cfg.max_len
    n = min(examples, len(stream) // T)  # windows of T tokens, spread over the split
    x = spread_windows(stream, T, n)
    return [(x[b : b + 32],) for b in range(0, n, 32)], f"GPTQ on {n * T} training tokens"
