"""Quality of trained packages per variant, with speed: BLEU on Multi30k test_2016_flickr
(translation) and perplexity on the Tiny Shakespeare val split (the last 10 % of input.txt).

Both read the bundled data (core.data) and score through edgeformer.export.quality,
the functions export uses for its held-out measurements: sacreBLEU on detokenised greedy
output, cased and lowercased; perplexity through the package's `decoder` graph over
non-overlapping windows of max_len tokens, so it measures exactly what the runtime ships.
"""

from __future__ import annotations

import math
import time
from pathlib import Path


def multi30k(split: str, lang: str, limit: int | None = None) -> list[str]:
    """The bundled Multi30k split's lines (core.data reads them, as training does)."""
    from edgeformer.core.data import DATA_DIR, multi30k_file, read_lines

    lines = read_lines(multi30k_file(DATA_DIR, split, lang))
    return lines[:limit] if limit else lines


def shakespeare_val() -> str:
    """Tiny Shakespeare's val split, as training splits it (core.data.load_shakespeare)."""
    from edgeformer.core.data import load_shakespeare

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
    from edgeformer.core.metrics import bleu_scores
    from edgeformer.export.quality import translation_bleu  # imports torch: only when asked

    from ..runtime.package import load_package

    pkg = load_package(package)
    variants = variants or pkg.variants
    # one output cap for every stack, so that "same as PyTorch" compares the same search
    max_new_tokens = pkg.config.model.max_len - 1
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
        result["torch_bleu"] = bleu_scores(torch_hyps, refs)["bleu"]
    for v in variants:
        t = time.perf_counter()
        scores, hyps = translation_bleu(package, v, src, refs, threads, batch_size)
        secs = time.perf_counter() - t
        result["variants"][v] = {
            "bleu": scores["bleu"],
            "bleu_lc": scores["bleu_lc"],
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
    from edgeformer.export.quality import text_windows, windows_perplexity

    from ..runtime.package import load_package

    variants = variants or load_package(package).variants
    windows = text_windows(package, shakespeare_val(), limit)
    result: dict = {"package": str(package), "windows": len(windows), "variants": {}}
    for v in variants:
        t = time.perf_counter()
        scored = windows_perplexity(package, v, windows, threads, batch_size)
        secs = time.perf_counter() - t
        loss, count = scored["loss"], scored["tokens"]
        result["tokens"] = count
        result["variants"][v] = {
            "loss": round(loss, 4),
            "ppl": round(math.exp(loss), 3),
            "seconds": round(secs, 2),
            "tokens_per_s": round(count / secs, 1),
        }
        log(f"  PPL  {v:<13} {math.exp(loss):8.3f}  (loss {loss:.4f}, {secs:.1f} s)")
    return result
