"""Quality next to speed (`edgeformer bench --frontier [NAME=]PACKAGE ...`): one point per
trained translation package (a recipe: a teacher, a distilled student, ...) and stack, for every
variant the package has among VARIANTS and for CTranslate2 on the same weights (PEERS: the
package's fp32 weights converted, artifacts.ct2_package_dir), each stack in its own process
(--isolation), with --threads threads:

- bleu: Multi30k test_2016_flickr BLEU of the stack's own translations, beam 5, lowercased
  sacreBLEU (core.metrics.bleu_scores' bleu_lc: the README's protocol); bleu_cased beside it;
- ms_per_sentence: each test sentence translated alone (batch 1), text in, text out, greedy to
  its EOS; the mean over the sentences, timed in the stack's process, in turns of LATENCY_TURN
  sentences that rotate between the stacks of every recipe (as measure.turns), a settle pause
  before each: all the recipes' stacks are open at once, so a student and its teacher are timed
  side by side;
- ms_per_token: the same batch-1 time over the tokens decoded (each greedy translation's ids
  under the package's tokenizer, and its EOS): a recipe with another tokenizer cuts the same
  text into another number of tokens, so compare recipes by ms_per_sentence;
- sentences_per_s: the whole test file through the stack's batch path (ours:
  Translator.translate_file; CTranslate2: translate_batch with its max_batch_size / batch_type,
  the package's tokenizers around it), greedy to EOS, every batching of files.CANDIDATES (--quick:
  QUICK_CANDIDATES; at most --threads sub-batches at once) interleaved between the stacks of every
  recipe, twice (--quick: once): the stack's best, as the `file` workload. Unlike that workload
  (random weights: forced length), a trained model decides its output lengths, so each point
  also gives its greedy BLEU and how many greedy translations equal edgeformer-fp32's (the same
  work where they are equal).

Both speeds decode the same way (SPEED_DECODING); --quality-limit N uses the first N sentences.
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from . import artifacts, files, measure, quality
from .child import Worker
from .files import FileBatching
from .runners import Runner
from .settings import Job, Settings
from .shapes import Shape
from .stacks import Stack, get_stack

if TYPE_CHECKING:
    from tokenizers import Tokenizer

VARIANTS = ("fp32", "int8", "int4", "int8-dynamic")  # the package's, where it has them
PEERS = ("ct2-fp32", "ct2-int8")
PEER_NEEDS = ("ctranslate2", "onnx")  # onnx: reading the package's weights
SPLIT = "test_2016_flickr"
BEAMS = 5
BLEU_DECODING = f"beam {BEAMS}, lowercased sacreBLEU (13a), Multi30k {SPLIT}"
SPEED_DECODING = "greedy (num_beams 1) to EOS, at most max_len new tokens"
LATENCY_TURN = 25  # sentences per turn of the batch-1 timing
WARMUP_SENTENCES = 2


def parse_spec(spec: str) -> tuple[str, Path]:
    """(recipe, package) of a --frontier argument: NAME=PATH, or PATH named after its folder
    (its parent's for a folder named `package`: edgeformer train's runs/NAME/package)."""
    name, sep, path = spec.partition("=")
    if sep and name and path and "/" not in name:
        return name, Path(path)
    p = Path(spec).resolve()
    return (p.parent.name if p.name == "package" else p.name), Path(spec)


def frontier_stacks(variants: list[str], selected: list[Stack]) -> list[Stack]:
    """The frontier's stacks of one package among the selected ones (--stacks)."""
    names = [f"edgeformer-{v}" for v in VARIANTS if v in variants] + list(PEERS)
    chosen = {s.name for s in selected}
    return [get_stack(n) for n in names if n in chosen]


@dataclasses.dataclass
class _Entry:
    """One recipe's stack: its runner (in a process of its own) and the recipe's test set."""

    recipe: str
    path: Path
    stack: Stack
    runner: Runner
    sources: list[str]
    refs: list[str]
    tokenizer: Tokenizer  # the package's (target side): counts the output tokens

    @property
    def key(self) -> str:
        return f"{self.recipe}: {self.stack.name}"


def run(settings: Settings, work: Path, selected: list[Stack]) -> tuple[list[dict], list[dict]]:
    """(points, skipped stacks) of every --frontier package. Every recipe's stacks are open at
    once and timed in turns that rotate between all of them, so the ratios between recipes (a
    student against its teacher) are as paired as those between the stacks of one recipe: a
    host that slows down for a minute slows every recipe, not the one measured then."""
    recipes = [parse_spec(s) for s in settings.frontier]
    names = [r for r, _ in recipes]
    if len(set(names)) != len(names):
        raise ValueError(f"--frontier: two packages have the same recipe name in {names}; "
                         "name them: --frontier NAME=PATH")  # fmt: skip
    entries: dict[str, _Entry] = {}
    skipped: list[dict] = []
    try:
        for recipe, path in recipes:
            opened, failed = _open_recipe(recipe, path, settings, work, selected)
            entries |= {e.key: e for e in opened}
            skipped += failed
        found = _measure(entries, settings)
    finally:
        for e in entries.values():
            if e.runner.close:
                e.runner.close()
    for key, reason in found.pop("_failed").items():
        skipped.append({"recipe": entries[key].recipe, "stack": entries[key].stack.name,
                        "reason": reason})  # fmt: skip
    points: list[dict] = []
    for recipe, path in recipes:
        print(f"== {recipe} ({path})")
        for skip in skipped:
            if skip["recipe"] == recipe:
                print(f"  skip {skip['stack']}: {skip['reason']}")
        mine = [e for e in entries.values() if e.recipe == recipe and e.key in found["bleu"]]
        points += [_point(e, found, mine, settings.threads) for e in mine]
    return points, skipped


def _open_recipe(
    recipe: str, path: Path, settings: Settings, work: Path, selected: list[Stack]
) -> tuple[list[_Entry], list[dict]]:
    """The recipe's stacks, each opened in its own process, and those that could not be."""
    from ..core.format import TOKENIZER_FILE
    from ..runtime.package import load_package
    from ..runtime.tokenizer import load_tokenizer

    pkg = load_package(path)
    if pkg.family != "encoder-decoder":
        raise ValueError(f"--frontier {path}: not a translation (encoder-decoder) package")
    src_lang, tgt_lang = quality.direction(path)
    sources = quality.multi30k(SPLIT, src_lang, settings.quality_limit)
    refs = quality.multi30k(SPLIT, tgt_lang, settings.quality_limit)
    job = Job("", Shape("ed", pkg.config.model), work, settings, package=path, frontier=True)
    print(f"== frontier: {recipe} ({path}), {len(sources)} sentences {src_lang}-{tgt_lang}")
    tok = load_tokenizer(path / TOKENIZER_FILE, pkg.config.model.vocab_size, str(path))
    opened: list[_Entry] = []
    skipped: list[dict] = []
    for s in frontier_stacks(pkg.variants, selected):
        try:
            if s.name in PEERS:
                missing = [m for m in PEER_NEEDS if not artifacts.installed(m)]
                if missing:
                    raise RuntimeError(f"not installed: {', '.join(missing)}")
                artifacts.ct2_package_dir(path, work, int8=s.precision == "int8")
            r = _open(s, job.with_stack(s.name))
            if r.sentences_ms is None:
                raise RuntimeError("no text path")
            opened.append(_Entry(recipe, path, s, r, sources, refs, tok))
        except Exception as e:  # reported, not fatal
            skipped.append({"recipe": recipe, "stack": s.name, "reason": _err(e)})
    return opened, skipped


def _point(e: _Entry, found: dict, recipe_entries: list[_Entry], threads: int | None) -> dict:
    """The JSON point of one recipe's stack (printed as a line)."""
    name, outs = e.stack.name, found["greedy"][e.key]
    fp32 = next((found["greedy"][x.key] for x in recipe_entries
                 if x.stack.name == "edgeformer-fp32"), None)  # fmt: skip
    best = found["file"][e.key]
    p = {
        "recipe": e.recipe,
        "package": str(e.path),
        "stack": name,
        "engine": "ctranslate2" if name in PEERS else "edgeformer",
        "variant": e.stack.variant or e.stack.precision,
        "bleu": found["bleu"][e.key]["bleu_lc"],
        "bleu_cased": found["bleu"][e.key]["bleu"],
        "bleu_decoding": BLEU_DECODING,
        "ms_per_sentence": statistics.fmean(found["ms"][e.key]),
        "ms_per_token": sum(found["ms"][e.key]) / _output_tokens(e.tokenizer, outs),
        "sentences_per_s": files.sentences_per_s(len(e.sources), best["ms"]),
        "file_batching": {k: v for k, v in best.items() if k != "ms"},
        "speed_decoding": SPEED_DECODING,
        "sentences": len(e.sources),
        "bleu_greedy": _bleu_lc(outs, e.refs),
        "same_as_fp32": sum(a == b for a, b in zip(outs, fp32)) / len(outs) if fp32 else None,
        "size_mb": round(artifacts.dir_size(e.runner.files) / 2**20, 2),
        "threads": threads,
    }
    print(f"  {name:<24} BLEU {p['bleu']:6.2f}  {p['size_mb']:7.2f} MB  "
          f"{p['ms_per_sentence']:8.2f} ms/sentence  "
          f"{p['sentences_per_s']:8.1f} sentences/s")  # fmt: skip
    return p


def _output_tokens(tok: Tokenizer, translations: list[str]) -> int:
    """The tokens a decoder produced for these translations: each one's ids under the
    package's tokenizer, and its EOS."""
    return sum(len(tok.encode(t, add_special_tokens=False).ids) + 1 for t in translations)


def _open(s: Stack, job: Job) -> Runner:
    """The stack's runner: in a process of its own (--isolation process), else loaded here."""
    if job.settings.isolation == "process":
        return Worker(job).runner()
    return s.load(job)


def _bleu_lc(hyps: list[str], refs: list[str]) -> float:
    from edgeformer.core.metrics import bleu_scores

    return bleu_scores(hyps, refs)["bleu_lc"]


def _measure(entries: dict[str, _Entry], settings) -> dict:
    """{"bleu": {key: bleu_scores}, "ms": {key: [ms per sentence]}, "greedy": {key:
    [translation]}, "file": {key: best run}, "_failed": {key: reason}} for the
    entries (every recipe's stacks) that did every part; one that fails is dropped with its
    reason. The timings rotate between all the entries."""
    from edgeformer.core.metrics import bleu_scores

    live = {k: e.runner for k, e in entries.items()}
    failed: dict[str, str] = {}

    def attempt(key: str, fn, *args):
        try:
            return fn(*args)
        except Exception as e:
            failed[key] = _err(e)
            live.pop(key, None)
            print(f"  {key} failed: {failed[key]}")
            return None

    bleu: dict[str, dict] = {}
    for key, r in list(live.items()):  # quality: not timed
        assert r.translate_texts is not None
        began = time.perf_counter()
        hyps = attempt(key, r.translate_texts, entries[key].sources, BEAMS)
        if hyps is not None:
            bleu[key] = bleu_scores(hyps, entries[key].refs)
            print(f"  BLEU {key:<36} {bleu[key]['bleu_lc']:6.2f} (beam {BEAMS}, lowercased; "
                  f"{time.perf_counter() - began:.1f} s)")  # fmt: skip

    ms: dict[str, list[float]] = {k: [] for k in live}
    greedy: dict[str, list[str]] = {k: [] for k in live}
    for key, r in list(live.items()):
        assert r.sentences_ms is not None
        attempt(key, r.sentences_ms, entries[key].sources[:WARMUP_SENTENCES])  # warm-up, untimed
    began = time.perf_counter()
    n = max((len(e.sources) for e in entries.values()), default=0)
    for turn, start in enumerate(range(0, n, LATENCY_TURN)):
        keys = list(live)
        k = turn % max(len(keys), 1)
        for key in keys[k:] + keys[:k]:
            part = entries[key].sources[start : start + LATENCY_TURN]
            if key not in live or not part:
                continue
            time.sleep(measure.SETTLE_S)
            got = attempt(key, live[key].sentences_ms, part)
            if got is not None:
                ms[key] += got[0]
                greedy[key] += got[1]
    print(f"  batch 1: {n} sentences per stack, {len(live)} stacks in turns "
          f"({time.perf_counter() - began:.0f} s)")  # fmt: skip
    began = time.perf_counter()
    best: dict[str, dict] = {}
    candidates = files.QUICK_CANDIDATES if settings.quick else files.CANDIDATES
    # sub-batches at once only within the thread budget (each gets threads // inter_threads)
    candidates = tuple(c for c in candidates if c.inter_threads <= settings.threads)
    with tempfile.TemporaryDirectory(prefix="edgeformer-frontier-") as d:
        src: dict[str, Path] = {}  # each recipe's test file, and its first 32 lines
        warm: dict[str, Path] = {}
        test_sets = {e.recipe: e.sources for e in entries.values()}
        for i, (recipe, sources) in enumerate(test_sets.items()):
            text = [s + "\n" for s in sources]
            src[recipe], warm[recipe] = Path(d) / f"src{i}.txt", Path(d) / f"warm{i}.txt"
            src[recipe].write_text("".join(text), encoding="utf-8")
            warm[recipe].write_text("".join(text[:32]), encoding="utf-8")
        for i, (key, r) in enumerate(list(live.items())):  # warm-up (and load), untimed
            assert r.text_file_ms is not None
            for inter in sorted({c.inter_threads for c in candidates}):
                batching = FileBatching(32, inter_threads=inter)
                attempt(key, r.text_file_ms, warm[entries[key].recipe], Path(d) / f"out{i}.txt",
                        batching)  # fmt: skip
        runs: dict[str, list[dict]] = {k: [] for k in live}
        for _ in range(1 if settings.quick else 2):
            for b in candidates:
                for i, key in enumerate(list(live)):
                    time.sleep(measure.SETTLE_S)
                    out = Path(d) / f"out{i}.txt"
                    ms_file = attempt(key, live[key].text_file_ms, src[entries[key].recipe], out, b)
                    if ms_file is not None:
                        runs[key].append({**dataclasses.asdict(b), "ms": ms_file})
        for key in live:
            best[key] = min(runs[key], key=lambda row: row["ms"])
    print(f"  file: {len(candidates)} batchings x {1 if settings.quick else 2} per stack, "
          f"in turns ({time.perf_counter() - began:.0f} s)")  # fmt: skip
    done = [k for k in live if k in bleu and len(ms[k]) == len(entries[k].sources)]
    return {
        "bleu": {k: bleu[k] for k in done},
        "ms": {k: ms[k] for k in done},
        "greedy": {k: greedy[k] for k in done},
        "file": {k: best[k] for k in done},
        "_failed": failed,
    }


def _err(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0][:300] if msg else ''}"
