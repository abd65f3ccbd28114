"""Quality of trained packages per variant, with speed: BLEU on Multi30k test_2016_flickr
(translation) and perplexity on the Tiny Shakespeare val split (the last 10 % of input.txt).

Both read the bundled data (edgeformer/train/data). BLEU is sacrebleu's corpus BLEU on
detokenised output, cased and lowercased, greedy. Perplexity runs the package's `decoder` graph
over non-overlapping windows of max_len tokens (every token after a window's first is predicted
once), so it measures exactly what the runtime ships.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np


def multi30k(split: str, lang: str, limit: int | None = None) -> list[str]:
    """The bundled Multi30k split's lines (train.data reads them, as training does)."""
    from edgeformer.train.data import DATA_DIR, multi30k_file, read_lines

    lines = read_lines(multi30k_file(DATA_DIR, split, lang))
    return lines[:limit] if limit else lines


def shakespeare_val() -> str:
    """Tiny Shakespeare's val split, as training splits it (train.data.load_shakespeare)."""
    from edgeformer.train.data import load_shakespeare

    return load_shakespeare()[1]


def direction(package: str | Path) -> tuple[str, str]:
    """(src, tgt) language from the package's config.json `task` (written by the exporter)."""
    import json

    task = json.loads((Path(package) / "config.json").read_text()).get("task") or {}
    if not (task.get("src_lang") and task.get("tgt_lang")):
        raise ValueError(f"{package}: config.json has no task src_lang / tgt_lang")
    return task["src_lang"], task["tgt_lang"]


def bleu(
    package: str | Path,
    variants: list[str] | None = None,
    threads: int = 2,
    limit: int | None = None,
    batch_size: int = 32,
    log=print,
    checkpoint: str | Path | None = None,
) -> dict:
    """{"direction", "sentences", "variants": {v: {bleu, bleu_lc, seconds, sentences_per_s}}}

    With `checkpoint` (the package's source), each variant also reports `same_as_torch`: how
    many greedy translations equal the PyTorch model's greedy translations."""
    import sacrebleu

    from edgeformer.runtime import Translator
    from edgeformer.runtime.package import load_package

    pkg = load_package(package)
    variants = variants or pkg.variants
    # one output cap for every stack, so that "same as PyTorch" compares the same search
    max_new_tokens = pkg.config.max_len - 1
    result: dict = {"package": str(package), "variants": {}}
    src_lang, tgt_lang = direction(package)
    src = multi30k("test_2016_flickr", src_lang, limit)
    refs = multi30k("test_2016_flickr", tgt_lang, limit)
    result.update(direction=f"{src_lang}-{tgt_lang}", sentences=len(src))
    torch_hyps = None
    if checkpoint is not None:
        from edgeformer.models.checkpoint import load_checkpoint
        from edgeformer.train.evaluate import translate_texts
        from edgeformer.train.tokenizer import load_tokenizer

        model, _ = load_checkpoint(checkpoint)
        tok = load_tokenizer(Path(checkpoint) / "tokenizer.json")
        torch_hyps = translate_texts(model, tok, src, 1, batch_size, max_new_tokens)
        result["torch_bleu"] = round(sacrebleu.corpus_bleu(torch_hyps, [refs]).score, 2)
    for v in variants:
        tr = Translator(package, variant=v, provider="cpu", threads=threads)
        t = time.perf_counter()
        hyps = []
        for i in range(0, len(src), batch_size):
            hyps += tr.translate_batch(src[i : i + batch_size], max_new_tokens=max_new_tokens)
        secs = time.perf_counter() - t
        result["variants"][v] = {
            "bleu": round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2),
            "bleu_lc": round(sacrebleu.corpus_bleu(hyps, [refs], lowercase=True).score, 2),
            "seconds": round(secs, 2),
            "sentences_per_s": round(len(src) / secs, 1),
            "example": hyps[0] if hyps else "",
        }
        if torch_hyps is not None:
            same = sum(a == b for a, b in zip(hyps, torch_hyps))
            result["variants"][v]["same_as_torch"] = same
        log(f"  BLEU {v:<13} {result['variants'][v]['bleu']:6.2f}  ({secs:.1f} s)")
    return result


def perplexity(
    package: str | Path,
    variants: list[str] | None = None,
    threads: int = 2,
    limit: int | None = None,
    batch_size: int = 64,
    log=print,
) -> dict:
    """{"tokens", "variants": {v: {loss, ppl, seconds, tokens_per_s}}} on Shakespeare val."""
    from tokenizers import Tokenizer

    from edgeformer.runtime import Generator
    from edgeformer.runtime.package import load_package

    pkg = load_package(package)
    variants = variants or pkg.variants
    T = pkg.config.max_len
    tok = Tokenizer.from_file(str(Path(package) / "tokenizer.json"))
    lines = shakespeare_val().splitlines(keepends=True)  # as edgeformer.train's encode_stream
    enc = tok.encode_batch(lines, add_special_tokens=False)
    ids = np.asarray([i for e in enc for i in e.ids], np.int64)
    windows = [ids[s : s + T + 1].tolist() for s in range(0, len(ids) - 1, T)]
    windows = [w for w in windows if len(w) > 1][:limit] if limit else windows
    result: dict = {"package": str(package), "windows": len(windows), "variants": {}}
    for v in variants:
        gen = Generator(package, variant=v, provider="cpu", threads=threads)
        t = time.perf_counter()
        nll, count = 0.0, 0
        for b in range(0, len(windows), batch_size):  # the runtime's step loop, teacher-forced
            for logp in gen.score_ids(windows[b : b + batch_size]):
                nll -= float(logp.sum())
                count += len(logp)
        secs = time.perf_counter() - t
        loss = nll / max(count, 1)
        result["tokens"] = count
        result["variants"][v] = {
            "loss": round(loss, 4),
            "ppl": round(math.exp(loss), 3),
            "seconds": round(secs, 2),
            "tokens_per_s": round(count / secs, 1),
        }
        log(f"  PPL  {v:<13} {math.exp(loss):8.3f}  (loss {loss:.4f}, {secs:.1f} s)")
    return result
