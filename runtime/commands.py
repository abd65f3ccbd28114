"""`edgeformer translate`, `generate`, `score` and `info`: the runtime from the command line.

edgeformer translate PACKAGE "A man rides a bike." ["more text" ...]
edgeformer translate PACKAGE --input test.en --output test.de --beam 4   # or < test.en > test.de
edgeformer generate PACKAGE "ROMEO:" --sample --top-p 0.9 --seed 0 --max-new-tokens 200
edgeformer translate PACKAGE "Two dogs." --target-prefix "Zwei" --alternatives --num-hypotheses 3

The decoding flags are GenerationOptions' fields (core.flags derives them, help and defaults
included), so the command line and the Python API take the same options with the same defaults;
a package's generation_config.json changes the defaults of both.

Bad input never costs good input: lines are read as bytes and decoded one by one; a line that is
not UTF-8 (or holds a lone surrogate), or is longer than the model's max_len without --truncate,
is reported on stderr with its 1-based line number and gives an empty output line in its place;
every other line is translated in order, and the exit status is 1 at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from ..core.data import held_out_description
from ..core.decoding import GenerationOptions
from ..core.files import atomic_text
from ..core.flags import add_flags, did_you_mean, given
from ..core.progress import Progress, count_lines, is_terminal
from ..core.schema import HELD_OUT_KEYS
from ..core.variants import pick_variant
from .api import Generator, Translator
from .batching import BATCH_TYPES, READ_AHEAD, Throughput
from .package import BUNDLED, DEFAULT_PACKAGE, Package, bundled_folder, bundled_name
from .session import RuntimeSettings
from .text import text_problem

log = logging.getLogger("edgeformer")
PACKAGE_HELP = (
    "model package folder (edgeformer export), or a bundled package's name: " + ", ".join(BUNDLED)
)


# ---- arguments ------------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser, command: str) -> None:
    if command == "info":
        p.add_argument("package", help=PACKAGE_HELP)
        return
    if command in DEFAULT_PACKAGE:  # `edgeformer translate "A man is riding a bike."`
        p.add_argument(
            "package", nargs="?", metavar="PACKAGE",
            help=f"{PACKAGE_HELP} (default: {DEFAULT_PACKAGE[command]}; a first argument that "
            "is neither a folder nor a bundled name is the first text)",
        )  # fmt: skip
    else:
        p.add_argument("package", help=PACKAGE_HELP)
    what = {
        "translate": "text(s) to translate (default: the lines of --input or stdin)",
        "generate": "prompt(s) (default: the lines of --input or stdin)",
        "score": "translation: 'source<TAB>target'; LM: a text (default: --input or stdin)",
    }[command]
    p.add_argument("texts", nargs="*", metavar="TEXT", help=what)
    io = p.add_argument_group("input and output")
    io.add_argument(
        "--input",
        metavar="FILE",
        help="read the texts from FILE, one per line (default: the TEXT arguments, else stdin)",
    )
    if command in ("translate", "generate"):
        what = "translations" if command == "translate" else "outputs"
        io.add_argument(
            "--output", metavar="FILE",
            help=f"write the {what} to FILE, whole or not at all (default: stdout)",
        )  # fmt: skip
    add_runtime_arguments(p.add_argument_group("runtime"), command)
    if command == "score":
        return
    d = p.add_argument_group(
        "decoding (defaults: the package's generation_config.json where it sets one, else the "
        "values shown; the Python API takes the same options: GenerationOptions)"
    )
    add_flags(d, GenerationOptions, command)
    if command == "translate":
        d.add_argument(
            "--source-lang", metavar="CODE",
            help="a multilingual model's source language, as its tokenizer names it (e.g. "
            "eng_Latn, en_XX; `edgeformer info` lists them) (default: the model's own)",
        )  # fmt: skip
        d.add_argument(
            "--target-lang", metavar="CODE",
            help="a multilingual model's target language (e.g. deu_Latn, de_DE) (default: the "
            "model's forced one, if any)",
        )  # fmt: skip
        d.add_argument(
            "--target-prefix", metavar="TEXT",
            help="force every translation to start with TEXT, scored and included in the output "
            "(default: none)",
        )  # fmt: skip
        d.add_argument(
            "--n-best", type=int, default=1, metavar="K",
            help="print the K best of a beam search (at least K beams) as "
            "'index<TAB>score<TAB>text' lines, index the 0-based input line (default: 1, "
            "plain translations)",
        )  # fmt: skip


def add_runtime_arguments(g: argparse._ArgumentGroup, command: str) -> None:
    """How the package runs (RuntimeSettings' fields, as flags: core.flags) and how its inputs
    are batched and fitted."""
    add_flags(g, RuntimeSettings, command)
    if command == "serve":  # the continuous batch's rows
        g.add_argument(
            "--batch-size", "--max-batch-size", dest="batch_size", type=int, default=16,
            metavar="N", help="requests decoding at once (rows of a model's "
            "continuous batch); more wait for a row (default: 16)",
        )  # fmt: skip
    else:  # --batch-type is translate's only
        tokens = "; with --batch-type tokens, padded source tokens per batch"
        g.add_argument(
            "--batch-size", "--max-batch-size", dest="batch_size", type=int, default=32,
            metavar="N",
            help=f"inputs per batch{tokens if command == 'translate' else ''} (default: 32)",
        )  # fmt: skip
    if command == "score":
        return
    g.add_argument(
        "--truncate", action="store_true",
        help="cut inputs longer than the model's max_len (default: such an input is an error)",
    )  # fmt: skip
    if command == "generate":
        g.add_argument(
            "--draft", metavar="PKG", default=None,
            help="speculative decoding: a smaller package with the same tokenizer drafts "
            "--draft-tokens tokens per step, verified in one call (the same output) "
            "(default: none)",
        )  # fmt: skip
    if command == "translate":
        g.add_argument(
            "--batch-type", choices=BATCH_TYPES, default="examples",
            help="what --batch-size counts (default: examples)",
        )  # fmt: skip
        g.add_argument(
            "--inter-threads", type=int, default=1, metavar="N",
            help="translate N batches at once, each with cores/N threads: throughput on many "
            "inputs (CTranslate2's inter_threads) (default: 1)",
        )  # fmt: skip


def decoding_options(args: argparse.Namespace) -> dict:
    """The GenerationOptions fields the command line sets (the package's generation_config.json
    and GenerationOptions' defaults give the others), checked before the model loads."""
    options = read_constraint_files(given(args, GenerationOptions))
    n_best = getattr(args, "n_best", 1)
    several = options.get("sampling") or options.get("return_alternatives")
    if n_best < 1:
        raise ValueError(f"--n-best {n_best} must be >= 1")
    if n_best > 1:
        if several:
            raise ValueError("--n-best is beam search's: with --sample or --alternatives use "
                             "--num-hypotheses")  # fmt: skip
        options["num_hypotheses"] = n_best
        beams = options.get("num_beams", n_best)  # an invalid --beam stays what it is
        options["num_beams"] = max(beams, n_best) if beams >= 1 else beams
    elif options.get("num_hypotheses", 1) > 1 and not several:
        beam = " (beam search: --n-best)" if args.command == "translate" else ""
        raise ValueError(f"--num-hypotheses needs --sample or --alternatives{beam}")
    if args.batch_size < 1:
        raise ValueError(f"--batch-size {args.batch_size} must be >= 1")
    GenerationOptions(**options)  # invalid values fail before the model loads
    return options


def read_constraint_files(options: dict) -> dict:
    """--json-schema FILE and --grammar FILE: the options take the files' texts."""
    for name in ("json_schema", "grammar"):
        path = options.get(name)
        if path is None:
            continue
        flag = "--" + name.replace("_", "-")
        try:
            options[name] = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"{flag} {path}: cannot read it ({e})") from None
        if name == "json_schema":
            try:
                options[name] = json.loads(options[name])
            except json.JSONDecodeError as e:
                raise ValueError(f"{flag} {path}: not JSON ({e})") from None
    return options


# ---- input lines ----------------------------------------------------------------------------

Line = tuple[int, str | None, str | None]  # (1-based number, text, why it is unreadable)


def refuse_file_argument(args: argparse.Namespace) -> None:
    """`edgeformer translate PKG test.en` would translate the words 'test.en': refused."""
    if len(args.texts) == 1 and os.path.isfile(args.texts[0]) and args.input is None:
        name = args.texts[0]
        raise ValueError(
            f"{name!r} is a file: to {args.command} its lines, use --input {name} (or "
            f"< {name}); to {args.command} the text {name!r} itself, give it on stdin"
        )


def stdin_lines() -> Iterator[Line]:
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text stream (tests, embedding): lines are already decoded
        for n, line in enumerate(sys.stdin, 1):
            text = line.rstrip("\n")
            yield n, text, text_problem(text)
        return
    yield from _byte_lines(stream)


def _byte_lines(stream: IO[bytes]) -> Iterator[Line]:
    for n, raw in enumerate(stream, 1):
        raw = raw.rstrip(b"\n")
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        try:
            yield n, raw.decode("utf-8"), None
        except UnicodeDecodeError as e:
            yield n, None, f"not valid UTF-8 (byte 0x{raw[e.start]:02x} at byte {e.start + 1})"


def input_lines(args: argparse.Namespace) -> Iterator[Line]:
    """Input texts, numbered from 1: the TEXT arguments, the --input file's lines, or stdin's."""
    if args.texts and args.input is not None:
        raise ValueError("give texts as arguments or --input FILE, not both")
    if args.texts:
        for n, text in enumerate(args.texts, 1):
            yield n, text, text_problem(text)  # argv may carry surrogate-escaped bytes
        return
    if args.input is not None:
        with open(args.input, "rb") as f:
            yield from _byte_lines(f)
        return
    yield from stdin_lines()


def interactive(args: argparse.Namespace) -> bool:
    """Lines typed at a terminal: answer each as soon as it is read."""
    return not args.texts and args.input is None and sys.stdin.isatty()


def _checked(lines: Iterator[Line]) -> Iterator[str]:
    """The texts, where any unreadable line is an error (edgeformer score)."""
    for n, text, problem in lines:
        if problem is not None or text is None:
            raise ValueError(f"line {n}: {problem}")
        yield text


def _batches(lines: Iterator, size: int) -> Iterator[list]:
    batch: list = []
    for line in lines:
        batch.append(line)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


@contextlib.contextmanager
def output(args: argparse.Namespace) -> Iterator[IO[str]]:
    """stdout, or --output FILE written whole or not at all."""
    path = getattr(args, "output", None)
    if path is None:
        yield sys.stdout  # a full disk under it: core.commandline.NamedStdout says what it holds
        sys.stdout.flush()
        return
    if args.input is not None and os.path.abspath(path) == os.path.abspath(args.input):
        raise ValueError(f"--output {path} is the --input file")
    with atomic_text(path) as f:
        yield f


def input_progress(args: argparse.Namespace, unit: str) -> Progress:
    """The inputs' progress bar (core.progress) when stderr is a terminal and the outputs do not
    go to it (--output FILE, or stdout redirected), its total the --input file's lines or the
    TEXTs; nothing for lines typed at a terminal or when stderr is a pipe. Its finish() prints
    the summary line (count, time, rate)."""
    to_file = getattr(args, "output", None) is not None or not is_terminal(sys.stdout)
    shown = is_terminal(sys.stderr) and to_file and not interactive(args)
    total = None
    if shown:
        total = len(args.texts) if args.texts else None
        if args.input is not None and os.path.isfile(args.input):
            total = count_lines(args.input)
    source = "" if args.texts else f" {os.path.basename(args.input or '-')}"
    return Progress(f"{args.command}{source}", total, unit, quiet=not shown)


# ---- commands -------------------------------------------------------------------------------


def default_package(args: argparse.Namespace) -> None:
    """translate / generate without a package: the bundled one (DEFAULT_PACKAGE). The first
    argument names a package when it is a folder, a bundled name or a path (has a '/'); else it
    is the first text, unless it is close to a bundled name (a typo: an error that says so)."""
    default = DEFAULT_PACKAGE.get(args.command)
    first = args.package
    if default is None or (first is not None and (
        os.path.isdir(first) or first in BUNDLED or "/" in first or os.sep in first
    )):  # fmt: skip
        return
    if first is not None:
        close = did_you_mean(first, list(BUNDLED))
        if close and not any(c.isspace() for c in first):
            raise ValueError(f"no model package {first!r}{close}")
        args.texts = [first, *args.texts]
    args.package = str(bundled_folder(default))  # not a folder named like it in the cwd
    log.info(f"no package given: the bundled {default}")


def run(args: argparse.Namespace) -> int:
    if args.command == "info":
        from .embed import encoder_info, is_encoder_package

        encoder = is_encoder_package(args.package)
        print(encoder_info(args.package) if encoder else package_info(args.package))
        return 0
    default_package(args)
    refuse_file_argument(args)
    if args.command == "score":
        return run_score(args)
    options = decoding_options(args)
    model = load(args)
    if args.variant == "auto":
        log.info(f"variant {model.variant_reason}")
    threads = f", {args.threads} threads" if args.threads else ""
    log.info(f"{model.variant} on {model.provider}{threads}")
    if isinstance(model, Translator):
        return run_translate(args, model, options)
    return run_generate(args, model, options)


def runtime_of(args: argparse.Namespace) -> RuntimeSettings:
    """The RuntimeSettings the runtime flags say (add_runtime_arguments; the others default)."""
    return RuntimeSettings(**given(args, RuntimeSettings))


def load(args: argparse.Namespace) -> Translator | Generator:
    settings = runtime_of(args)
    if args.command == "translate":
        return Translator(args.package, inter_threads=args.inter_threads, settings=settings)
    return Generator(args.package, draft=getattr(args, "draft", None), settings=settings)


class BadLines:
    """Counts and reports (on stderr, with their number) the lines a model cannot take."""

    def __init__(self, command: str, model: Translator | Generator, truncate: bool, limit: int):
        self.command, self.model, self.truncate, self.limit = command, model, truncate, limit
        self.count = 0

    def usable(self, n: int, text: str | None, problem: str | None) -> bool:
        if problem is None:
            try:
                self.model.check_text(text or "", self.truncate, self.limit)
            except ValueError as e:
                problem = str(e)
        if problem is not None:
            self.count += 1
            print(f"edgeformer {self.command}: line {n}: {problem}", file=sys.stderr, flush=True)
        return problem is None


def run_translate(args: argparse.Namespace, model: Translator, options: dict) -> int:
    effective = model.model.options(**options)
    langs = {"source_lang": args.source_lang, "target_lang": args.target_lang}
    model.check_languages(**langs)  # an unknown code: one error before any input is read
    options = options | langs
    bad = BadLines("translate", model, args.truncate, effective.max_input_length)
    live = interactive(args)
    bar = input_progress(args, "sentences")
    with output(args) as out:
        if effective.num_hypotheses == 1 and args.target_prefix is None:
            lines = (t or "" if bad.usable(n, t, p) else "" for n, t, p in input_lines(args))
            stats = Throughput()
            translations = model.translate_iterable(
                lines, args.batch_size, args.batch_type, args.truncate,
                read_ahead=1 if live else READ_AHEAD, stats=stats, **options,
            )  # fmt: skip
            for text in translations:
                print(text, file=out, flush=live)
                bar.advance()
            bar.finish()
            log.info(stats.summary())
            return 1 if bad.count else 0
        for batch in _batches(input_lines(args), args.batch_size):
            good = [(n, text or "") for n, text, problem in batch if bad.usable(n, text, problem)]
            texts = [text for _, text in good]
            prefix = None if args.target_prefix is None else [args.target_prefix] * len(texts)
            results = model.translate_results(texts, prefix, args.truncate, **options)
            found = dict(zip((n for n, _ in good), results))
            for n, _, _ in batch:  # an unusable line: one 'index<TAB>nan<TAB>' line
                if effective.num_hypotheses == 1:
                    print(found[n].text if n in found else "", file=out)
                    continue
                hyps = [(h.text, h.score) for h in found[n].hypotheses] if n in found else []
                for text, score in hyps or [("", math.nan)]:
                    print(f"{n - 1}\t{score:.4f}\t{text}", file=out)
            out.flush()
            bar.advance(len(batch))
    bar.finish()
    return 1 if bad.count else 0


def run_generate(args: argparse.Namespace, model: Generator, options: dict) -> int:
    effective = model.model.options(**options)
    bad = BadLines("generate", model, args.truncate, effective.max_input_length)
    bar = input_progress(args, "prompts")
    with output(args) as out:
        for n, prompt, problem in input_lines(args):
            bar.advance()
            if not bad.usable(n, prompt, problem):
                print(file=out, flush=True)
                continue
            prompt = prompt or ""
            if effective.num_hypotheses > 1:
                (result,) = model.generate_results([prompt], args.truncate, **options)
                for h in result.hypotheses:
                    print(f"{prompt}{h.text}", file=out, flush=True)
                continue
            print(prompt, end="", file=out, flush=True)
            for piece in model.stream(prompt, args.truncate, **options):
                print(piece, end="", file=out, flush=True)
            print(file=out, flush=True)
    bar.finish()
    return 1 if bad.count else 0


def run_score(args: argparse.Namespace) -> int:
    """One line per input: mean log-prob per token, total log-prob, tokens; LM: perplexity."""
    from .package import load_package

    family = load_package(args.package, verify=False).family
    cls = Translator if family == "encoder-decoder" else Generator
    model = cls(args.package, settings=runtime_of(args))
    total, count, seen = 0.0, 0, 0
    if args.batch_size < 1:
        raise ValueError(f"--batch-size {args.batch_size} must be >= 1")
    bar = input_progress(args, "texts")
    for batch in _batches(_checked(input_lines(args)), args.batch_size):
        if isinstance(model, Translator):
            pairs = [line.split("\t") for line in batch]
            for i, pair in enumerate(pairs):
                if len(pair) != 2:
                    raise ValueError(f"line {seen + i + 1}: expected 'source<TAB>target'")
            results = model.score_batch([p[0] for p in pairs], [p[1] for p in pairs])
        else:
            results = model.score_batch(batch)
        seen += len(batch)
        for r in results:
            print(f"{r.normalized:.4f}\t{r.total:.4f}\t{len(r.log_probs)}")
            total, count = total + r.total, count + len(r.log_probs)
        sys.stdout.flush()
        bar.advance(len(batch))
    bar.finish()
    if count:
        print(f"{count} tokens, mean log-prob {total / count:.4f}, perplexity "
              f"{math.exp(-total / count):.3f}", file=sys.stderr)  # fmt: skip
    return 0


# ---- info -----------------------------------------------------------------------------------


def _names(names: list[str], n: int) -> str:
    return ", ".join(names[:n]) + (f" (+{len(names) - n} more)" if len(names) > n else "")


HELD_OUT_NAMES = {"bleu": "BLEU", "perplexity": "perplexity"}


def measured_legend(pkg: Package) -> list[str]:
    """What info's 'at export' figures were measured on: each names its inputs, its reference
    and (held-out quality) its data, split and decoding."""
    c, golden = pkg.config, pkg.golden()
    calls, k = len(golden.tokens), len(golden.top_ids[0][0]) if golden.top_ids else 0
    lines = [
        "  measured on: agreement = the share of PyTorch's greedy choices the variant makes "
        f"again, over golden.json's {calls} decoder calls x {len(golden.inputs)} inputs; max "
        f"|logit diff| = the largest absolute difference on PyTorch's top-{k} logits of those "
        "calls (export's 'parity' lines measure another run, as a share of the logits' scale); "
        "ms/token = greedy, batch 1, on the exporting machine"
    ]
    keys = [k for k in HELD_OUT_KEYS if any(k in v.measured for v in c.variants.values())]
    pair = "-".join(str(c.task[k]) for k in ("src_lang", "tgt_lang") if k in c.task)
    for key in keys:
        what = held_out_description(key, converted=bool(c.source), pair=pair)
        lines.append(f"  held-out {HELD_OUT_NAMES[key]} = {what}")
    return lines


def package_info(path: str) -> str:
    """What `edgeformer info` prints: model, task, variants with sizes, graphs, requirements."""
    import onnxruntime as ort

    from ..core.format import GENAI_CONFIG_FILE, TOKENIZER_FILE
    from .package import load_package
    from .tokenizer import genai_tokenizer_problem

    pkg = load_package(path)  # checksums verified
    c = pkg.config
    m = c.model
    layers = (
        f"{m.n_encoder_layers}+{m.n_decoder_layers}" if c.family == "encoder-decoder"
        else str(m.n_decoder_layers)
    )  # fmt: skip
    listed = ("languages", "source_prefix", "source_suffix")
    task = ", ".join(f"{k} {v}" for k, v in c.task.items() if k not in listed) or "-"
    codes = list(c.task.get("languages") or {})
    source = " ".join(c.source.get(k, "") for k in ("format", "architecture")).strip()
    bundled = bundled_name(pkg.path)
    lines = [
        f"package      {pkg.path} (format {c.format_version}, checksums verified)",
        *([f"bundled      {bundled}: {BUNDLED[bundled]}"] if bundled else []),
        f"family       {c.family}; task: {task}",
        *([f"source       {source}"] if source else []),
        *([f"languages    {len(codes)}: {' '.join(codes)}"] if codes else []),
        f"model        d_model {m.d_model}, {layers} layers, {m.n_heads} heads, "
        f"vocab {m.vocab_size}, max_len {m.max_len}, {m.norm}-LN, {m.positional}",
        f"onnxruntime  needs >= {c.min_onnxruntime}; here {ort.__version__}, providers "
        f"{', '.join(ort.get_available_providers())} (edgeformer decodes on the CPU provider)",
        "variants",
    ]
    w = max([6, *map(len, c.variants)])
    for name, v in c.variants.items():
        files = v.file_names
        size = sum((pkg.path / f).stat().st_size for f in files) / 1e6
        lines.append(f"  {name:<{w}} {size:8.2f} MB  {v.description}")
        if v.measured:
            x = v.measured
            held = "".join(f", held-out {HELD_OUT_NAMES[k]} {x[k]:.2f}" for k in HELD_OUT_KEYS
                           if k in x)  # fmt: skip
            lines.append(
                f"         at export: agreement with PyTorch {x['agreement']:.3f}, max |logit "
                f"diff| {x['max_logit_diff']:.2e}, {x['ms_per_token']:.3f} ms/token{held}"
            )
    if any(v.measured for v in c.variants.values()):
        lines += measured_legend(pkg)
    _, why = pick_variant(c)
    lines.append(f"  auto -> {why}")
    settings, ignored = pkg.generation_settings()
    shown = ", ".join(f"{k} {v}" for k, v in settings.items()) or "none (greedy search)"
    lines.append(f"decoding     generation_config.json defaults: {shown}")
    if ignored:
        lines.append(f"             not applied by edgeformer: {', '.join(ignored)}")
    if GENAI_CONFIG_FILE in c.files:
        lines.append(f"genai        {GENAI_CONFIG_FILE}: onnxruntime-genai can run decoder.onnx")
        problem = genai_tokenizer_problem(pkg.path / TOKENIZER_FILE)
        if problem is not None:
            lines.append(f"             note: {problem}")
    ort_format = all(v.weights is None for v in c.variants.values())
    lines.append("graphs (ORT format, weights inside each)" if ort_format else "graphs")
    for graph, io in c.graphs.items():
        lines.append(f"  {graph}: in {_names(io['inputs'], 4)}; out {_names(io['outputs'], 3)}")
    return "\n".join(lines)
