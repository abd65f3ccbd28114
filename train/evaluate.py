"""Evaluation of checkpoints: BLEU on Multi30k for translation, loss / perplexity for an LM.

BLEU and perplexity windows are core.metrics' (the same as export's held-out check and the
benchmark's); decoding goes through edgeformer.models.translate_ids (core.decoding's greedy /
beam search over the PyTorch model).
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from edgeformer.core.data import load_multi30k, load_shakespeare
from edgeformer.core.decoding import GenerationOptions
from edgeformer.core.metrics import bleu_scores, windows
from edgeformer.core.progress import Progress
from edgeformer.models import complete_ids, translate_ids
from edgeformer.models.checkpoint import load_checkpoint

from .tokenizer import EOS_ID, encode, encode_stream, load_tokenizer


@torch.no_grad()
def translate_texts(
    model,
    tok: Tokenizer,
    sources: list[str],
    beams: int = 1,
    batch_size: int = 64,
    max_new_tokens: int | None = None,
    progress: str | None = None,
) -> list[str]:
    """Detokenised translations of `sources`, batched by length, in the input order.

    max_new_tokens: None = as many as the model's positions allow, as the runtime and
    export's held-out BLEU decode, so that the figures agree. progress: a label to show
    progress under (core.progress), when the caller wants it.
    """
    model.eval()
    max_len = model.cfg.max_len
    ids = [s + [EOS_ID] for s in encode(tok, sources)]
    too_long = [i for i, s in enumerate(ids) if len(s) > max_len]
    if too_long:
        raise ValueError(
            f"{len(too_long)} source sentences (e.g. #{too_long[0]}) are longer than the "
            f"model's max_len={max_len} tokens; they are not truncated"
        )
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out: list[str] = [""] * len(ids)
    bar = Progress(progress or "", len(ids), "sentences", quiet=progress is None)
    for b in range(0, len(order), batch_size):
        chunk = order[b : b + batch_size]
        opts = GenerationOptions(max_new_tokens=max_new_tokens, num_beams=beams)
        for i, hyp in zip(chunk, translate_ids(model, [ids[i] for i in chunk], opts)):
            out[i] = tok.decode(hyp)
        bar.advance(len(chunk))
    bar.close()
    return out


def evaluate_translation(
    checkpoint_dir: str | os.PathLike,
    split: str = "test_2016_flickr",
    beams: tuple[int, ...] = (1, 5),
    batch_size: int = 64,
    data_dir: str | os.PathLike | None = None,
    device: str = "cpu",
    max_sentences: int | None = None,
) -> dict:
    """BLEU of a translation checkpoint on a Multi30k split, per beam size.

    -> {"split", "direction", "sentences", "greedy"/"beam5": {"bleu", "bleu_lc", "seconds"}, ...}
    """
    model, config = load_checkpoint(checkpoint_dir, device)
    task = config.get("task", {})
    if task.get("kind") != "translation":
        raise ValueError(f"{checkpoint_dir} is not a translation checkpoint (task={task})")
    tok = load_tokenizer(Path(checkpoint_dir) / "tokenizer.json")
    src, ref = load_multi30k(split, task["src_lang"], task["tgt_lang"], data_dir, max_sentences)
    result: dict[str, Any] = {
        "split": split,
        "direction": f"{task['src_lang']}-{task['tgt_lang']}",
        "sentences": len(src),
    }
    for k in beams:
        t0 = time.time()
        hyps = translate_texts(model, tok, src, beams=k, batch_size=batch_size)
        name = "greedy" if k == 1 else f"beam{k}"
        result[name] = {**bleu_scores(hyps, ref), "seconds": round(time.time() - t0, 1)}
        result[name]["examples"] = [
            {"source": s, "reference": r, "prediction": h} for s, r, h in zip(src, ref, hyps)
        ][:3]
    return result


@torch.no_grad()
def evaluate_lm(
    checkpoint_dir: str | os.PathLike,
    data_dir: str | os.PathLike | None = None,
    device: str = "cpu",
    batch_size: int = 32,
) -> dict:
    """Loss and perplexity of an LM checkpoint on the whole Tiny Shakespeare val split, in
    non-overlapping windows of max_len tokens (every token after the first is predicted once).

    -> {"val_loss", "ppl", "tokens"}"""
    model, config = load_checkpoint(checkpoint_dir, device)
    if config.get("task", {}).get("kind") != "lm":
        raise ValueError(f"{checkpoint_dir} is not a language-model checkpoint")
    tok = load_tokenizer(Path(checkpoint_dir) / "tokenizer.json")
    ids = np.asarray(encode_stream(tok, load_shakespeare(data_dir)[1]), dtype=np.int64)
    T = model.cfg.max_len
    held = windows(ids.tolist(), T)
    full = [w for w in held if len(w) == T + 1]
    groups = [full[b : b + batch_size] for b in range(0, len(full), batch_size)]
    groups += [[w] for w in held if len(w) != T + 1]  # the short last window on its own
    total, count = 0.0, 0
    for group in groups:
        x = torch.tensor([w[:-1] for w in group], device=device)  # (B, T)
        y = torch.tensor([w[1:] for w in group], device=device)
        logits, _ = model(x)
        total += float(F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="sum"))
        count += y.numel()
    loss = total / count
    return {"val_loss": round(loss, 4), "ppl": round(math.exp(loss), 3), "tokens": count}


def lm_samples(model, tok: Tokenizer, n: int = 4, seed: int = 0, prompt: str = "\n") -> list[str]:
    """`n` continuations of `prompt` sampled at temperature 0.8 (top-k 200), up to max_len."""
    model.eval()
    prompt_ids = encode(tok, [prompt])[0] or [0]
    opts = GenerationOptions(
        max_new_tokens=model.cfg.max_len - len(prompt_ids),
        sampling=True,
        temperature=0.8,
        top_k=200,
        seed=seed,
        ignore_eos=True,
    )
    outs = complete_ids(model, [prompt_ids] * n, opts)
    return [(prompt + tok.decode(o)).strip("\n") for o in outs]
