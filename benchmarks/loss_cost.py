"""What the loss costs a student's training step: cross-entropy alone, and with word-level
distillation from a teacher run per batch or from its cached top K (train/teacher.py).

    python -m edgeformer.benchmarks.loss_cost --teacher RUN/averaged [--batches 30] [--rounds 2]

The student is the teacher cut to --layers (3,1 without biases: the cut 3+1 of docs/training.md),
trained on Multi30k's first batches (the references: only their lengths matter here) with the
functions `edgeformer train` runs. Each variant starts from the same weights and runs the same
batches; the variants alternate in --rounds rounds, so that the host's slow minutes fall on all.
Prints ms a batch per round and the ratio to `F.cross_entropy`; writes OUT/latest.json.

    cross-entropy, F.cross_entropy    what the loss was before 2026-11-28
    cross-entropy, one pass           smoothed_loss: forward and backward one pass each
    + KL, teacher forward per batch   Word-KD with the teacher run on every batch (before)
    + KL, cached top K                Word-KD as --word-kd runs it: teacher_topk once, then
                                      smoothed_loss(kd=...)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F

from edgeformer.core.data import load_multi30k
from edgeformer.models import ModelConfig, build_model
from edgeformer.models.batch import collate, make_pairs
from edgeformer.models.checkpoint import load_checkpoint
from edgeformer.train.batches import pair_lengths, token_batches
from edgeformer.train.config import TrainConfig
from edgeformer.train.distill import shrunk_config, shrunk_weights
from edgeformer.train.loss import smoothed_loss
from edgeformer.train.run_folder import Run
from edgeformer.train.state import make_optimizer, optimize
from edgeformer.train.teacher import TeacherTopK, teacher_topk
from edgeformer.train.tokenizer import encode, load_tokenizer

Loss = Callable[[torch.Tensor, list[int], torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def variants(
    teacher: torch.nn.Module, topk: TeacherTopK, where: dict[int, int], cfg: TrainConfig
) -> dict[str, Loss]:
    """name -> loss(student logits, pair indices, src, tgt_in, tgt_out)."""
    eps, w = cfg.label_smoothing, cfg.word_kd

    def torch_ce(logits, idx, src, tgt_in, tgt_out):
        flat = logits.flatten(0, 1)
        return F.cross_entropy(flat, tgt_out.flatten(), ignore_index=0, label_smoothing=eps)

    def one_pass(logits, idx, src, tgt_in, tgt_out):
        return smoothed_loss(logits, tgt_out, eps)

    def live(logits, idx, src, tgt_in, tgt_out):
        with torch.no_grad():
            t_logits = teacher(src, tgt_in)
        keep = tgt_out != 0
        log_p, log_q = logits[keep].log_softmax(-1), t_logits[keep].log_softmax(-1)
        kl = F.kl_div(log_p, log_q, log_target=True, reduction="batchmean")
        return (1 - w) * torch_ce(logits, idx, src, tgt_in, tgt_out) + w * kl

    def cached(logits, idx, src, tgt_in, tgt_out):
        kd = topk.batch([where[i] for i in idx], tgt_out.shape[1], torch.device("cpu"))
        return smoothed_loss(logits, tgt_out, eps, kd=kd, kd_weight=w)

    return {
        "cross-entropy, F.cross_entropy": torch_ce,
        "cross-entropy, one pass": one_pass,
        "+ KL, teacher forward per batch": live,
        f"+ KL, cached top {cfg.word_kd_topk}": cached,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--teacher", type=Path, required=True, help="a checkpoint folder")
    ap.add_argument("--layers", default="3,1", help="the student's encoder,decoder layers")
    ap.add_argument("--bias", action="store_true", help="keep the linear biases")
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", type=Path, default=Path("runs/loss-cost"))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    teacher, t_config = load_checkpoint(args.teacher)
    teacher.eval()
    t_cfg = ModelConfig.from_dict(t_config["model"])
    enc, dec = (int(n) for n in args.layers.split(","))
    s_cfg = shrunk_config(
        t_cfg, replace(t_cfg, n_encoder_layers=enc, n_decoder_layers=dec, bias=args.bias)
    )
    weights = shrunk_weights(teacher.state_dict(), t_cfg, s_cfg)
    cfg = TrainConfig(teacher=str(args.teacher), init_from_teacher=True, word_kd=0.5, quiet=True)
    tok = load_tokenizer(args.teacher / "tokenizer.json")
    src, tgt = load_multi30k("train", "en", "de", args.data_dir)
    pairs, _ = make_pairs(encode(tok, src), encode(tok, tgt), s_cfg.max_len)
    batches = token_batches(pair_lengths(pairs), cfg.batch_tokens, seed=1)[: args.batches]
    used = sorted({i for b in batches for i in b})
    t0 = time.perf_counter()
    topk = teacher_topk(Run(cfg, args.out, torch.device("cpu")), [pairs[i] for i in used])
    once = time.perf_counter() - t0
    losses = variants(teacher, topk, {i: j for j, i in enumerate(used)}, cfg)
    ms: dict[str, list[float]] = {name: [] for name in losses}
    for _ in range(args.rounds):
        for name, loss_fn in losses.items():
            student = build_model(s_cfg)
            student.load_state_dict(weights)
            student.train()
            optimizer = make_optimizer(student, cfg)
            t0 = time.perf_counter()
            for idx in batches:
                s, ti, to = collate([pairs[i] for i in idx])
                optimize(student, optimizer, loss_fn(student(s, ti), idx, s, ti, to), 1e-4, 1.0)
            ms[name].append(1000 * (time.perf_counter() - t0) / len(batches))
    base = statistics.median(ms["cross-entropy, F.cross_entropy"])
    print(f"student {enc}+{dec} cut from {args.teacher}, {len(batches)} batches of <= "
          f"{cfg.batch_tokens} tokens, {args.threads} threads; the top {cfg.word_kd_topk} of "
          f"{len(used):,} pairs in {once:.1f} s ({once / len(used) * len(pairs):.0f} s for all "
          f"{len(pairs):,})")  # fmt: skip
    print(f"| loss | ms a batch ({args.rounds} rounds) | ÷ F.cross_entropy |\n|---|---|---|")
    for name, values in ms.items():
        rounds = " / ".join(f"{v:,.0f}" for v in values)
        print(f"| {name} | {rounds} | {statistics.median(values) / base:.2f} |")
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"ms_per_batch": ms, "topk_seconds": once, "topk_pairs": len(used),
              "pairs": len(pairs), "batches": len(batches), "threads": args.threads}  # fmt: skip
    (args.out / "latest.json").write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
