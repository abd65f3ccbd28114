"""DDP: two CPU processes (gloo) train a few steps and end with identical weights."""

from __future__ import annotations

import os
import socket

import pytest

pytest.importorskip("torch", reason="needs PyTorch (the train extra)")
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file, save_model

from edgeformer.core.data import load_multi30k
from edgeformer.train.config import TrainConfig


def worker(rank: int, world: int, port: int, root: str) -> None:
    from edgeformer.train.trainer import train

    torch.set_num_threads(1)
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world)
    )
    cfg = TrainConfig.from_dict(dict(
        data_dir=f"{root}/data", out=f"{root}/run", vocab_size=200, d_model=32, n_heads=4,
        n_encoder_layers=1, n_decoder_layers=1, d_ff=64, max_len=64, batch_tokens=400,
        epochs=2, warmup=5, bleu_sentences=4, quiet=True,
    ))  # fmt: skip
    model = train(cfg)
    save_model(model, f"{root}/rank{rank}.safetensors")


@pytest.mark.slow
def test_ddp_two_gloo_processes_stay_in_sync(tmp_path):
    (tmp_path / "data/multi30k").mkdir(parents=True)
    for split, n in (("train", 120), ("val", 10)):
        src, tgt = load_multi30k(split, "en", "de", max_sentences=n)
        (tmp_path / f"data/multi30k/{split}.en").write_text("\n".join(src) + "\n")
        (tmp_path / f"data/multi30k/{split}.de").write_text("\n".join(tgt) + "\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(2, port, str(tmp_path)), nprocs=2, join=True)
    w0, w1 = (load_file(str(tmp_path / f"rank{r}.safetensors")) for r in (0, 1))
    assert w0.keys() == w1.keys()
    assert all(torch.equal(w0[k], w1[k]) for k in w0)
    initial = load_file(str(tmp_path / "run/epochs/epoch_001.safetensors"))
    assert any(not torch.equal(initial[k], w0[k]) for k in w0)  # it did train
    log = (tmp_path / "run/log.jsonl").read_text().splitlines()
    assert len(log) == 3  # two epochs + final, written by rank 0 only
    assert (tmp_path / "run/averaged/model.safetensors").is_file()
