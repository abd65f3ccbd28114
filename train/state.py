"""The optimizer and what a resumed run needs of it: AdamW and the learning-rate schedule,
one update, the train state saved as safetensors + JSON (no pickle), and the averaging of
saved weights."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn as nn
from safetensors.torch import load_file, load_model, save_file

from .config import TrainConfig

STATE_TENSORS, STATE_JSON = "train_state.safetensors", "train_state.json"


def lr_at(step: int, cfg: TrainConfig, total_steps: int) -> float:
    """Linear warm-up to cfg.lr, then lr * sqrt(warmup / step) or a cosine down to min_lr."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    if cfg.schedule == "inverse-sqrt":
        return cfg.lr * math.sqrt(cfg.warmup / (step + 1))
    progress = min(1.0, (step - cfg.warmup) / max(1, total_steps - cfg.warmup))
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * progress))


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices only (not biases, LayerNorms). Fused (one kernel over
    all parameters) where torch has it: on the CPU the per-parameter loop took 8 % of a
    shakespeare-char-cpu step (docs/training.md, training speed)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params)
    return torch.optim.AdamW(
        groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=1e-9, fused=fused or None
    )


def optimize(
    model: nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor, lr: float, clip: float
) -> None:
    """One update at learning rate `lr`, the gradient norm clipped to `clip` (0: not clipped)."""
    for g in optimizer.param_groups:
        g["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if clip > 0:
        nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()


def save_train_state(path: Path, optimizer: torch.optim.Optimizer, state: dict) -> None:
    """Optimizer tensors -> train_state.safetensors; step, epoch, history... -> train_state.json."""
    sd = optimizer.state_dict()
    tensors, scalars = {}, {}
    for idx, st in sd["state"].items():
        for k, v in st.items():
            if torch.is_tensor(v):
                tensors[f"{idx}.{k}"] = v.detach().cpu().contiguous()
            else:
                scalars[f"{idx}.{k}"] = v
    save_file(tensors, str(path / STATE_TENSORS))
    meta = {"optimizer": {"param_groups": sd["param_groups"], "scalars": scalars}, **state}
    (path / STATE_JSON).write_text(json.dumps(meta, indent=1))


def load_train_state(path: Path, optimizer: torch.optim.Optimizer) -> dict:
    """Restore the optimizer from `path`; returns the JSON state (step, epoch, history, ...)."""
    for name in (STATE_TENSORS, STATE_JSON):
        if not (path / name).is_file():
            raise FileNotFoundError(f"cannot resume: {path / name} not found")
    meta = json.loads((path / STATE_JSON).read_text())
    opt = meta.pop("optimizer")
    state: dict[int, dict] = {}
    for key, v in load_file(str(path / STATE_TENSORS)).items():
        idx, k = key.split(".", 1)
        state.setdefault(int(idx), {})[k] = v
    for key, v in opt["scalars"].items():
        idx, k = key.split(".", 1)
        state.setdefault(int(idx), {})[k] = v
    for g in opt["param_groups"]:
        g["betas"] = tuple(g["betas"])
    optimizer.load_state_dict({"state": state, "param_groups": opt["param_groups"]})
    return meta


def average_weights(paths: list[Path], model: nn.Module) -> None:
    """Load the element-wise mean of the weights files `paths` into `model`."""
    total: dict[str, torch.Tensor] = {}
    for p in paths:
        load_model(model, str(p))
        sd = {k: v.detach().double().clone() for k, v in model.state_dict().items()}
        total = {k: total[k] + sd[k] for k in total} if total else sd
    model.load_state_dict({k: (v / len(paths)).float() for k, v in total.items()})
