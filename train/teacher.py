"""What a teacher gives a student's training loop: its start (--init-from-teacher: the
teacher cut to the student's layers), its training pairs (--teacher: the teacher's
translations, train/distill.py) and, for word-level distillation (--word-kd), its top-K next
tokens at every target position."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from edgeformer.models import DecoderOnly, EncoderDecoder, ModelConfig, build_model
from edgeformer.models.batch import collate
from edgeformer.models.checkpoint import (
    load_checkpoint,
)

from .batches import pair_lengths, token_batches
from .distill import (
    checkpoint_teacher,
    distill,
    shrunk_config,
    shrunk_weights,
    spaced_layers,
)
from .run_folder import Run
from .tokenizer import (
    PAD_ID,
    load_tokenizer,
)


def start_from_teacher(
    run: Run, teacher: Path
) -> tuple[Any, Path, EncoderDecoder | DecoderOnly, ModelConfig]:
    """--init-from-teacher: the teacher checkpoint's tokenizer (copied to OUT/tokenizer.json)
    and the teacher cut to the run's layer counts (train/distill.py); run.cfg's model becomes
    that shape, so that the checkpoints record the model they hold."""
    cfg = run.cfg
    t_model, t_config = load_checkpoint(teacher)
    t_cfg = ModelConfig.from_dict(t_config["model"])
    s_cfg = shrunk_config(t_cfg, cfg.model)
    path = run.out / "tokenizer.json"
    if run.main:
        shutil.copyfile(teacher / "tokenizer.json", path)
    run.barrier()
    model = build_model(s_cfg)
    model.load_state_dict(shrunk_weights(t_model.state_dict(), t_cfg, s_cfg, model.state_dict()))
    run.cfg = replace(cfg, model=s_cfg)
    wider = s_cfg.decoder_ffn > t_cfg.decoder_ffn
    run.say(
        f"student: the teacher {teacher} ({t_cfg.n_encoder_layers}+{t_cfg.n_decoder_layers} "
        f"layers) cut to {s_cfg.n_encoder_layers}+{s_cfg.n_decoder_layers}: encoder layers "
        f"{spaced_layers(t_cfg.n_encoder_layers, s_cfg.n_encoder_layers)}, decoder layers "
        f"{spaced_layers(t_cfg.n_decoder_layers, s_cfg.n_decoder_layers)}; its tokenizer "
        f"({t_cfg.vocab_size:,}), width {t_cfg.d_model}, FFN {t_cfg.d_ff}"
        + (f", decoder FFN widened to {s_cfg.decoder_ffn}" if wider else "")
    )
    return load_tokenizer(path), path, model.to(run.device), s_cfg


@dataclass(frozen=True)
class TeacherTopK:
    """--word-kd: at each target position of every training pair, the teacher's K most likely
    next tokens and their probabilities (renormalized over the K). The teacher runs in eval mode
    (no dropout) on pairs that do not change, so these are the same every epoch: worked out once,
    and an epoch costs what it costs without distillation."""

    ids: list[torch.Tensor]  # per pair (T_i, K) int32, T_i = its target length + 1 (EOS)
    probs: list[torch.Tensor]  # per pair (T_i, K) float32

    def batch(
        self, idx: list[int], length: int, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Pairs idx -> ids (B, length, K) int64, probs (B, length, K); padding rows 0."""
        k = self.ids[idx[0]].shape[1]
        ids = torch.zeros(len(idx), length, k, dtype=torch.long)
        probs = torch.zeros(len(idx), length, k)
        for row, i in enumerate(idx):
            n = self.ids[i].shape[0]
            ids[row, :n], probs[row, :n] = self.ids[i], self.probs[i]
        return ids.to(device), probs.to(device)


def teacher_topk(run: Run, pairs: list) -> TeacherTopK:
    """The teacher checkpoint (--teacher), frozen in eval mode, over all training pairs once:
    its top --word-kd-topk next tokens at each target position."""
    cfg = run.cfg
    teacher, t_config = load_checkpoint(checkpoint_teacher(Path(str(cfg.teacher))), run.device)
    teacher.eval()
    k = min(cfg.word_kd_topk, t_config["model"]["vocab_size"])
    t0, mass, positions = time.time(), 0.0, 0
    ids: list[torch.Tensor] = [torch.empty(0)] * len(pairs)
    probs: list[torch.Tensor] = [torch.empty(0)] * len(pairs)
    batches = token_batches(pair_lengths(pairs), cfg.batch_tokens)
    bar = run.progress("word-level distillation: the teacher's top tokens", len(batches), "batches")
    with torch.no_grad():
        for idx in bar.iterate(batches):
            src, tgt_in, tgt_out = (x.to(run.device) for x in collate([pairs[i] for i in idx]))
            with run.autocast():
                logits = teacher(src, tgt_in)
            top_p, top_ids = logits.float().softmax(-1).topk(k, dim=-1)  # (B, T, K)
            kept = top_p.sum(-1, keepdim=True)
            mass += float(kept[tgt_out != PAD_ID].sum())
            top_p, top_ids = (top_p / kept).cpu(), top_ids.to(torch.int32).cpu()  # one copy
            for row, i in enumerate(idx):
                n = len(pairs[i][1]) + 1
                ids[i], probs[i] = top_ids[row, :n].clone(), top_p[row, :n].clone()
                positions += n
    bar.close()
    run.say(
        f"word-level distillation: the teacher's top {k} tokens at {positions:,} target "
        f"positions in {time.time() - t0:.0f} s (they hold {mass / positions:.1%} of its "
        "probability on average)"
    )
    return TeacherTopK(ids, probs)


def distilled_pairs(
    run: Run, sources: list[str], references: list[str]
) -> tuple[list[str], list[str]]:
    """(sources, the teacher's translations): made by rank 0 (train/distill.py); the other
    ranks wait, then read rank 0's OUT/distilled (or --distilled)."""
    cfg = run.cfg

    def pairs(say) -> tuple[list[str], list[str]]:
        d = distill(sources, run.out, cfg, say, references)
        return d.sources, d.targets

    if run.main:
        result = pairs(run.say)
    run.barrier()
    return result if run.main else pairs(lambda _: None)
