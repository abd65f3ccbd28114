"""Quality of a package's variants on held-out data: BLEU (translation) and perplexity (LM),
through the runtime's own decoding and scoring, so it measures exactly what ships.

Export records them per variant (`measured`, read by variant="auto") when the checkpoint was
trained on data that is bundled: a Multi30k translator gets BLEU on the validation pairs of
its direction (all 1,014: on 200, a variant 1.4 BLEU worse on the test set measured 0.3 worse),
a Tiny Shakespeare LM perplexity on the first HELD_OUT_WINDOWS windows of the validation
split. The bench's quality rows use the same functions on the test set and whole validation
split.
"""

from __future__ import annotations

import math
from pathlib import Path

HELD_OUT_WINDOWS = 256


def translation_bleu(
    package: str | Path,
    variant: str,
    sources: list[str],
    refs: list[str],
    threads: int | None = None,
    batch_size: int = 32,
) -> tuple[dict, list[str]]:
    """(cased and lowercased sacreBLEU of greedy translations, the translations); output cap
    max_len - 1 (the model's whole target length)."""
    from edgeformer.runtime import Translator
    from edgeformer.train.evaluate import bleu_scores

    tr = Translator(package, variant=variant, provider="cpu", threads=threads)
    cap = tr.max_len - 1
    hyps = list(tr.translate_iterable(sources, batch_size, truncate=True, max_new_tokens=cap))
    return bleu_scores(hyps, refs), hyps


def text_windows(package: str | Path, text: str, limit: int | None = None) -> list[list[int]]:
    """`text` tokenized line by line (as training encodes it) and cut into non-overlapping
    windows of max_len + 1 tokens: every token after a window's first is predicted once."""
    import numpy as np
    from tokenizers import Tokenizer

    from ..runtime.package import load_package

    T = load_package(package, verify=False).config.model.max_len
    tok = Tokenizer.from_file(str(Path(package) / "tokenizer.json"))
    enc = tok.encode_batch(text.splitlines(keepends=True), add_special_tokens=False)
    ids = np.asarray([i for e in enc for i in e.ids], np.int64)
    windows = [ids[s : s + T + 1].tolist() for s in range(0, len(ids) - 1, T)]
    windows = [w for w in windows if len(w) > 1]
    return windows[:limit] if limit else windows


def windows_perplexity(
    package: str | Path,
    variant: str,
    windows: list[list[int]],
    threads: int | None = None,
    batch_size: int = 64,
) -> dict:
    """{"loss", "ppl", "tokens"}: teacher-forced through the runtime's step loop."""
    from edgeformer.runtime import Generator

    gen = Generator(package, variant=variant, provider="cpu", threads=threads)
    nll, count = 0.0, 0
    for b in range(0, len(windows), batch_size):
        for logp in gen.score_ids(windows[b : b + batch_size]):
            nll -= float(logp.sum())
            count += len(logp)
    loss = nll / max(count, 1)
    return {"loss": loss, "ppl": math.exp(loss), "tokens": count}


def held_out_quality(package: Path, checkpoint_config: dict, variants: list[str]) -> dict:
    """{variant: {"bleu": ...} or {"perplexity": ...}} on the checkpoint's held-out data; {}
    when it has none (a converted Hugging Face model, a run on other data, no train extra)."""
    task = checkpoint_config.get("task") or {}
    train = checkpoint_config.get("train") or {}
    if train.get("data_dir") is not None:  # trained on other data than the bundled
        return {}
    try:
        from edgeformer.train.data import load_multi30k, load_shakespeare
    except ImportError:
        return {}
    if task.get("kind") == "translation" and task.get("src_lang") and task.get("tgt_lang"):
        src, refs = load_multi30k("val", task["src_lang"], task["tgt_lang"])
        return {v: {"bleu": translation_bleu(package, v, src, refs)[0]["bleu"]} for v in variants}
    if task.get("kind") == "lm" and train.get("tokenizer") == "char":
        windows = text_windows(package, load_shakespeare()[1], HELD_OUT_WINDOWS)
        return {v: {"perplexity": windows_perplexity(package, v, windows)["ppl"]} for v in variants}
    return {}


def calibration_batches(
    model, checkpoint_dir: Path, checkpoint_config: dict, examples: int
) -> tuple[list[tuple], str] | None:
    """(model(*batch) inputs, what they are) from the first `examples` training examples of
    the checkpoint's bundled data (GPTQ's calibration, export/gptq.py); None when it has none
    (as held_out_quality). Never the validation split, which the held-out check reads."""
    import numpy as np
    import torch

    task = checkpoint_config.get("task") or {}
    train = checkpoint_config.get("train") or {}
    if not train or train.get("data_dir") is not None:  # not trained here, or on other data
        return None
    try:
        from edgeformer.train.data import load_multi30k, load_shakespeare
        from edgeformer.train.tokenizer import encode, encode_stream, load_tokenizer
        from edgeformer.train.trainer import collate, make_pairs
    except ImportError:
        return None
    if task.get("kind") == "translation" and task.get("src_lang") and task.get("tgt_lang"):
        tok = load_tokenizer(checkpoint_dir / "tokenizer.json")
        src, tgt = load_multi30k("train", task["src_lang"], task["tgt_lang"], None, examples)
        pairs, _ = make_pairs(encode(tok, src), encode(tok, tgt), model.cfg.max_len)
        batches = [tuple(collate(pairs[b : b + 64])[:2]) for b in range(0, len(pairs), 64)]
        return batches, f"GPTQ on {len(pairs)} training pairs"
    if task.get("kind") == "lm" and train.get("tokenizer") == "char":
        tok = load_tokenizer(checkpoint_dir / "tokenizer.json")
        ids = np.asarray(encode_stream(tok, load_shakespeare()[0]), dtype=np.int64)
        T = model.cfg.max_len
        n = min(examples, len(ids) // T)  # windows of T tokens, spread over the split
        starts = np.linspace(0, len(ids) - T, n).astype(np.int64)
        x = torch.from_numpy(np.stack([ids[s : s + T] for s in starts]))
        return [(x[b : b + 32],) for b in range(0, n, 32)], f"GPTQ on {n * T} training tokens"
    return None
