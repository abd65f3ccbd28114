"""Sequence-level knowledge distillation (Kim & Rush, 2016): a student learns the teacher's
beam-search translations of the training sources instead of the human references.

    --teacher DIR (a model package, or a checkpoint exported to OUT/teacher-package, fp32)
        |  beam search, batched, through edgeformer.runtime (what the student will ship on)
        v
    OUT/distilled/train.{src,tgt} + key.json   (or --distilled DIR, shared by several students;
        |                                       reused while teacher, sources and beams match)
        |
        v
    the student trains on (source, teacher's translation) pairs like any Multi30k run;
    validation and BLEU stay on the human references

The teacher's translations are simpler and more consistent than the references, so a much
smaller model (here: a deep encoder and one decoder layer, decode cost being the decoder's)
gets closer to the teacher than it would on the references (docs/training.md, distillation).

With --init-from-teacher the student does not start from random weights but as the teacher
cut to its layer counts (Shleifer & Rush, 2020, "shrink and fine-tune"):

    teacher checkpoint (4+4)   embeddings, encoder layers 0 1 2 3, decoder layers 0 1 2 3
        |  keep evenly spaced layers (spaced_layers), first and last among them
        v
    student (4+1)              embeddings, encoder layers 0 1 2 3, decoder layer 0
                               (the teacher's tokenizer, width, FFN and positions)
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from edgeformer.core.config import ModelConfig
from edgeformer.core.files import atomic_text, sha256
from edgeformer.core.format import CONFIG_FILE, GOLDEN_FILE, PACKAGE_FORMAT
from edgeformer.core.progress import Progress

from .config import TrainConfig

DISTILLED = "distilled"  # OUT/distilled: the teacher's translations of the training sources
TEACHER_PACKAGE = "teacher-package"  # OUT/teacher-package: a checkpoint teacher, exported
KEY_FILE = "key.json"
BATCH = 32  # sentences per runtime batch (x beams hypotheses)


@dataclass(frozen=True)
class Distilled:
    """The student's training pairs: sources and the teacher's translations of them."""

    sources: list[str]
    targets: list[str]
    dropped: int  # sources the teacher could not take (too long) or translated to nothing
    seconds: float  # 0.0 when read back from OUT/distilled


def is_package(folder: Path) -> bool:
    try:
        return json.loads((folder / CONFIG_FILE).read_text()).get("format") == PACKAGE_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def teacher_package(teacher: Path, out: Path, say: Callable[[str], None]) -> Path:
    """The teacher as a model package: itself, or its checkpoint exported (fp32, once)."""
    if is_package(teacher):
        return teacher
    if not (teacher / "model.safetensors").is_file():
        raise ValueError(
            f"--teacher {teacher}: neither a model package (edgeformer export's output) nor a "
            "checkpoint folder (a training run's averaged/, best/ or last/)"
        )
    target = out / TEACHER_PACKAGE
    stamp = out / f"{TEACHER_PACKAGE}.from"  # beside it: export --force replaces only packages
    origin = f"{teacher.resolve()} {sha256(teacher / 'model.safetensors')}"
    if is_package(target) and stamp.is_file() and stamp.read_text() == origin:
        return target
    from edgeformer.export import export_package

    say(f"teacher: exporting {teacher} to {target} (fp32)")
    export_package(teacher, target, ("fp32",), force=True, verbose=False)
    stamp.write_text(origin)
    return target


def distill_key(package: Path, sources: list[str], beams: int) -> dict:
    """What the translations depend on: the teacher's files (the sha256 of each, as its
    config.json lists them; not the folder, which differs between students of one checkpoint,
    nor config.json itself, which holds export's timings, nor golden.json, PyTorch's reference
    logits, whose last bits follow export's thread count), the sources and the beam size."""
    files = json.loads((package / CONFIG_FILE).read_text())["files"]
    files = {name: digest for name, digest in files.items() if name != GOLDEN_FILE}
    text = "\n".join(sources).encode()
    return {
        "teacher_files_sha256": hashlib.sha256(
            json.dumps(files, sort_keys=True).encode()
        ).hexdigest(),
        "sources_sha256": hashlib.sha256(text).hexdigest(),
        "beams": beams,
    }


def read_cached(folder: Path, key: dict, src: str, tgt: str) -> Distilled | None:
    try:
        saved = json.loads((folder / KEY_FILE).read_text())
        if {k: saved.get(k) for k in key} != key:
            return None
        sources = (folder / f"train.{src}").read_text().split("\n")[:-1]
        targets = (folder / f"train.{tgt}").read_text().split("\n")[:-1]
    except (OSError, ValueError):
        return None
    if len(sources) != len(targets) or not sources:
        return None
    return Distilled(sources, targets, int(saved.get("dropped", 0)), 0.0)


def check_direction(package: Path, src: str, tgt: str) -> None:
    task = json.loads((package / CONFIG_FILE).read_text()).get("task", {})
    if task.get("kind") != "translation":
        raise ValueError(f"--teacher {package}: not a translation model (task {task})")
    if (task.get("src_lang"), task.get("tgt_lang")) != (src, tgt):
        raise ValueError(
            f"--teacher {package} translates {task.get('src_lang')}-{task.get('tgt_lang')}, "
            f"the run is {src}-{tgt}"
        )


def distill(
    sources: list[str], out: Path, cfg: TrainConfig, say: Callable[[str], None] = print
) -> Distilled:
    """cfg.teacher's beam translations (cfg.teacher_beams) of `sources`, through the runtime on
    cfg.threads, cached in cfg.distilled or OUT/distilled; sources it cannot take or translates
    to nothing are dropped (counted)."""
    from edgeformer.runtime import Translator

    assert cfg.teacher is not None
    src, tgt, beams, threads = cfg.src_lang, cfg.tgt_lang, cfg.teacher_beams, cfg.threads
    package = teacher_package(Path(cfg.teacher), out, say)
    check_direction(package, src, tgt)
    folder = Path(cfg.distilled) if cfg.distilled else out / DISTILLED
    key = distill_key(package, sources, beams)
    cached = read_cached(folder, key, src, tgt)
    if cached is not None:
        say(f"teacher: {len(cached.sources):,} translations from {folder} (same teacher)")
        return cached
    translator = Translator(package, "fp32", threads=threads or None)
    fits = [t for t in sources if _fits(translator, t)]
    say(
        f"teacher: translating {len(fits):,} training sources with {package} "
        f"(beam {beams}, batches of {BATCH}, {threads or 'all'} threads)"
    )
    t0 = time.time()
    bar = Progress("teacher translations", len(fits), "sentences", quiet=cfg.quiet)
    hyps = []
    for h in translator.translate_iterable(fits, max_batch_size=BATCH, num_beams=beams):
        hyps.append(h)
        bar.advance(1)
    bar.close()
    seconds = time.time() - t0
    pairs = [(s, h) for s, h in zip(fits, hyps) if h.strip()]
    dropped = len(sources) - len(pairs)
    if not pairs:
        raise ValueError(
            f"--teacher {cfg.teacher} translated none of the {len(sources):,} training sources "
            "(each too long for it, or translated to nothing): is it trained for this data?"
        )
    folder.mkdir(parents=True, exist_ok=True)
    for name, lines in ((src, [s for s, _ in pairs]), (tgt, [h for _, h in pairs])):
        with atomic_text(folder / f"train.{name}") as f:
            f.write("".join(line.replace("\n", " ") + "\n" for line in lines))
    with atomic_text(folder / KEY_FILE) as f:
        made = {"teacher": str(package.resolve()), "dropped": dropped, "seconds": round(seconds, 1)}
        json.dump(key | made, f, indent=1)
    say(
        f"teacher: {len(pairs):,} translations in {seconds:.0f} s "
        f"({len(fits) / max(seconds, 1e-9):.1f} sentences/s), {dropped} dropped -> {folder}"
    )
    return Distilled([s for s, _ in pairs], [h for _, h in pairs], dropped, seconds)


def spaced_layers(total: int, keep: int) -> list[int]:
    """`keep` of `total` layers, evenly spaced, the first and (keep > 1) the last among them:
    the teacher's layers a shrunk student starts from (Shleifer & Rush's distilBART copies
    so: 1 of 12 -> [0], 3 of 12 -> [0, 6, 11]; here 1 of 4 -> [0], 2 of 4 -> [0, 3])."""
    if not 1 <= keep <= total:
        raise ValueError(f"cannot keep {keep} of {total} layers")
    if keep == 1:
        return [0]
    return [round(i * (total - 1) / (keep - 1)) for i in range(keep)]


def shrunk_config(teacher: ModelConfig, student: ModelConfig) -> ModelConfig:
    """The teacher's shape with the student's layer counts, dropout and (only to drop them)
    linear biases: all a student that starts from the teacher's weights can change."""
    for side in ("n_encoder_layers", "n_decoder_layers"):
        if getattr(student, side) > getattr(teacher, side):
            raise ValueError(
                f"--init-from-teacher: the student's {side} ({getattr(student, side)}) is more "
                f"than the teacher's ({getattr(teacher, side)})"
            )
    if student.bias and not teacher.bias:
        raise ValueError("--init-from-teacher: the teacher's linear layers have no biases to keep")
    keep = ("n_encoder_layers", "n_decoder_layers", "dropout", "attention_dropout",
            "activation_dropout", "bias")  # fmt: skip
    return replace(teacher, **{k: getattr(student, k) for k in keep})


def shrunk_weights(teacher: dict, t_cfg: ModelConfig, s_cfg: ModelConfig) -> dict:
    """The teacher's state dict with only the spaced_layers of each stack, renumbered, and
    without its linear layers' biases when the student has none (s_cfg.bias False)."""
    keep = {
        "encoder": spaced_layers(t_cfg.n_encoder_layers, s_cfg.n_encoder_layers),
        "decoder": spaced_layers(t_cfg.n_decoder_layers, s_cfg.n_decoder_layers),
    }
    out = {}
    for source, value in teacher.items():
        name = source
        stack, _, rest = name.partition(".")
        if stack in keep:
            index, _, inner = rest.partition(".")
            if int(index) not in keep[stack]:
                continue
            name = f"{stack}.{keep[stack].index(int(index))}.{inner}"
        linear_bias = name.endswith(".bias") and teacher[source[:-5] + ".weight"].dim() == 2
        if linear_bias and not s_cfg.bias:
            continue
        out[name] = value
    return out


def checkpoint_teacher(teacher: Path) -> Path:
    """--init-from-teacher's teacher: a checkpoint folder (a package holds only graphs)."""
    if not (teacher / "model.safetensors").is_file():
        raise ValueError(
            f"--init-from-teacher: --teacher {teacher} is not a checkpoint folder (a training "
            "run's averaged/, best/ or last/); a model package holds graphs, not the weights "
            "a student starts from"
        )
    return teacher


def _fits(translator, text: str) -> bool:
    try:
        return bool(translator.source_ids(text))
    except ValueError:  # longer than the teacher's positions, or not a valid text
        return False
