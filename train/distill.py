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
                               (the teacher's tokenizer, width, FFN and positions;
                               --decoder-d-ff widens the decoder's FFN, new units zeroed out)
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from edgeformer.core.config import ModelConfig
from edgeformer.core.files import atomic_text, sha256
from edgeformer.core.format import CONFIG_FILE, GOLDEN_FILE, PACKAGE_FORMAT
from edgeformer.core.metrics import sentence_bleu
from edgeformer.core.progress import Progress

if TYPE_CHECKING:
    import torch

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
    export_package(teacher, target, force=True, verbose=False, verify=False)
    stamp.write_text(origin)
    return target


def distill_key(
    package: Path,
    sources: list[str],
    beams: int,
    pick: str = "top",
    references: Sequence[str] = (),
) -> dict:
    """What the translations depend on: the teacher's files (the sha256 of each, as its
    config.json lists them; not the folder, which differs between students of one checkpoint,
    nor config.json itself, which holds export's timings, nor golden.json, PyTorch's reference
    logits, whose last bits follow export's thread count), the sources, the beam size, the pick
    and (pick closest) the references."""
    files = json.loads((package / CONFIG_FILE).read_text())["files"]
    files = {name: digest for name, digest in files.items() if name != GOLDEN_FILE}
    key = {
        "teacher_files_sha256": _sha256_text(json.dumps(files, sort_keys=True)),
        "sources_sha256": _sha256_text("\n".join(sources)),
        "beams": beams,
        "pick": pick,
    }
    if pick == "closest":
        key["references_sha256"] = _sha256_text("\n".join(references))
    return key


def _sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def read_cached(folder: Path, key: dict, src: str, tgt: str) -> Distilled | None:
    try:
        saved = {"pick": "top"} | json.loads((folder / KEY_FILE).read_text())  # older: top
        if {k: saved.get(k) for k in key} != key:
            return None
        sources = (folder / f"train.{src}").read_text().split("\n")[:-1]
        targets = (folder / f"train.{tgt}").read_text().split("\n")[:-1]
    except (OSError, ValueError):
        return None
    if len(sources) != len(targets) or not sources:
        return None
    return Distilled(sources, targets, int(saved.get("dropped", 0)), 0.0)


def check_distilled(folder: Path, src: str, tgt: str) -> None:
    """Refuse a folder whose train.SRC / train.TGT the teacher's translations would overwrite
    but that no distillation made (no key.json of one beside them): a user's own data, say."""
    try:
        key = json.loads((folder / KEY_FILE).read_text())
    except (OSError, ValueError):
        key = None
    if isinstance(key, dict) and "sources_sha256" in key:
        return  # a teacher's translations (of another teacher, maybe): the cache to replace
    taken = [n for n in (f"train.{src}", f"train.{tgt}", KEY_FILE) if (folder / n).exists()]
    if taken:
        raise FileExistsError(
            f"--distilled {folder} holds {', '.join(taken)}, which are not a teacher's "
            "translations (no key.json of a distillation) and would be overwritten: give a new "
            "or empty folder"
        )


def check_direction(package: Path, src: str, tgt: str) -> None:
    """The teacher (a package, or a checkpoint: both keep the task in config.json) translates
    src -> tgt; ValueError naming it otherwise."""
    try:
        task = json.loads((package / CONFIG_FILE).read_text()).get("task", {})
    except (OSError, ValueError, AttributeError):
        return  # not a readable teacher: teacher_package names the problem
    if task.get("kind") != "translation":
        raise ValueError(f"--teacher {package}: not a translation model (task {task})")
    if (task.get("src_lang"), task.get("tgt_lang")) != (src, tgt):
        raise ValueError(
            f"--teacher {package} translates {task.get('src_lang')}-{task.get('tgt_lang')}, "
            f"the run is {src}-{tgt}"
        )


def distill(
    sources: list[str],
    out: Path,
    cfg: TrainConfig,
    say: Callable[[str], None] = print,
    references: Sequence[str] | None = None,
) -> Distilled:
    """cfg.teacher's beam translations (cfg.teacher_beams) of `sources`, through the runtime on
    cfg.threads, cached in cfg.distilled or OUT/distilled; sources it cannot take or translates
    to nothing are dropped (counted). cfg.teacher_pick "closest" needs `references` (one per
    source): each source's target is then its beam's hypothesis closest to the reference."""
    from edgeformer.runtime import Translator

    assert cfg.teacher is not None
    src, tgt, beams, threads = cfg.src_lang, cfg.tgt_lang, cfg.teacher_beams, cfg.threads
    pick = cfg.teacher_pick
    if pick == "closest" and (references is None or len(references) != len(sources)):
        raise ValueError("--teacher-pick closest needs one reference per training source")
    refs = references if references is not None else ()
    check_direction(Path(cfg.teacher), src, tgt)  # before a checkpoint is exported into OUT
    package = teacher_package(Path(cfg.teacher), out, say)
    check_direction(package, src, tgt)
    folder = Path(cfg.distilled) if cfg.distilled else out / DISTILLED
    check_distilled(folder, src, tgt)
    key = distill_key(package, sources, beams, pick, refs)
    cached = read_cached(folder, key, src, tgt)
    if cached is not None:
        say(f"teacher: {len(cached.sources):,} translations from {folder} (same teacher)")
        return cached
    translator = Translator(package, "fp32", threads=threads or None)
    fits = [i for i, t in enumerate(sources) if _fits(translator, t)]
    say(
        f"teacher: translating {len(fits):,} training sources with {package} "
        f"(beam {beams}, batches of {BATCH}, {threads or 'all'} threads, pick {pick})"
    )
    t0 = time.time()
    bar = Progress("teacher translations", len(fits), "sentences", quiet=cfg.quiet)
    texts = [sources[i] for i in fits]
    if pick == "top":
        hyps = top_translations(translator, texts, beams, bar)
    else:
        hyps = closest_translations(translator, texts, [refs[i] for i in fits], beams, bar)
    bar.close()
    seconds = time.time() - t0
    pairs = [(s, h) for s, h in zip(texts, hyps) if h.strip()]
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


def top_translations(translator, texts: list[str], beams: int, bar: Progress) -> list[str]:
    """The teacher's most likely hypothesis of each text (translate_iterable's batches)."""
    hyps = []
    for h in translator.translate_iterable(texts, max_batch_size=BATCH, num_beams=beams):
        hyps.append(h)
        bar.advance(1)
    return hyps


def closest_translations(
    translator, texts: list[str], refs: list[str], beams: int, bar: Progress
) -> list[str]:
    """For each text: of the teacher's `beams` best hypotheses, the one with the highest
    sentence BLEU against its reference (the more likely one on a tie). Texts go in batches of
    similar length, as translate_iterable's."""
    by_length = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    chosen = [""] * len(texts)
    for start in range(0, len(by_length), BATCH):
        batch = by_length[start : start + BATCH]
        nbest = translator.translate_batch_nbest(
            [texts[i] for i in batch], num_beams=beams, num_hypotheses=beams
        )
        for i, hyps in zip(batch, nbest):
            found = [h for h, _ in hyps if h.strip()] or [""]
            chosen[i] = max(found, key=lambda h: sentence_bleu(h, refs[i]))  # first max wins
        bar.advance(len(batch))
    return chosen


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
    """The teacher's shape with the student's layer counts, dropout, (only to drop them) linear
    biases and (only to widen it) decoder FFN: all a student that starts from the teacher's
    weights can change."""
    for side in ("n_encoder_layers", "n_decoder_layers"):
        if getattr(student, side) > getattr(teacher, side):
            raise ValueError(
                f"--init-from-teacher: the student's {side} ({getattr(student, side)}) is more "
                f"than the teacher's ({getattr(teacher, side)})"
            )
    if student.bias and not teacher.bias:
        raise ValueError("--init-from-teacher: the teacher's linear layers have no biases to keep")
    if student.decoder_d_ff is not None and student.decoder_d_ff < teacher.decoder_ffn:
        raise ValueError(
            f"--init-from-teacher: the student's decoder_d_ff ({student.decoder_d_ff}) is less "
            f"than the teacher's decoder FFN ({teacher.decoder_ffn}); it can only widen it"
        )
    keep = ("n_encoder_layers", "n_decoder_layers", "dropout", "attention_dropout",
            "activation_dropout", "bias", "decoder_d_ff")  # fmt: skip
    return replace(teacher, **{k: getattr(student, k) for k in keep})


def shrunk_weights(
    teacher: dict, t_cfg: ModelConfig, s_cfg: ModelConfig, student: dict | None = None
) -> dict:
    """The teacher's state dict with only the spaced_layers of each stack, renumbered, and
    without its linear layers' biases when the student has none (s_cfg.bias False). A student
    decoder FFN wider than the teacher's (s_cfg.decoder_d_ff) holds the teacher's units first,
    then `student`'s own (freshly initialised) ones, which start switched off: their columns of
    the down projection are zero, so the student starts as the cut teacher's function."""
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
        if student is not None and student[name].shape != value.shape:
            value = widened_ffn(name, value, student[name])
        out[name] = value
    return out


def widened_ffn(name: str, teacher: torch.Tensor, student: torch.Tensor) -> torch.Tensor:
    """A decoder FFN tensor of the teacher's width F_t inside the student's wider F_s:
    up/gate weight (F_s, C) and bias (F_s,): the teacher's F_t rows, then the student's own;
    down weight (C, F_s): the teacher's F_t columns, then zeros (the new units add nothing)."""
    if ".ffn." not in name or teacher.dim() != student.dim():
        raise ValueError(f"--init-from-teacher: {name} is {tuple(teacher.shape)} in the "
                         f"teacher, {tuple(student.shape)} in the student")  # fmt: skip
    out = student.detach().clone()
    if name.endswith("ffn.down.weight"):
        out[:, teacher.shape[1] :] = 0.0
        out[:, : teacher.shape[1]] = teacher
    else:
        out[: teacher.shape[0]] = teacher
    return out


def checkpoint_teacher(teacher: Path) -> Path:
    """--init-from-teacher's teacher: a checkpoint folder (a package holds only graphs)."""
    if not (teacher / "model.safetensors").is_file():
        raise ValueError(
            f"--init-from-teacher: --teacher {teacher} is not a checkpoint folder (a training "
            "run's averaged/, best/ or last/); a model package holds graphs, not the weights "
            "a student starts from (to train one from random weights on its translations: "
            "--no-init-from-teacher --word-kd 0)"
        )
    return teacher


def _fits(translator, text: str) -> bool:
    try:
        return bool(translator.source_ids(text))
    except ValueError:  # longer than the teacher's positions, or not a valid text
        return False
