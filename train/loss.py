"""The training loss: label-smoothed cross-entropy over the non-padding targets, mixed with
word-level distillation's KL from a teacher's top-K distribution, in one pass over the logits
(_MixedTargetLoss)."""

from __future__ import annotations

import torch

from .tokenizer import (
    PAD_ID,
)


class _MixedTargetLoss(torch.autograd.Function):
    """Sum over real positions of sum_j w_j * -log softmax(x)_j / (real positions), for the
    target distribution w = (1 - a) * ((1 - e) * onehot(target) + e / V) + a * q, q the
    teacher's top-K probabilities at ids (a = 0: label-smoothed cross-entropy). Its gradient is
    (softmax(x) - w) / N, so forward and backward each take one pass over the (N, V) logits
    (F.cross_entropy plus a KL from log_softmax and gathers: 2.4x as long on a 2,400 x 6,000
    batch on the CPU; the vocabulary is most of a small model's cost)."""

    @staticmethod
    def forward(ctx, x, target, ids, q, eps: float, a: float, pad_id: int):
        # x (N, V) float, target (N,), ids (N, K), q (N, K) or both None when a = 0
        keep = target != pad_id
        t = target.clamp_min(0)[:, None]  # pad_id may be -100 (LM): any index, masked below
        lse = torch.logsumexp(x, -1)  # (N,)
        loss = (1 - eps) * (lse - x.gather(-1, t).squeeze(-1))
        if eps:
            loss = loss + eps * (lse - x.mean(-1))
        if a:
            kl = (torch.xlogy(q, q) - q * (x.gather(-1, ids) - lse[:, None])).sum(-1)
            loss = (1 - a) * loss + a * kl
        n = keep.sum().clamp_min(1)
        ctx.save_for_backward(x, t, ids, q, lse, keep, n)
        ctx.eps, ctx.a = eps, a
        return (loss * keep).sum() / n

    @staticmethod
    def backward(ctx, grad_out):
        x, t, ids, q, lse, keep, n = ctx.saved_tensors
        eps, a = ctx.eps, ctx.a
        grad = torch.exp(x - lse[:, None])  # softmax(x)
        if eps:
            grad.sub_((1 - a) * eps / x.shape[-1])
        hit = torch.full(t.shape, -(1 - a) * (1 - eps), dtype=x.dtype, device=x.device)
        grad.scatter_add_(-1, t, hit)
        if a:
            grad.scatter_add_(-1, ids, -a * q)
        grad.mul_(keep[:, None] * (grad_out / n))
        return grad, None, None, None, None, None, None


def smoothed_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    smoothing: float = 0.0,
    pad_id: int = PAD_ID,
    kd: tuple[torch.Tensor, torch.Tensor] | None = None,
    kd_weight: float = 0.0,
) -> torch.Tensor:
    """Mean label-smoothed cross-entropy over the non-padding targets; with kd = the teacher's
    top-K (ids, probabilities summing to 1), (1 - kd_weight) x that + kd_weight x KL(teacher ||
    student) (Kim & Rush's Word-KD; K = vocabulary: the exact KL).
    (B, T, V), (B, T)[, ((B, T, K), (B, T, K))] -> ()"""
    ids, q = (None, None) if kd is None else (kd[0].flatten(0, 1), kd[1].flatten(0, 1).float())
    return _MixedTargetLoss.apply(
        logits.flatten(0, 1).float(),
        target.flatten(),
        ids,
        q,
        smoothing,
        kd_weight if kd is not None else 0.0,
        pad_id,
    )
