"""Training configuration: one dataclass, validated on construction, and named presets."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

from edgeformer.models import ModelConfig

TASKS = ("translation", "lm")
DIRECTIONS = ("en-de", "de-en")
SCHEDULES = ("inverse-sqrt", "cosine")
TOKENIZERS = ("bpe", "char")
DEVICES = ("cpu", "cuda")


@dataclass
class TrainConfig:
    task: str = "translation"  # "translation" (Multi30k) | "lm" (Tiny Shakespeare)
    direction: str = "en-de"  # translation: "en-de" | "de-en"
    data_dir: str | None = None  # None: the bundled data (edgeformer/train/data)
    max_sentences: int | None = None  # translation: use only the first N training pairs
    tokenizer: str = "bpe"  # "bpe" | "char" (char: LM only)
    vocab_size: int = 8000  # BPE vocabulary size (joint for both languages)
    # model (see ModelConfig); max_len is the longest source / target, block_size for an LM
    d_model: int = 256
    n_heads: int = 4
    n_encoder_layers: int = 3
    n_decoder_layers: int = 3
    d_ff: int = 1024
    dropout: float = 0.1
    activation: str = "relu"
    norm: str = "post"
    positional: str = "sinusoidal"
    max_len: int = 128
    # optimisation: AdamW, warm-up then inverse-sqrt or cosine decay, gradient clipping
    lr: float = 1e-3
    schedule: str = "inverse-sqrt"
    warmup: int = 1000  # steps
    min_lr: float = 0.0  # cosine floor
    weight_decay: float = 0.0  # applied to matrices only
    beta1: float = 0.9
    beta2: float = 0.98
    clip: float = 1.0  # max gradient norm, 0 = off
    label_smoothing: float = 0.1
    # translation: epochs of token-count batches, BLEU on the first bleu_sentences val pairs
    epochs: int = 10
    batch_tokens: int = 4096  # padded tokens (max(src, tgt) length x sentences) per batch
    bleu_sentences: int = 200  # 0 = no BLEU during training
    average_last: int = 5  # OUT/averaged = mean of the last N epoch (eval) weights
    # language model: nanoGPT-style random windows, iterations, evaluation every eval_interval
    max_iters: int = 2000
    eval_interval: int = 250
    eval_iters: int = 20
    block_size: int = 64
    batch_size: int = 12
    # run
    seed: int = 1337
    device: str = "cpu"  # "cpu" | "cuda" (bf16 autocast when amp)
    threads: int = 0  # torch CPU threads, 0 = torch's default (all cores)
    amp: bool = True
    out: str = "runs/train"
    resume: str | None = None  # checkpoint folder with train_state (usually OUT/last)
    samples: int = 8  # rows of OUT/samples.md
    quiet: bool = False

    def __post_init__(self) -> None:
        def bad(msg: str) -> None:
            raise ValueError(f"invalid TrainConfig: {msg}")

        for name, allowed in (
            ("task", TASKS),
            ("direction", DIRECTIONS),
            ("schedule", SCHEDULES),
            ("tokenizer", TOKENIZERS),
            ("device", DEVICES),
        ):
            if getattr(self, name) not in allowed:
                bad(f"{name}={getattr(self, name)!r}, expected one of {allowed}")
        if self.task == "translation" and self.tokenizer != "bpe":
            bad("translation needs tokenizer='bpe'")
        positive = ["vocab_size", "epochs", "batch_tokens", "max_iters", "eval_interval"]
        positive += ["eval_iters", "block_size", "batch_size", "warmup", "average_last"]
        for name in positive:
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                bad(f"{name}={getattr(self, name)!r} must be a positive integer")
        if self.max_sentences is not None and self.max_sentences < 1:
            bad(f"max_sentences={self.max_sentences} must be >= 1")
        if not self.lr > 0 or self.min_lr < 0:
            bad(f"lr={self.lr} must be > 0 and min_lr={self.min_lr} >= 0")
        if not 0 <= self.label_smoothing < 1:
            bad(f"label_smoothing={self.label_smoothing} must be in [0, 1)")
        if min(self.clip, self.weight_decay, self.bleu_sentences, self.threads) < 0:
            bad("clip, weight_decay, bleu_sentences and threads must be >= 0")
        if self.task == "translation" and self.batch_tokens < self.max_len:
            bad(f"batch_tokens={self.batch_tokens} is smaller than max_len={self.max_len}")
        self.model_config(vocab_size=max(self.vocab_size, 4))  # model fields are checked there

    @property
    def src_lang(self) -> str:
        return self.direction.split("-")[0]

    @property
    def tgt_lang(self) -> str:
        return self.direction.split("-")[1]

    def model_config(self, vocab_size: int) -> ModelConfig:
        lm = self.task == "lm"
        return ModelConfig(
            family="decoder-only" if lm else "encoder-decoder",
            vocab_size=vocab_size,
            d_model=self.d_model,
            n_heads=self.n_heads,
            n_encoder_layers=self.n_encoder_layers,
            n_decoder_layers=self.n_decoder_layers,
            d_ff=self.d_ff,
            dropout=self.dropout,
            activation=self.activation,
            norm=self.norm,
            positional=self.positional,
            max_len=self.block_size if lm else self.max_len,
        )

    def to_dict(self) -> dict:
        return asdict(self)


def _lm(**kw) -> TrainConfig:
    """nanoGPT shakespeare-char defaults: pre-LN GPT, learned positions, GELU, char tokens."""
    base = dict(task="lm", tokenizer="char", activation="gelu", norm="pre", positional="learned")
    base |= dict(schedule="cosine", warmup=100, beta2=0.99, weight_decay=0.1, label_smoothing=0.0)
    return TrainConfig(**(base | kw))


PRESETS: dict[str, TrainConfig] = {
    # demo / CI: a small model on a third of Multi30k en->de, ~1-2 minutes on 2 CPU cores
    "tiny": TrainConfig(
        vocab_size=2000,
        d_model=128,
        n_heads=4,
        n_encoder_layers=2,
        n_decoder_layers=2,
        d_ff=256,
        dropout=0.1,
        max_sentences=8000,
        epochs=3,
        batch_tokens=2000,
        lr=2e-3,
        warmup=100,
        bleu_sentences=100,
        average_last=2,
        samples=8,
        threads=1,  # a model this small gains little from a 2nd thread, loses a lot on a busy box
    ),
    # full recipes (GPU): base-like model, beam 5 target >= 40 lowercased BLEU on test_2016_flickr
    "multi30k-en-de": TrainConfig(
        direction="en-de",
        vocab_size=8000,
        epochs=40,
        batch_tokens=4096,  # ~140 steps an epoch
        lr=1e-3,
        warmup=1000,
        dropout=0.3,
        bleu_sentences=1014,
    ),
    "multi30k-de-en": TrainConfig(
        direction="de-en",
        vocab_size=8000,
        epochs=40,
        batch_tokens=4096,  # ~140 steps an epoch
        lr=1e-3,
        warmup=1000,
        dropout=0.3,
        bleu_sentences=1014,
    ),
    # CPU recipe: 25 minutes on 2 cores (a 2.2M-parameter model at ~6.2k tokens/s); test BLEU 31 /
    # 33.6 (greedy / beam 5), val BLEU 32 (README, measured 2026-11-22)
    "multi30k-en-de-cpu": TrainConfig(
        direction="en-de",
        vocab_size=6000,
        d_model=128,
        n_heads=4,
        n_encoder_layers=3,
        n_decoder_layers=3,
        d_ff=512,
        epochs=10,  # ~2.5 min an epoch on 2 cores
        batch_tokens=3000,
        lr=2e-3,
        warmup=400,
        dropout=0.1,
        bleu_sentences=200,
        average_last=3,
        threads=2,
    ),
    "shakespeare-char": _lm(
        d_model=384,
        n_heads=6,
        n_decoder_layers=6,
        d_ff=1536,
        dropout=0.2,
        block_size=256,
        batch_size=64,
        max_iters=5000,
        eval_interval=250,
        eval_iters=200,
        lr=1e-3,
        min_lr=1e-4,
    ),
    # nanoGPT's CPU model (4 x 128, block 64, batch 12) at lr 2e-3 for 2500 iters: val 1.76, ~4 min
    "shakespeare-char-cpu": _lm(
        d_model=128,
        n_heads=4,
        n_decoder_layers=4,
        d_ff=512,
        dropout=0.0,
        block_size=64,
        batch_size=12,
        max_iters=2500,
        eval_interval=250,
        eval_iters=20,
        lr=2e-3,
        min_lr=1e-4,
        threads=1,  # see tiny
    ),
}


def preset(name: str, **overrides) -> TrainConfig:
    """A preset with some fields replaced (re-validated)."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}, expected one of {sorted(PRESETS)}")
    known = {f.name for f in fields(TrainConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"invalid TrainConfig: unknown fields {unknown}")
    return replace(PRESETS[name], **overrides)
