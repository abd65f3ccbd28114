"""The training loops: translation (Multi30k, epochs of token-count batches) and language
modelling (Tiny Shakespeare, nanoGPT-style random windows and iterations).

    OUT/best/       checkpoint with the lowest validation loss
    OUT/last/       latest checkpoint + train_state.safetensors / train_state.json (--resume)
    OUT/averaged/   mean of the weights of the last `average_last` evaluations
    OUT/epochs/     the weights being averaged (epoch_NNN.safetensors)
    OUT/log.jsonl   one JSON line per epoch (LM: per evaluation) and a final summary
    OUT/loss.png    train / val loss curves
    OUT/samples.md  translations (source | reference | prediction) or generated text

OUT must be missing or empty for a new run: one that holds a run (or anything else) is refused
before anything is touched (check_out). With --force a run folder is replaced, safely: the new
run trains in a staging folder beside OUT (core.files.staging_folder) that takes OUT's place
once its first checkpoint is saved (take_place); until then OUT holds the older run, whole.

Resuming is exact: the data order and the dropout RNG are reseeded from (seed, epoch) at the
start of each epoch, and the optimizer state is saved as tensors, so no RNG state is stored.

The loops' parts have their own modules: batches.py (token-count batches, LM windows),
loss.py (the one-pass smoothed / distillation loss), state.py (optimizer, schedule, train
state), run_folder.py (OUT, its lock, --force, the checkpoints saved into it), teacher.py
(what a teacher gives a student).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn

from edgeformer.core.data import CHECKPOINT_KEY, load_multi30k, load_shakespeare
from edgeformer.core.metrics import bleu_scores
from edgeformer.models import DecoderOnly, EncoderDecoder, ModelConfig, build_model
from edgeformer.models.batch import collate, make_pairs
from edgeformer.models.checkpoint import (
    load_checkpoint,
)

from .batches import get_batch, pair_lengths, token_batches
from .config import TrainConfig
from .distill import (
    check_distilled,
    checkpoint_teacher,
)
from .evaluate import lm_samples, translate_texts
from .loss import smoothed_loss
from .run_folder import Run, close_out, restore, save_averaged, save_epoch, setup
from .state import lr_at, make_optimizer, optimize
from .teacher import distilled_pairs, start_from_teacher, teacher_topk
from .tokenizer import (
    PAD_ID,
    encode,
    encode_stream,
    load_tokenizer,
    train_bpe,
    train_char,
)


def prepare_tokenizer(run: Run, texts: list[str]):
    """The resumed checkpoint's tokenizer, or a new one trained by rank 0 -> OUT/tokenizer.json."""
    cfg, path = run.cfg, run.out / "tokenizer.json"
    if cfg.resume is not None:
        path = Path(cfg.resume) / "tokenizer.json"
    elif run.main:
        if cfg.tokenizer == "char":
            train_char("".join(texts), path)
        else:
            train_bpe(texts, cfg.model.vocab_size, path, cfg.lowercase)
    run.barrier()
    return load_tokenizer(path), path


def build(run: Run, vocab_size: int) -> tuple[EncoderDecoder | DecoderOnly, ModelConfig]:
    """The model: from the resumed checkpoint's config.json, else from the TrainConfig."""
    cfg = run.cfg
    if cfg.resume is not None:
        model, config = load_checkpoint(cfg.resume)
        return model.to(run.device), ModelConfig.from_dict(config["model"])
    mcfg = cfg.model_config(vocab_size)
    torch.manual_seed(cfg.seed)
    model = build_model(mcfg)
    return model.to(run.device), mcfg


def epoch_line(run: Run, r: dict, total: int, unit: str = "epoch") -> str:
    parts = [f"{unit} {r[unit]}/{total}", f"train {r['train_loss']:.3f}"]
    parts += [f"val {r['val_loss']:.3f}", f"ppl {r['ppl']:.1f}"]
    if r.get("bleu") is not None:
        parts.append(f"bleu{' (lc)' if run.cfg.lowercase else ''} {r['bleu']:.1f}")
    parts += [f"lr {r['lr']:.2e}", f"{r['tokens_per_s']:,.0f} tok/s"]
    parts.append(
        time.strftime("%M:%S" if r["elapsed"] < 3600 else "%H:%M:%S", time.gmtime(r["elapsed"]))
    )
    return " | ".join(parts)


def plot_losses(history: list[dict], path: Path, unit: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [r[unit] for r in history]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(x, [r["train_loss"] for r in history], "o-", label="train")
    ax.plot(x, [r["val_loss"] for r in history], "o-", label="val")
    ax.set_xlabel(unit)
    ax.set_ylabel("loss")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def wrap(run: Run, model: nn.Module) -> nn.Module:
    if run.world == 1:
        return model
    ids = [run.device.index] if run.device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=ids)


def train(cfg: TrainConfig, force: bool = False) -> nn.Module:
    """Train by `cfg` (see module docstring for the outputs); returns the trained model.
    `force`: a new run replaces the run in OUT, once it has saved its first checkpoint."""
    cfg.check_teacher()
    if cfg.init_from_teacher and cfg.resume is None:  # a package teacher fails before OUT is made
        checkpoint_teacher(Path(str(cfg.teacher)))
    if cfg.distilled is not None:
        check_distilled(Path(cfg.distilled), cfg.src_lang, cfg.tgt_lang)
    run = setup(cfg, force)
    try:
        return train_lm(run) if cfg.task == "lm" else train_translation(run)
    finally:
        close_out(run)
        if run.world > 1 and dist.is_initialized():
            dist.destroy_process_group()


@torch.no_grad()
def translation_val_loss(run: Run, model: nn.Module, pairs) -> float:
    """Mean NLL (no smoothing) per target token over `pairs`."""
    model.eval()
    total, count = 0.0, 0
    for idx in token_batches(pair_lengths(pairs), run.cfg.batch_tokens):
        src, tgt_in, tgt_out = (x.to(run.device) for x in collate([pairs[i] for i in idx]))
        with run.autocast():
            logits = model(src, tgt_in)
        n = int((tgt_out != PAD_ID).sum())
        total += float(smoothed_loss(logits, tgt_out)) * n
        count += n
    return total / count


def train_translation(run: Run) -> nn.Module:
    cfg = run.cfg
    train_src, train_tgt = load_multi30k(
        "train", cfg.src_lang, cfg.tgt_lang, cfg.data_dir, cfg.max_sentences
    )
    shrink = cfg.init_from_teacher and cfg.resume is None
    if cfg.teacher is not None:
        train_src, train_tgt = distilled_pairs(run, train_src, train_tgt)
    val_src, val_tgt = load_multi30k("val", cfg.src_lang, cfg.tgt_lang, cfg.data_dir)
    if shrink:
        tok, tok_path, model, mcfg = start_from_teacher(run, Path(str(cfg.teacher)))
        cfg = run.cfg
    else:
        tok, tok_path = prepare_tokenizer(run, train_src + train_tgt)
        model, mcfg = build(run, tok.get_vocab_size())
    train_pairs, dropped = make_pairs(encode(tok, train_src), encode(tok, train_tgt), mcfg.max_len)
    val_pairs, val_dropped = make_pairs(encode(tok, val_src), encode(tok, val_tgt), mcfg.max_len)
    if dropped or val_dropped:
        run.say(
            f"filtered out {dropped} train / {val_dropped} val pairs longer than "
            f"max_len={mcfg.max_len} (val loss and BLEU are on the rest)"
        )
    if not train_pairs:
        raise ValueError(f"empty dataset: no training pair fits max_len={mcfg.max_len}")
    bleu_n = min(cfg.bleu_sentences, len(val_src))
    fits = [len(ids) < mcfg.max_len for ids in encode(tok, val_src)]
    bleu_idx = [i for i, ok in enumerate(fits) if ok]
    bleu_src = [val_src[i] for i in bleu_idx[:bleu_n]]
    bleu_ref = [val_tgt[i] for i in bleu_idx[:bleu_n]]
    meta = {
        "task": {"kind": "translation", "src_lang": cfg.src_lang, "tgt_lang": cfg.tgt_lang},
        "train": cfg.to_dict(),
        CHECKPOINT_KEY: cfg.training_data().to_json(),
    }
    run.say(
        f"translation {cfg.direction}: {len(train_pairs):,} train pairs, {len(val_pairs):,} "
        f"val, vocab {tok.get_vocab_size():,}, {model.num_params() / 1e6:.2f}M parameters, "
        f"{run.device}" + (f" x {run.world} processes" if run.world > 1 else "")
    )
    if bleu_n:
        run.say(f"bleu: {bleu_label(cfg, len(bleu_src))}")

    optimizer = make_optimizer(model, cfg)
    state = restore(run, optimizer)
    ddp = wrap(run, model)
    kd = teacher_topk(run, train_pairs) if cfg.word_kd else None
    lengths = pair_lengths(train_pairs)
    steps_per_epoch = len(token_batches(lengths, cfg.batch_tokens)) // run.world
    total_steps = cfg.epochs * steps_per_epoch
    step = state["step"]
    for epoch in range(state["epoch"], cfg.epochs):
        torch.manual_seed(cfg.seed + 1000 * (epoch + 1) + run.rank)  # dropout
        batches = token_batches(lengths, cfg.batch_tokens, seed=cfg.seed + epoch)
        batches = batches[: len(batches) // run.world * run.world][run.rank :: run.world]
        ddp.train()
        t_epoch, loss_sum, tok_sum, seen = time.time(), 0.0, 0, 0
        bar = run.progress(f"epoch {epoch + 1}/{cfg.epochs}", len(batches), "batches")
        for idx in bar.iterate(batches):
            src, tgt_in, tgt_out = (
                x.to(run.device) for x in collate([train_pairs[i] for i in idx])
            )
            lr = lr_at(step, cfg, total_steps)
            with run.autocast():
                logits = ddp(src, tgt_in)
            top = None if kd is None else kd.batch(idx, tgt_out.shape[1], run.device)
            loss = smoothed_loss(
                logits, tgt_out, cfg.label_smoothing, kd=top, kd_weight=cfg.word_kd
            )
            optimize(ddp, optimizer, loss, lr, cfg.clip)
            step += 1
            n = int((tgt_out != PAD_ID).sum())
            loss_sum, tok_sum = loss_sum + loss.item() * n, tok_sum + n
            seen += int((src != PAD_ID).sum()) + n
            bar.note(f"loss {loss.item():.3f}, lr {lr:.1e}")
        bar.close()
        tokens_per_s = seen * run.world / (time.time() - t_epoch)
        if run.main:
            val_loss = translation_val_loss(run, model, val_pairs)
            bleu = None
            if bleu_n:
                label = None if cfg.quiet else f"epoch {epoch + 1} val BLEU"
                hyps = translate_texts(model, tok, bleu_src, progress=label)
                bleu = val_bleu(hyps, bleu_ref, cfg.lowercase)
            record = {
                "epoch": epoch + 1,
                "step": step,
                "train_loss": loss_sum / tok_sum,
                "val_loss": val_loss,
                "ppl": math.exp(min(val_loss, 50)),
                "bleu": bleu,
                "lr": lr,
                "tokens_per_s": tokens_per_s,
                "elapsed": time.time() - run.t0,
            }
            run.history.append(record)
            run.log(record)
            run.say(epoch_line(run, record, cfg.epochs))
            state = {"epoch": epoch + 1, "step": step, "best": min(state["best"], val_loss)}
            save_epoch(run, model, tok_path, meta, optimizer, state)
        run.barrier()

    if run.main:
        finish_translation(run, model, tok, tok_path, meta, val_pairs, bleu_src, bleu_ref)
    run.barrier()
    return model


def val_bleu(hyps: list[str], refs: list[str], lowercase: bool) -> float:
    """The run's BLEU (core.metrics, as export's held-out check): cased sacreBLEU 13a, or
    lowercased for a --lowercase run, whose outputs are lowercase."""
    return bleu_scores(hyps, refs)["bleu_lc" if lowercase else "bleu"]


def bleu_label(cfg: TrainConfig, sentences: int) -> str:
    """What the BLEU figures of a run are: decoding, sentences, split, casing."""
    case = "lowercased" if cfg.lowercase else "cased"
    return f"greedy, {sentences:,} Multi30k val sentences {cfg.direction}, {case} sacreBLEU"


def finish_translation(run, model, tok, tok_path, meta, val_pairs, bleu_src, bleu_ref) -> None:
    """Average the last checkpoints, compare with best, write samples.md and loss.png."""
    cfg = run.cfg
    scores: dict[str, dict[str, Any]] = {}
    for name in ("best", "averaged"):
        m = save_averaged(run, model, tok_path, meta) if name == "averaged" else None
        m = m if m is not None else load_checkpoint(run.out / "best", run.device)[0]
        hyps = translate_texts(m, tok, bleu_src) if bleu_src else []
        bleu = val_bleu(hyps, bleu_ref, cfg.lowercase) if bleu_src else None
        scores[name] = {"val_loss": translation_val_loss(run, m, val_pairs), "bleu": bleu}
        scores[name]["hyps"] = hyps
    key = "bleu" if bleu_src else "val_loss"
    sign = -1 if key == "bleu" else 1
    pick = min(scores, key=lambda n: sign * scores[n][key])
    summary = {n: {k: v for k, v in s.items() if k != "hyps"} for n, s in scores.items()}
    run.log({"final": summary, "samples_from": pick, "elapsed": time.time() - run.t0})
    for n, s in summary.items():
        bleu_note = (
            f", val BLEU {s['bleu']:.2f} ({bleu_label(cfg, len(bleu_src))})"
            if s["bleu"] is not None
            else ""
        )
        run.say(f"{n:>8}: val loss {s['val_loss']:.3f}{bleu_note}")
    rows = ["| source | reference | prediction |", "|---|---|---|"]
    cell = lambda s: s.replace("|", "\\|")  # noqa: E731
    for s, r, h in list(zip(bleu_src, bleu_ref, scores[pick]["hyps"]))[: cfg.samples]:
        rows.append(f"| {cell(s)} | {cell(r)} | {cell(h)} |")
    title = f"# Samples: {cfg.direction}, {pick} checkpoint, greedy, Multi30k val\n\n"
    (run.out / "samples.md").write_text(title + "\n".join(rows) + "\n")
    plot_losses(run.history, run.out / "loss.png", "epoch")
    run.say(
        f"done in {time.time() - run.t0:.0f}s: {run.out}/{{best,last,averaged}}, "
        f"log.jsonl, loss.png, samples.md"
    )


def lm_update(
    model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
    cfg: TrainConfig, lr: float, autocast: Callable[[], AbstractContextManager] = nullcontext,
) -> torch.Tensor:  # fmt: skip
    """One language-model training step on (B, T) inputs and targets; returns the loss (what
    train_lm runs, and benchmarks/train_speed.py times)."""
    with autocast():
        logits, _ = model(x)
    loss = smoothed_loss(logits, y, cfg.label_smoothing, pad_id=-100)
    optimize(model, optimizer, loss, lr, cfg.clip)
    return loss


@torch.no_grad()
def lm_loss(run: Run, model: nn.Module, data: np.ndarray, seed: int) -> float:
    """Mean loss over eval_iters random batches drawn with a fixed seed."""
    model.eval()
    rng = np.random.default_rng(seed)
    losses = []
    for _ in range(run.cfg.eval_iters):
        x, y = (
            t.to(run.device) for t in get_batch(data, run.cfg.block_size, run.cfg.batch_size, rng)
        )
        with run.autocast():
            logits, _ = model(x)
        losses.append(float(smoothed_loss(logits, y, pad_id=-100)))
    model.train()
    return float(np.mean(losses))


def train_lm(run: Run) -> nn.Module:
    cfg = run.cfg
    train_text, val_text = load_shakespeare(cfg.data_dir)
    tok, tok_path = prepare_tokenizer(run, [train_text])
    model, mcfg = build(run, tok.get_vocab_size())
    block = mcfg.max_len
    train_ids = np.asarray(encode_stream(tok, train_text), dtype=np.int64)
    val_ids = np.asarray(encode_stream(tok, val_text), dtype=np.int64)
    for name, ids in (("train", train_ids), ("val", val_ids)):
        if len(ids) <= block + 1:
            raise ValueError(
                f"empty dataset: the {name} split has {len(ids)} tokens, "
                f"fewer than block_size + 2 = {block + 2}"
            )
    meta = {
        "task": {"kind": "lm"},
        "train": cfg.to_dict(),
        CHECKPOINT_KEY: cfg.training_data().to_json(),
    }
    run.say(
        f"language model: {len(train_ids):,} train / {len(val_ids):,} val tokens, vocab "
        f"{tok.get_vocab_size()}, {model.num_params() / 1e6:.2f}M parameters, {run.device}"
    )

    optimizer = make_optimizer(model, cfg)
    state = restore(run, optimizer)
    ddp = wrap(run, model)
    n_evals = math.ceil(cfg.max_iters / cfg.eval_interval)
    step = state["step"]
    for ev in range(state["epoch"], n_evals):
        torch.manual_seed(cfg.seed + 1000 * (ev + 1) + run.rank)
        rng = np.random.default_rng([cfg.seed, ev, run.rank])
        t_eval, losses = time.time(), []
        iters = range(ev * cfg.eval_interval, min(cfg.max_iters, (ev + 1) * cfg.eval_interval))
        bar = run.progress(f"iters {iters[0]}-{iters[-1] + 1}", len(iters), "iters")
        ddp.train()
        for it in bar.iterate(iters):
            x, y = (t.to(run.device) for t in get_batch(train_ids, block, cfg.batch_size, rng))
            lr = lr_at(it, cfg, cfg.max_iters)
            loss = lm_update(ddp, optimizer, x, y, cfg, lr, run.autocast)
            step = it + 1
            losses.append(loss.item())
            bar.note(f"loss {losses[-1]:.3f}, lr {lr:.1e}")
        bar.close()
        tokens_per_s = len(losses) * cfg.batch_size * block * run.world / (time.time() - t_eval)
        if run.main:
            val_loss = lm_loss(run, model, val_ids, cfg.seed)
            record = {
                "iter": step,
                "train_loss": lm_loss(run, model, train_ids, cfg.seed),
                "val_loss": val_loss,
                "ppl": math.exp(val_loss),
                "lr": lr,
                "tokens_per_s": tokens_per_s,
                "elapsed": time.time() - run.t0,
            }
            run.history.append(record)
            run.log(record)
            run.say(epoch_line(run, record, cfg.max_iters, unit="iter"))
            state = {"epoch": ev + 1, "step": step, "best": min(state["best"], val_loss)}
            save_epoch(run, model, tok_path, meta, optimizer, state)
        run.barrier()

    if run.main:
        best = load_checkpoint(run.out / "best", run.device)[0]
        avg = save_averaged(run, model, tok_path, meta)
        final = {
            n: lm_loss(run, m, val_ids, cfg.seed) for n, m in (("best", best), ("averaged", avg))
        }
        run.log(
            {
                "final": {n: {"val_loss": v} for n, v in final.items()},
                "elapsed": time.time() - run.t0,
            }
        )
        for n, v in final.items():
            run.say(f"{n:>8}: val loss {v:.3f}")
        pick = min(final, key=final.__getitem__)
        texts = lm_samples(
            best if pick == "best" else avg, tok, n=max(1, cfg.samples // 2), seed=cfg.seed
        )
        body = "\n\n".join(f"## Sample {i + 1}\n\n```text\n{t}\n```" for i, t in enumerate(texts))
        (run.out / "samples.md").write_text(
            f"# Samples: {pick} checkpoint, temperature 0.8\n\n{body}\n"
        )
        plot_losses(run.history, run.out / "loss.png", "iter")
        run.say(f"done in {time.time() - run.t0:.0f}s: {run.out}")
    run.barrier()
    return model
