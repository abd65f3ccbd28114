"""Parity check of a package against its checkpoint: greedy decoding with the KV-cache graphs.

PyTorch (the checkpoint, through the model's incremental interface) picks every next token;
onnxruntime is fed the same tokens, and the logits of both are compared at every step.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def random_batch(cfg, batch: int, length: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random ids (B, L) and a 1/0 mask with varied lengths: ED right-padded, LM left-padded."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(max(cfg.pad_id, cfg.bos_id, cfg.eos_id) + 1, cfg.vocab_size, (batch, length))
    lengths = rng.integers(max(1, length // 2), length + 1, batch)
    lengths[0] = length
    mask = np.arange(length)[None, :] < lengths[:, None]  # right padding
    if cfg.family == "decoder-only":
        mask = mask[:, ::-1]  # left padding
    ids = np.where(mask, ids, cfg.pad_id).astype(np.int64)
    return ids, mask.astype(np.int64)


def sessions(package, variant: str = "fp32", threads: int = 1) -> dict:
    """{graph: onnxruntime.InferenceSession} for one variant of a loaded Package."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    files = package.config["variants"][variant]["files"]
    return {
        g: ort.InferenceSession(str(package.path / f), opts, providers=["CPUExecutionProvider"])
        for g, f in files.items()
    }


def _run(session, feed: dict) -> dict[str, np.ndarray]:
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feed)))


def _past(out: dict[str, np.ndarray], cross: dict[str, np.ndarray] | None = None) -> dict:
    """present.* outputs (+ the cached cross K/V) -> past_key_values.* inputs."""
    past = {
        k.replace("present.", "past_key_values.", 1): v for k, v in out.items() if k != "logits"
    }
    return {**past, **(cross or {})}


def compare(
    model, package, variant: str = "fp32", batch: int = 2, length: int = 7, steps: int = 6, seed=0
) -> list[float]:
    """Max abs logit difference (PyTorch vs onnxruntime) at each of 1 + `steps` decoder calls."""
    import torch

    cfg = model.cfg
    ort = sessions(package, variant)
    ids, mask = random_batch(cfg, batch, length, seed)
    t_ids, t_mask = torch.from_numpy(ids), torch.from_numpy(mask)
    diffs = []

    def diff(ref: torch.Tensor, got: np.ndarray) -> torch.Tensor:
        diffs.append(float(np.abs(ref.numpy() - got.astype(np.float32)).max()))
        return ref[:, -1].argmax(-1, keepdim=True)  # (B, 1) next token, chosen by PyTorch

    with torch.no_grad():
        if cfg.family == "encoder-decoder":
            memory = model.encode(t_ids, t_mask)
            cross = model.cross_kv(memory)
            hidden = _run(ort["encoder"], {"input_ids": ids, "attention_mask": mask})
            tok = torch.full((batch, 1), cfg.bos_id, dtype=torch.long)
            logits, cache = model.decode(tok, cross, t_mask)
            feed = {"input_ids": tok.numpy(), "encoder_attention_mask": mask, **hidden}
            out = _run(ort["decoder"], feed)
            ort_cross = {
                k.replace("present.", "past_key_values.", 1): v
                for k, v in out.items()
                if ".encoder." in k
            }
            out = {k: v for k, v in out.items() if ".encoder." not in k}
            tok = diff(logits, out["logits"])
            for _ in range(steps):
                logits, cache = model.decode(tok, cross, t_mask, cache)
                feed = {"input_ids": tok.numpy(), "encoder_attention_mask": mask}
                out = _run(ort["decoder_with_past"], {**feed, **_past(out, ort_cross)})
                tok = diff(logits, out["logits"])
        else:
            logits, cache = model(t_ids, t_mask)
            out = _run(ort["decoder"], {"input_ids": ids, "attention_mask": mask})
            tok = diff(logits, out["logits"])
            for _ in range(steps):
                t_mask = torch.cat((t_mask, torch.ones(batch, 1, dtype=torch.long)), 1)
                logits, cache = model(tok, t_mask, cache)
                feed = {"input_ids": tok.numpy(), "attention_mask": t_mask.numpy()}
                out = _run(ort["decoder_with_past"], {**feed, **_past(out)})
                tok = diff(logits, out["logits"])
    return diffs


def verify_package(
    package_dir: str | os.PathLike, checkpoint_dir: str | os.PathLike, variant: str = "fp32"
) -> float:
    """Max abs logit difference over a short greedy generation (batch 2, padded inputs)."""
    from ..models.checkpoint import load_checkpoint
    from ..runtime.package import load_package

    model, _ = load_checkpoint(Path(checkpoint_dir))
    return max(compare(model, load_package(package_dir), variant))
