"""Training configuration: one dataclass, validated on construction, and named presets."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from edgeformer.core.config import ModelConfig
from edgeformer.core.data import TrainingData
from edgeformer.core.flags import doc

TASKS = ("translation", "lm")
DIRECTIONS = ("en-de", "de-en")
SCHEDULES = ("inverse-sqrt", "cosine")
TOKENIZERS = ("bpe", "char")
TEACHER_PICKS = ("top", "closest")
DEVICES = ("cpu", "cuda")
# ModelConfig fields the training run sets itself: the family from `task`, the special ids from
# the tokenizer ([PAD]=0, [BOS]=1, [EOS]=2, see train/tokenizer.py), one vocabulary (its one
# tokenizer: src_vocab_size none); not CLI flags
DERIVED = ("family", "pad_id", "bos_id", "eos_id", "src_vocab_size")
SPECIAL_IDS = {"pad_id": 0, "bos_id": 1, "eos_id": 2}
MODEL_FIELDS = tuple(f.name for f in fields(ModelConfig))


def default_model(**kw) -> ModelConfig:
    """A ModelConfig with the training defaults (max_len 128 rather than 256)."""
    return ModelConfig(**({"max_len": 128} | kw))


@dataclass
class TrainConfig:
    """A training run: its data, its model (a ModelConfig) and how it is optimised. Every field
    is an `edgeformer train` flag (core.flags), whose default is the preset's value."""

    task: str = doc("translation", "translation (Multi30k) or lm (Tiny Shakespeare)", choices=TASKS)
    direction: str = doc("en-de", "translation direction", choices=DIRECTIONS)
    data_dir: str | None = doc(
        None, "folder with multi30k/ and tinyshakespeare/ (none: the bundled data, core.data)",
        metavar="DIR",
    )  # fmt: skip
    max_sentences: int | None = doc(
        None, "translation: use only the first N training pairs (none: all)", metavar="N"
    )
    teacher: str | None = doc(
        None, "translation: distil from this model package or checkpoint folder: its beam "
        "translations of the training sources replace the targets (train/distill.py)",
        metavar="DIR",
    )  # fmt: skip
    teacher_beams: int = doc(5, "--teacher: beam size of the teacher's translations")
    teacher_pick: str = doc(
        "top", "--teacher: which of its beam's hypotheses becomes a source's target: top (the "
        "most likely: sequence-level distillation) or closest (the one with the highest "
        "sentence BLEU against the reference, of all --teacher-beams: Kim & Rush's "
        "interpolated sequence-level distillation)", choices=TEACHER_PICKS,
    )  # fmt: skip
    distilled: str | None = doc(
        None, "--teacher: folder of the teacher's translations, to share between students "
        "(made there when missing or from another teacher; none: OUT/distilled)", metavar="DIR",
    )  # fmt: skip
    init_from_teacher: bool = doc(
        False, "--teacher (a checkpoint folder): the student starts as the teacher cut to the "
        "run's layer counts (evenly spaced layers: shrink and fine-tune) with the teacher's "
        "tokenizer, width, FFN and positions; the run sets only layers and dropout",
    )  # fmt: skip
    word_kd: float = doc(
        0.0, "--init-from-teacher: weight of word-level distillation, the KL divergence from "
        "the teacher's next-token distribution at each target position, in the loss beside "
        "the cross-entropy on its translations (0: none)",
        metavar="WEIGHT",
    )  # fmt: skip
    word_kd_topk: int = doc(
        64, "--word-kd: the teacher's distribution at each target position is kept at its K "
        "most likely tokens (renormalized), worked out once before the first epoch: the "
        "epochs then cost what they cost without distillation (K = vocabulary: exact)",
        metavar="K",
    )  # fmt: skip
    tokenizer: str = doc("bpe", "bpe, or char (LM only)", choices=TOKENIZERS)
    lowercase: bool = doc(
        False, "BPE: lowercase all text (training data, then the package's inputs and outputs: "
        "the Multi30k papers' protocol; compare lowercased BLEU only)",
    )  # fmt: skip
    # the model: vocab_size is the BPE size asked for (the built model gets the tokenizer's),
    # max_len the longest source / target (an LM uses block_size); family follows `task`
    model: ModelConfig = field(default_factory=default_model)
    # optimisation: AdamW, warm-up then inverse-sqrt or cosine decay, gradient clipping
    lr: float = doc(1e-3, "peak learning rate (AdamW)")
    schedule: str = doc("inverse-sqrt", "learning-rate decay after warm-up", choices=SCHEDULES)
    warmup: int = doc(1000, "warm-up steps (linear)", metavar="STEPS")
    min_lr: float = doc(0.0, "cosine schedule: the learning rate it decays to")
    weight_decay: float = doc(0.0, "AdamW weight decay (matrices only)")
    beta1: float = doc(0.9, "AdamW beta1")
    beta2: float = doc(0.98, "AdamW beta2")
    clip: float = doc(1.0, "largest gradient norm (0: no clipping)")
    label_smoothing: float = doc(0.1, "label smoothing of the cross-entropy")
    # translation: epochs of token-count batches, BLEU on the first bleu_sentences val pairs
    epochs: int = doc(10, "translation: epochs over the training pairs")
    batch_tokens: int = doc(
        4096, "translation: padded tokens per batch (max(source, target) length x sentences)"
    )
    bleu_sentences: int = doc(
        200, "translation: BLEU after each epoch on the first N val sentences (0: none)",
        metavar="N",
    )  # fmt: skip
    average_last: int = doc(
        5, "OUT/averaged is the mean of the last N epochs' (LM: evaluations') weights", metavar="N"
    )
    # language model: nanoGPT-style random windows, iterations, evaluation every eval_interval
    max_iters: int = doc(2000, "LM: training iterations")
    eval_interval: int = doc(250, "LM: evaluate every N iterations", metavar="N")
    eval_iters: int = doc(20, "LM: batches per evaluation", metavar="N")
    block_size: int = doc(64, "LM: context length (tokens per window; the model's max_len)")
    batch_size: int = doc(12, "LM: windows per batch")
    # run
    seed: int = doc(1337, "random seed (data order, initialisation, dropout)")
    device: str = doc("cpu", "cpu, or cuda (bf16 autocast with --amp)", choices=DEVICES)
    threads: int = doc(0, "torch CPU threads (0: torch's default, all cores)")
    amp: bool = doc(True, "cuda: bf16 autocast")
    out: str = doc(
        "runs/train", "output folder: a new or empty one (--force replaces a run's)", metavar="DIR"
    )
    resume: str | None = doc(
        None, "checkpoint folder to resume from, with its training state (e.g. OUT/last)",
        metavar="DIR",
    )  # fmt: skip
    samples: int = doc(8, "rows of OUT/samples.md")
    quiet: bool = doc(False, "no progress bars or lines (the per-epoch lines stay)")

    def check_teacher(self) -> None:
        """init_from_teacher needs a teacher. Checked when a run starts, not at construction,
        so that a student preset can say how it starts before the command line names its
        teacher."""
        if self.init_from_teacher and self.teacher is None:
            raise ValueError(
                "invalid TrainConfig: init_from_teacher needs teacher (--teacher, a checkpoint "
                "folder such as runs/m30k-long/averaged)"
            )

    def __post_init__(self) -> None:
        def bad(msg: str) -> None:
            raise ValueError(f"invalid TrainConfig: {msg}")

        for name, allowed in (
            ("task", TASKS),
            ("direction", DIRECTIONS),
            ("schedule", SCHEDULES),
            ("tokenizer", TOKENIZERS),
            ("device", DEVICES),
            ("teacher_pick", TEACHER_PICKS),
        ):
            if getattr(self, name) not in allowed:
                bad(f"{name}={getattr(self, name)!r}, expected one of {allowed}")
        if self.task == "translation" and self.tokenizer != "bpe":
            bad("translation needs tokenizer='bpe'")
        if self.lowercase and self.tokenizer != "bpe":
            bad("lowercase needs tokenizer='bpe' (a char tokenizer keeps every character)")
        if self.teacher is not None and self.task != "translation":
            bad("teacher (distillation) is for translation runs")
        if self.distilled is not None and self.teacher is None:
            bad("distilled (the teacher's translations) needs teacher")
        if not 0 <= self.word_kd <= 1:
            bad(f"word_kd={self.word_kd} must be in [0, 1]")
        if self.word_kd and not self.init_from_teacher:
            bad("word_kd needs init_from_teacher (the teacher's tokenizer)")
        positive = ["epochs", "batch_tokens", "max_iters", "eval_interval"]
        positive += ["eval_iters", "block_size", "batch_size", "warmup", "average_last"]
        positive += ["teacher_beams", "word_kd_topk"]
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
        if not isinstance(self.model, ModelConfig):
            bad(f"model must be a ModelConfig, got {type(self.model).__name__}")
        ids = {k: getattr(self.model, k) for k in SPECIAL_IDS}
        if ids != SPECIAL_IDS:
            bad(f"model special ids {ids} differ from the tokenizer's {SPECIAL_IDS}")
        lm = self.task == "lm"
        family = "decoder-only" if lm else "encoder-decoder"
        max_len = self.block_size if lm else self.model.max_len
        self.model = replace(self.model, family=family, max_len=max_len)  # re-validated
        if not lm and self.batch_tokens < self.model.max_len:
            bad(f"batch_tokens={self.batch_tokens} is smaller than max_len={self.model.max_len}")

    def training_data(self) -> TrainingData:
        """The record of what this run trains on, stored in its checkpoints (core.data)."""
        bundled = self.data_dir is None
        if self.task == "lm":
            return TrainingData("tinyshakespeare", bundled, self.tokenizer)
        return TrainingData("multi30k", bundled, self.tokenizer, self.src_lang, self.tgt_lang)

    @property
    def src_lang(self) -> str:
        return self.direction.split("-")[0]

    @property
    def tgt_lang(self) -> str:
        return self.direction.split("-")[1]

    def model_config(self, vocab_size: int) -> ModelConfig:
        """The model to build: `self.model` with the tokenizer's vocabulary size."""
        return replace(self.model, vocab_size=vocab_size)

    def to_dict(self) -> dict:
        return asdict(self)  # {"task": ..., "model": {ModelConfig}, ...}

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        """From to_dict() output; ModelConfig fields may also be given flat (`d_model=...`, as
        CLI overrides and configs saved before the model was nested), they override `model`."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known - set(MODEL_FIELDS))
        if unknown:
            raise ValueError(f"invalid TrainConfig: unknown fields {unknown}")
        base = d.get("model", {})
        if isinstance(base, ModelConfig):
            base = base.to_dict()
        if not isinstance(base, dict):
            raise ValueError(f"invalid TrainConfig: model must be a dict, got {base!r}")
        flat = {k: v for k, v in d.items() if k in MODEL_FIELDS and k not in known}
        top: dict[str, Any] = {k: v for k, v in d.items() if k in known and k != "model"}
        return cls(**top, model=default_model(**(base | flat)))


def _lm(model: dict, **kw) -> TrainConfig:
    """nanoGPT shakespeare-char defaults: pre-LN GPT, learned positions, GELU, char tokens."""
    arch = dict(activation="gelu", norm="pre", positional="learned")
    base: dict[str, Any] = dict(
        task="lm", tokenizer="char", schedule="cosine", warmup=100, beta2=0.99
    )
    base |= dict(weight_decay=0.1, label_smoothing=0.0)
    return TrainConfig(model=default_model(**(arch | model)), **(base | kw))


# full recipe (GPU): base-like model, beam 5 target >= 40 lowercased BLEU on test_2016_flickr;
# dropout at fairseq's sites as in the long CPU recipe (there: epoch-30 val loss 1.90, not 2.12)
GPU_TRANSLATION = TrainConfig(
    model=default_model(
        vocab_size=8000, dropout=0.3, attention_dropout=0.0, activation_dropout=0.0
    ),
    direction="en-de",
    epochs=40,
    batch_tokens=4096,  # ~140 steps an epoch
    lr=1e-3,
    warmup=1000,
    bleu_sentences=1014,
)

# CPU recipe: 25 minutes on 2 cores (a 2.2M-parameter model at ~6.2k tokens/s); test BLEU 31 /
# 33.6 (greedy / beam 5), val BLEU 32 (docs/lab/training.md, 2026-11-22)
CPU_TRANSLATION = TrainConfig(
    model=default_model(
        vocab_size=6000,
        d_model=128,
        n_heads=4,
        n_encoder_layers=3,
        n_decoder_layers=3,
        d_ff=512,
        dropout=0.1,
    ),
    direction="en-de",
    epochs=10,  # ~2.5 min an epoch on 2 cores
    batch_tokens=3000,
    lr=2e-3,
    warmup=400,
    bleu_sentences=200,
    average_last=3,
    threads=2,
)

# longer CPU recipe: 80 minutes on 2 cores; Transformer-Tiny-like 4+4 x 128, FFN 256, with
# fairseq's dropout sites (0.3 on embeddings and residuals, none on attention weights or the
# FFN's inside); test beam 5 38.0 lowercased, val 37.3 (docs/lab/training.md, 2026-11-24)
CPU_TRANSLATION_LONG = replace(
    CPU_TRANSLATION,
    model=replace(
        CPU_TRANSLATION.model,
        n_encoder_layers=4,
        n_decoder_layers=4,
        d_ff=256,
        dropout=0.3,
        attention_dropout=0.0,
        activation_dropout=0.0,
    ),
    epochs=40,  # ~2 min an epoch on 2 cores
    lr=2.5e-3,
    warmup=800,
    average_last=10,
)

# distilled student (train/distill.py; docs/training.md, distillation): the teacher, a checkpoint
# folder, cut to 3 encoder + 1 decoder layers without linear biases (decode cost is the
# decoder's), fine-tuned 32 epochs on the hypothesis of its beam of 8 closest to the reference,
# with word-level KD from its top 64 tokens: 0.61-0.83 behind the teacher on test (four runs) at
# 2.1x its batch-1 speed, where the 4+2 before it was 0.25 behind at 1.6x; the last 10 epochs beat
# the last 16 on validation; a beam of 5 is level on validation, 0.31 behind on test
# (docs/design-notes.md)
CPU_STUDENT = replace(
    CPU_TRANSLATION,
    # (with --no-init-from-teacher: this shape from random weights, its own 4k BPE)
    model=replace(
        CPU_TRANSLATION.model,
        vocab_size=4000,
        n_encoder_layers=3,
        n_decoder_layers=1,
        d_ff=256,
        bias=False,
    ),
    epochs=32,
    average_last=10,
    init_from_teacher=True,
    word_kd=0.5,
    teacher_beams=8,
    teacher_pick="closest",
)
STUDENTS = ("multi30k-en-de-student",)  # presets that train on a teacher's translations

PRESETS: dict[str, TrainConfig] = {
    # demo: a small model on Multi30k en->de, ~4 minutes on 2 idle CPU cores (val BLEU: README)
    "tiny": TrainConfig(
        model=default_model(
            vocab_size=2000,
            d_model=128,
            n_heads=4,
            n_encoder_layers=2,
            n_decoder_layers=2,
            d_ff=256,
            dropout=0.1,
        ),
        epochs=3,  # all of Multi30k, ~100 s an epoch on 2 idle cores
        batch_tokens=3000,
        lr=3e-3,
        warmup=150,
        bleu_sentences=1014,  # the whole val set: the BLEU `make demo` prints
        average_last=1,
        samples=8,
        threads=2,
    ),
    "multi30k-en-de": GPU_TRANSLATION,  # full recipes (GPU), in both directions
    "multi30k-de-en": replace(GPU_TRANSLATION, direction="de-en"),
    "multi30k-en-de-cpu": CPU_TRANSLATION,
    "multi30k-en-de-cpu-long": CPU_TRANSLATION_LONG,
    "multi30k-en-de-student": CPU_STUDENT,
    "shakespeare-char": _lm(
        model=dict(
            d_model=384,
            n_heads=6,
            n_decoder_layers=6,
            d_ff=1536,
            dropout=0.2,
        ),
        block_size=256,
        batch_size=64,
        max_iters=5000,
        eval_interval=250,
        eval_iters=200,
        lr=1e-3,
        min_lr=1e-4,
    ),
    # nanoGPT's CPU model (4 x 128, block 64, batch 12) with rotary positions instead of learned
    # ones, at lr 2e-3 for 2500 iters; nanoGPT's own final 1.874 by iter 750-900 instead of ~1750
    # with learned positions (benchmarks/train_speed.py, docs/training.md)
    "shakespeare-char-cpu": _lm(
        model=dict(
            d_model=128,
            n_heads=4,
            n_decoder_layers=4,
            d_ff=512,
            dropout=0.0,
            positional="rotary",
        ),
        block_size=64,
        batch_size=12,
        max_iters=2500,
        eval_interval=250,
        eval_iters=20,
        lr=2e-3,
        min_lr=1e-4,
        threads=2,  # 61 ms a step against 92 on 1 thread (2 idle cores, 2026-11-27)
    ),
}


def preset(name: str, **overrides) -> TrainConfig:
    """A preset with some fields replaced (re-validated); model fields may be given flat."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}, expected one of {sorted(PRESETS)}")
    return TrainConfig.from_dict(PRESETS[name].to_dict() | overrides)
