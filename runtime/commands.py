"""`edgeformer translate` and `edgeformer generate`: the runtime from the command line.

edgeformer translate PACKAGE "a man rides a bike ." ["more text" ...]
cat sentences.txt | edgeformer translate PACKAGE --beam 4      # one translation per line
edgeformer generate PACKAGE "ROMEO:" --sample --top-p 0.9 --seed 0 --max-new-tokens 200
edgeformer translate PACKAGE "two dogs ." --target-prefix "zwei" --alternatives --num-hypotheses 3
edgeformer generate PACKAGE "ROMEO:" --stop $'\\n\\n' --no-repeat-ngram-size 3 --suppress "JULIET"

Bad input never costs good input: stdin is read as bytes and decoded line by line; a line that is
not UTF-8 (or holds a lone surrogate), or is longer than the model's max_len without --truncate,
is reported on stderr with its 1-based line number and gives an empty output line in its place;
every other line is translated in order, and the exit status is 1 at the end. Plain translation
reads stdin ahead in length-sorted sub-batches (runtime.batching, as Translator.translate_iterable)
and logs sentences/s and tokens/s at the end (--log-level info).
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
from collections.abc import Iterator

from ..core.decoding import GenerationOptions
from ..core.format import VARIANTS
from ..core.schema import HELD_OUT_KEYS
from ..core.variants import MAX_QUALITY_LOSS, pick_variant
from .api import Generator, Translator, text_problem
from .batching import BATCH_TYPES, READ_AHEAD, Batching, Throughput, translate_stream

log = logging.getLogger("edgeformer")


def add_score_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("package", help="model package folder (edgeformer export)")
    p.add_argument(
        "texts", nargs="*", metavar="TEXT",
        help="translation: 'source<TAB>target'; LM: a text (default: lines from stdin)",
    )  # fmt: skip
    p.add_argument("--variant", default="fp32", help=" | ".join(VARIANTS))
    p.add_argument("--threads", type=int, default=None, help="intra-op threads (default: cores)")
    p.add_argument("--batch-size", type=int, default=32, help="lines per batch")


def run_score(args: argparse.Namespace) -> int:
    """One line per input: mean log-prob per token, total log-prob, tokens; LM: perplexity."""
    from .package import load_package

    family = load_package(args.package, verify=False).family
    cls = Translator if family == "encoder-decoder" else Generator
    model = cls(args.package, args.variant, "cpu", args.threads)
    total, count, seen = 0.0, 0, 0
    for batch in _batches(_checked(_lines(args)), max(1, args.batch_size)):
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
    if count:
        print(f"{count} tokens, mean log-prob {total / count:.4f}, perplexity "
              f"{math.exp(-total / count):.3f}", file=sys.stderr)  # fmt: skip
    return 0


def _names(names: list[str], n: int) -> str:
    return ", ".join(names[:n]) + (f" (+{len(names) - n} more)" if len(names) > n else "")


def package_info(path: str) -> str:
    """What `edgeformer info` prints: model, task, variants with sizes, graphs, requirements."""
    import onnxruntime as ort

    from ..core.format import GENAI_CONFIG_FILE
    from .package import load_package

    pkg = load_package(path)  # checksums verified
    c = pkg.config
    m = c.model
    layers = (
        f"{m.n_encoder_layers}+{m.n_decoder_layers}" if c.family == "encoder-decoder"
        else str(m.n_decoder_layers)
    )  # fmt: skip
    task = ", ".join(f"{k} {v}" for k, v in c.task.items()) or "-"
    lines = [
        f"package      {pkg.path} (format {c.format_version}, checksums verified)",
        f"family       {c.family}; task: {task}",
        f"model        d_model {m.d_model}, {layers} layers, {m.n_heads} heads, "
        f"vocab {m.vocab_size}, max_len {m.max_len}, {m.norm}-LN, {m.positional}",
        f"onnxruntime  needs >= {c.min_onnxruntime}; here {ort.__version__}, providers "
        f"{', '.join(ort.get_available_providers())} (edgeformer decodes on the CPU provider)",
        "variants",
    ]
    w = max([6, *map(len, c.variants)])
    for name, v in c.variants.items():
        files = [*v.files.values(), v.weights]
        size = sum((pkg.path / f).stat().st_size for f in files) / 1e6
        lines.append(f"  {name:<{w}} {size:8.2f} MB  {v.description}")
        if v.measured:
            x = v.measured
            held = "".join(f", held-out {k} {x[k]:.2f}" for k in HELD_OUT_KEYS if k in x)
            lines.append(
                f"         at export: agreement with PyTorch {x['agreement']:.3f}, max logit "
                f"diff {x['max_logit_diff']:.2e}, {x['ms_per_token']:.3f} ms/token{held}"
            )
    _, why = pick_variant(c)
    lines.append(f"  auto -> {why}")
    settings = pkg.generation_settings()
    shown = ", ".join(f"{k} {v}" for k, v in settings.items()) or "none (greedy search)"
    lines.append(f"decoding     generation_config.json defaults: {shown}")
    if GENAI_CONFIG_FILE in c.files:
        lines.append(f"genai        {GENAI_CONFIG_FILE}: onnxruntime-genai can run decoder.onnx")
    lines.append("graphs")
    for graph, io in c.graphs.items():
        lines.append(f"  {graph}: in {_names(io['inputs'], 4)}; out {_names(io['outputs'], 3)}")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser, command: str) -> None:
    if command == "info":
        p.add_argument("package", help="model package folder (edgeformer export)")
        return None
    if command == "score":
        return add_score_arguments(p)
    what = "text(s) to translate (default: lines from stdin)" if command == "translate" else None
    p.add_argument("package", help="model package folder (edgeformer export)")
    p.add_argument("texts", nargs="*", metavar="TEXT", help=what or "prompt(s) (default: stdin)")
    g = p.add_argument_group("runtime")
    g.add_argument(
        "--variant",
        default="fp32",
        help=" | ".join(VARIANTS) + " | auto (the fastest export measured within the "
        "quality bounds: held-out BLEU / perplexity, --max-quality-loss)",
    )
    g.add_argument(
        "--max-quality-loss",
        type=float,
        default=None,
        metavar="X",
        help="auto: largest 1 - agreement with PyTorch accepted (default: none where export "
        f"measured held-out quality, whose bounds decide; else {MAX_QUALITY_LOSS})",
    )
    g.add_argument("--provider", default="auto", choices=("auto", "cpu", "cuda"))
    g.add_argument("--threads", type=int, default=None, help="intra-op threads (default: cores)")
    g.add_argument(
        "--spinning",
        choices=("on", "off"),
        default=None,
        help="let idle onnxruntime threads spin (default off: faster on few cores)",
    )
    g.add_argument("--truncate", action="store_true", help="cut inputs longer than max_len")
    if command == "translate":
        g.add_argument(
            "--inter-threads", type=int, default=1, metavar="N",
            help="translate N sub-batches at once, each with cores/N threads (throughput on "
            "stdin; CTranslate2's inter_threads)",
        )  # fmt: skip
    d = p.add_argument_group(
        "decoding (defaults: the package's generation_config.json; greedy when it says nothing)"
    )
    d.add_argument("--beam", type=int, default=None, metavar="N", help="beam search with N beams")
    d.add_argument("--sample", action="store_true", help="sample instead of greedy")
    d.add_argument("--temperature", type=float, default=None, help="default 1.0")
    d.add_argument("--top-k", type=int, default=None, help="default 0 = off")
    d.add_argument("--top-p", type=float, default=None, help="default 1.0 = off")
    d.add_argument("--seed", type=int, default=None)
    d.add_argument(
        "--max-new-tokens", type=int, default=None,
        help=f"default {DEFAULT_NEW_TOKENS[command]} (or the package's max_new_tokens)",
    )  # fmt: skip
    d.add_argument("--min-new-tokens", type=int, default=None, help="default 0")
    d.add_argument("--repetition-penalty", type=float, default=None, help="default 1.0 = off")
    d.add_argument("--length-penalty", type=float, default=None, help="default 1.0")
    if command == "translate":
        d.add_argument(
            "--n-best",
            type=int,
            default=1,
            metavar="K",
            help="print K 'index<TAB>score<TAB>text' lines per input (index: 0-based input line)",
        )
        d.add_argument(
            "--max-batch-size",
            "--batch-size",
            dest="batch_size",
            type=int,
            default=32,
            help="sub-batch size: lines, or padded source tokens with --batch-type tokens "
            "(stdin is read ahead and sorted by length; a terminal is read line by line)",
        )
        d.add_argument("--batch-type", choices=BATCH_TYPES, default="examples")
        d.add_argument(
            "--target-prefix", default=None, metavar="TEXT",
            help="force every translation to start with TEXT (scored, included in the output)",
        )  # fmt: skip
    d.add_argument(
        "--num-hypotheses", type=int, default=1, metavar="N",
        help="N independent samples (--sample) or N alternatives (--alternatives) per input, "
        + ("printed as --n-best prints" if command == "translate" else "one per line"),
    )  # fmt: skip
    d.add_argument(
        "--alternatives", action="store_true",
        help="N continuations branching at the first position after the "
        + ("target prefix" if command == "translate" else "prompt")
        + ": the N best tokens there, each continued (N: --num-hypotheses)",
    )  # fmt: skip
    c = p.add_argument_group("constraints")
    c.add_argument(
        "--no-repeat-ngram-size", type=int, default=None, metavar="N",
        help="never repeat an n-gram of N tokens (default 0 = off)",
    )  # fmt: skip
    c.add_argument(
        "--suppress", action="append", default=[], metavar="TEXT",
        help="never produce TEXT's tokens in a row (repeatable; one token: never that token)",
    )  # fmt: skip
    c.add_argument(
        "--end-token", action="append", default=[], metavar="TOKEN",
        help="a token (vocabulary string, or an id) that ends the output too (repeatable)",
    )  # fmt: skip
    if command == "generate":
        c.add_argument(
            "--stop", action="append", default=[], metavar="TEXT",
            help="stop when the generated text contains TEXT, cut before it (repeatable; "
            "a newline: --stop $'\\n')",
        )  # fmt: skip
        c.add_argument(
            "--sliding-window", action="store_true",
            help="go on past the model's context: re-encode its last max_len/2 tokens when full",
        )  # fmt: skip
    c.add_argument(
        "--max-input-length", type=int, default=0, metavar="N",
        help="inputs of more than N tokens are an error (cut with --truncate; 0: max_len)",
    )  # fmt: skip


DEFAULT_NEW_TOKENS = {"translate": 128, "generate": 200}  # without flag or package setting


def options(args: argparse.Namespace) -> dict:
    """The GenerationOptions fields the command line sets (the package's generation_config.json
    gives the others: Model.defaults)."""
    n_best = getattr(args, "n_best", 1)
    several = args.sample or args.alternatives
    hypotheses = args.num_hypotheses if several else n_best
    beams = args.beam  # None: the package's default; --n-best K asks for at least K beams
    if not several and beams is not None and beams >= 1:
        beams = max(beams, n_best)
    elif not several and beams is None and n_best > 1:
        beams = n_best
    given = dict(
        max_new_tokens=args.max_new_tokens,
        min_new_tokens=args.min_new_tokens,
        sampling=args.sample or None,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        num_beams=beams,
        num_hypotheses=hypotheses if hypotheses > 1 or several else None,
        length_penalty=args.length_penalty,
        repetition_penalty=args.repetition_penalty,
        return_alternatives=args.alternatives or None,
        no_repeat_ngram_size=args.no_repeat_ngram_size,
        suppress_sequences=list(args.suppress) or None,
        end_token=list(args.end_token) or None,
        stop=list(getattr(args, "stop", [])) or None,
        max_input_length=args.max_input_length or None,
        sliding_window=getattr(args, "sliding_window", False) or None,
    )
    opts = {k: v for k, v in given.items() if v is not None}
    if args.num_hypotheses > 1 and not several:
        beam = " (beam search: --n-best)" if args.command == "translate" else ""
        raise ValueError(f"--num-hypotheses needs --sample or --alternatives{beam}")
    GenerationOptions(**opts)  # invalid combinations fail before the model loads
    return opts


Line = tuple[int, str | None, str | None]  # (1-based number, text, why it is unreadable)


def _lines(args: argparse.Namespace) -> Iterator[Line]:
    """Input texts, numbered from 1: the TEXT arguments, or stdin's lines decoded one by one."""
    if args.texts:
        for n, text in enumerate(args.texts, 1):
            yield n, text, text_problem(text)  # argv may carry surrogate-escaped bytes
        return
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text stream (tests, embedding): lines are already decoded
        for n, line in enumerate(sys.stdin, 1):
            text = line.rstrip("\n")
            yield n, text, text_problem(text)
        return
    for n, raw in enumerate(stream, 1):
        raw = raw.rstrip(b"\n")
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        try:
            yield n, raw.decode("utf-8"), None
        except UnicodeDecodeError as e:
            yield n, None, f"not valid UTF-8 (byte 0x{raw[e.start]:02x} at byte {e.start + 1})"


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


def run(args: argparse.Namespace) -> int:
    if args.command == "info":
        print(package_info(args.package))
        return 0
    if args.command == "score":
        return run_score(args)
    opts = options(args)
    spinning = None if args.spinning is None else args.spinning == "on"
    model: Translator | Generator
    if args.command == "translate":
        model = Translator(
            args.package, args.variant, args.provider, args.threads, spinning,
            max_quality_loss=args.max_quality_loss, inter_threads=args.inter_threads,
        )  # fmt: skip
    else:
        model = Generator(
            args.package, args.variant, args.provider, args.threads, spinning,
            max_quality_loss=args.max_quality_loss,
        )  # fmt: skip
    if "max_new_tokens" not in opts and "max_new_tokens" not in model.model.default_settings:
        opts["max_new_tokens"] = DEFAULT_NEW_TOKENS[args.command]
    effective = model.model.options(**opts)
    if args.variant == "auto":
        log.info(f"variant {model.variant_reason}")
    threads = f", {args.threads} threads" if args.threads else ""
    log.info(f"{model.variant} on {model.provider}{threads}")
    bad = 0

    def usable(n: int, text: str | None, problem: str | None) -> bool:
        """Reports a line that cannot be used (on stderr, with its number)."""
        nonlocal bad
        if problem is None:
            try:
                model.check_text(text or "", args.truncate, args.max_input_length)
            except ValueError as e:
                problem = str(e)
        if problem is not None:
            bad += 1
            print(f"edgeformer {args.command}: line {n}: {problem}", file=sys.stderr, flush=True)
        return problem is None

    if args.command == "translate":
        assert isinstance(model, Translator)
        if effective.num_hypotheses == 1 and args.target_prefix is None:
            lines = (
                text or "" if usable(n, text, problem) else "" for n, text, problem in _lines(args)
            )
            interactive = not args.texts and sys.stdin.isatty()
            batching = Batching(max(1, args.batch_size), args.batch_type, args.truncate,
                                read_ahead=1 if interactive else READ_AHEAD)  # fmt: skip
            stats = Throughput()
            for out in translate_stream(model, lines, batching, effective, stats):
                print(out, flush=interactive)
            log.info(stats.summary())
            return 1 if bad else 0
        for batch in _batches(_lines(args), max(1, args.batch_size)):
            good = [(n, text) for n, text, problem in batch if usable(n, text, problem)]
            texts = [text for _, text in good]
            prefix = None if args.target_prefix is None else [args.target_prefix] * len(texts)
            if effective.num_hypotheses > 1:
                results = dict(zip((n for n, _ in good), model.translate_batch_nbest(
                    texts, args.truncate, prefix, **opts)))  # fmt: skip
                for n, _, _ in batch:  # an unusable line: one 'index<TAB>nan<TAB>' line
                    for text, score in results.get(n, [("", math.nan)]):
                        print(f"{n - 1}\t{score:.4f}\t{text}")
            else:
                results = dict(zip((n for n, _ in good), model.translate_batch(
                    texts, args.truncate, prefix, **opts)))  # fmt: skip
                for n, _, _ in batch:
                    print(results.get(n, ""))
            sys.stdout.flush()
        return 1 if bad else 0
    assert isinstance(model, Generator)
    for n, prompt, problem in _lines(args):
        if not usable(n, prompt, problem):
            print(flush=True)
            continue
        if effective.num_hypotheses > 1:
            (result,) = model.generate_results([prompt or ""], args.truncate, **opts)
            for h in result.hypotheses:
                print(f"{prompt}{h.text}", flush=True)
            continue
        print(prompt, end="", flush=True)
        for piece in model.stream(prompt, args.truncate, **opts):  # type: ignore[arg-type]
            print(piece, end="", flush=True)
        print(flush=True)
    return 1 if bad else 0
