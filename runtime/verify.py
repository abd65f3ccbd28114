"""`edgeformer verify PACKAGE`: does this machine run the package correctly, and how fast?

The exporter stored PyTorch's greedy run on fixed inputs in the package (golden.json: the
inputs, the token chosen at each decoder call, the 16 largest logits there). Here each variant
is fed PyTorch's tokens through the runtime's own step loop (teacher forcing), and we report:

    agreement   fraction of decoder calls x rows where the variant's argmax is PyTorch's token
    max diff    largest |logit - PyTorch's| over the stored top-16 logits of every call
    ms/token    a greedy decode of a 9-token input, batch 1, 32 forced tokens: the best of
                TIMED_ROUNDS rounds, each round timing every variant once in turn (so a
                slow moment of a shared machine costs every variant alike, not the one
                timed then: export records these, and variant="auto" ranks by them)

fp32 must agree everywhere and stay within FP32_TOLERANCE, else the exit code is 1. Quantized
variants are reported, not judged (their quality bounds are measured on data at export time).
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass

import numpy as np

from ..core.decoding import GenerationOptions
from ..core.format import CLASSIFIER_LOGITS, GOLDEN_FILE, SENTENCE_EMBEDDING, TOKENIZER_FILE
from ..core.metrics import cosines, relative_errors
from ..core.schema import (
    ENCODER_FP32_MAX_RELATIVE_ERROR,
    ENCODER_FP32_MIN_COSINE,
    ENCODER_QUANTIZED_MIN_COSINE,
    EncoderGolden,
    Golden,
    PackageError,
)
from .api import Generator, Translator
from .embed import Embedder, Reranker, is_encoder_package, load_encoder_package, run_encoder
from .model import Model, pad
from .package import load_package, read_json
from .steppers import start_decoder_only, start_encoder_decoder

FP32_TOLERANCE = 1e-3  # logits of the fp32 graphs vs PyTorch's (export checks 1e-4 on its host)
TIMED_TOKENS = 32
TIMED_ROUNDS = 5


def forced_logits(
    model: Model, ids: np.ndarray, mask: np.ndarray, tokens: list[np.ndarray]
) -> list[np.ndarray]:
    """The package's last-position logits (B, V) at the first decoder call on right-padded
    inputs (ids, mask), then at one call per given token row (B,): 1 + len(tokens) arrays."""
    start = start_encoder_decoder if model.family == "encoder-decoder" else start_decoder_only
    stepper, first = start(model.graphs, model.config, ids, mask, max(1, len(tokens)))
    out = [first.copy()]
    for tok in tokens:
        out.append(stepper.step(np.asarray(tok, dtype=np.int64)).copy())
    return out


@dataclass
class VariantCheck:
    variant: str
    agreement: float = float("nan")
    max_diff: float = float("nan")
    ms_per_token: float = float("nan")
    error: str | None = None

    @property
    def passed(self) -> bool:
        """fp32 must match PyTorch; other variants pass unless they failed to run."""
        if self.error is not None:
            return False
        return self.variant != "fp32" or (self.agreement == 1.0 and self.max_diff <= FP32_TOLERANCE)


def _runtime(path: str | os.PathLike, variant: str, threads: int | None) -> Translator | Generator:
    family = load_package(path, verify=False).family
    cls = Translator if family == "encoder-decoder" else Generator
    return cls(path, variant, threads=threads)


def _agreement(runtime: Translator | Generator, variant: str, golden: Golden) -> VariantCheck:
    m = runtime.model
    ids, mask = pad(golden.inputs, m.source_pad_id)  # sources or prompts
    ref_tokens = np.asarray(golden.tokens)  # (calls, B)
    got = forced_logits(m, ids, mask, list(ref_tokens[:-1]))
    top_ids, top_logits = np.asarray(golden.top_ids), np.asarray(golden.top_logits)
    chosen = np.stack([g.argmax(-1) for g in got])  # (calls, B)
    diffs = [
        np.abs(np.take_along_axis(g, i, -1) - ref).max()
        for g, i, ref in zip(got, top_ids, top_logits)
    ]
    return VariantCheck(variant, float((chosen == ref_tokens).mean()), float(max(diffs)))


def _ms_per_token(runtime: Translator | Generator) -> float:
    """Greedy, batch 1, TIMED_TOKENS forced tokens on a 9-token input; one run."""
    m = runtime.model
    vocab = m.source_vocab  # sources: the encoder's vocabulary; prompts: the one
    start = 4 if vocab > 8 else 0
    # EOS last (a separate source vocabulary's own: the source frame's last id)
    end = [m.eos_id] if m.eos_id < vocab else m.translation.suffix[-1:]
    ids = [[start + i % (vocab - start) for i in range(8)] + end]
    opts = GenerationOptions(max_new_tokens=TIMED_TOKENS, ignore_eos=True)
    t = time.perf_counter()
    if isinstance(runtime, Translator):
        runtime.translate_ids(ids, opts)
    else:
        runtime.generate_ids([ids[0][:-1]], opts)
    return (time.perf_counter() - t) * 1e3 / TIMED_TOKENS


def interleaved_ms_per_token(
    runtimes: dict[str, Translator | Generator], rounds: int = TIMED_ROUNDS
) -> dict[str, float]:
    """Each runtime's best ms/token over `rounds` rounds, every round timing each runtime once
    in turn after one warm-up run each: the variants share the machine's slow and fast moments,
    which timing one variant after the other does not (an `auto` that flipped between exports
    of one checkpoint, 2026-11-29)."""
    for runtime in runtimes.values():
        _ms_per_token(runtime)  # warm-up: first-run allocations are not the variant's speed
    best = dict.fromkeys(runtimes, float("inf"))
    for _ in range(rounds):
        for name, runtime in runtimes.items():
            best[name] = min(best[name], _ms_per_token(runtime))
    return best


def verify(
    path: str | os.PathLike, variants: list[str] | None = None, threads: int | None = None
) -> list[VariantCheck]:
    """One VariantCheck per variant (all the package has by default)."""
    pkg = load_package(path)  # checksums: a corrupt file is an error before anything runs
    golden = pkg.golden()
    names = variants or pkg.variants
    for name in names:
        pkg.variant(name)  # an unknown name is an error before any timing
    checks, runtimes = [], {}
    for name in names:
        try:
            runtimes[name] = _runtime(path, name, threads)
            checks.append(_agreement(runtimes[name], name, golden))
        except PackageError:
            raise
        except Exception as e:  # this machine cannot run the variant: say so, go on
            runtimes.pop(name, None)
            checks.append(VariantCheck(name, error=f"{type(e).__name__}: {e}"))
    times = interleaved_ms_per_token(runtimes)
    for c in checks:
        c.ms_per_token = times.get(c.variant, c.ms_per_token)
    return checks


def table(checks: list[VariantCheck]) -> str:
    w = max([8, *(len(c.variant) for c in checks)])
    lines = [f"{'variant':<{w}} {'agreement':>9} {'max diff':>9} {'ms/token':>9}  verdict"]
    for c in checks:
        if c.error:
            lines.append(f"{c.variant:<{w}} {'—':>9} {'—':>9} {'—':>9}  FAILED: {c.error[:200]}")
            continue
        verdict = "ok" if c.passed else f"FAILED (fp32 must agree, diff <= {FP32_TOLERANCE:g})"
        if c.variant != "fp32" and c.passed:
            verdict = "ok (reported; quality bounds are measured at export)"
        lines.append(
            f"{c.variant:<{w}} {c.agreement:>9.3f} {c.max_diff:>9.2e} {c.ms_per_token:>9.3f}  "
            f"{verdict}"
        )
    return "\n".join(lines)


# -- encoder packages: export's probe ids and the folder's model's output on them (golden.json)
@dataclass
class EncoderCheck:
    variant: str
    min_cosine: float = float("nan")
    max_relative_error: float = float("nan")
    ms_per_text: float = float("nan")
    error: str | None = None

    @property
    def bound(self) -> float:
        return ENCODER_FP32_MIN_COSINE if self.variant == "fp32" else (
            ENCODER_QUANTIZED_MIN_COSINE.get(self.variant, 0.0))  # fmt: skip

    @property
    def passed(self) -> bool:
        """The export gate's bounds: fp32 cosine and relative error, a quantized variant's
        cosine."""
        if self.error is not None or not self.min_cosine >= self.bound:
            return False
        return self.variant != "fp32" or self.max_relative_error <= ENCODER_FP32_MAX_RELATIVE_ERROR


def encoder_golden(path: str | os.PathLike) -> tuple[Embedder, EncoderGolden]:
    """The package's fp32 Embedder / Reranker and its golden.json (a PackageError naming a
    package exported before encoder packages had one)."""
    folder, config = load_encoder_package(path)
    if GOLDEN_FILE not in config.files:
        raise PackageError(f"model package {folder} has no {GOLDEN_FILE} (exported before "
                           "2026-12-02): re-export it to verify it")  # fmt: skip
    where = f"model package {folder}: {GOLDEN_FILE}"
    golden = EncoderGolden.from_json(read_json(folder / GOLDEN_FILE, where), config.model, where)
    cls = Reranker if config.model.num_labels else Embedder
    return cls(folder, verify=False), golden


def tokenizer_problem(model: Embedder, golden: EncoderGolden) -> str | None:
    """Whether this install's tokenizer gives export's probe ids (None: it does)."""
    tok = model.tokenizer
    if model.classifier:
        got, _ = tok.encode_pairs([tuple(t) for t in golden.texts], True)
    else:
        got = tok.encode(list(golden.texts), True)
    want = [[i for i, m in zip(r, k, strict=True) if m] for r, k in zip(golden.ids, golden.mask,
            strict=True)]  # fmt: skip
    if got != want:
        bad = next(i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b)
        return f"{TOKENIZER_FILE} does not encode export's probe text {bad} as export did"
    return None


def verify_encoder(
    path: str | os.PathLike, variants: list[str] | None = None, threads: int | None = None
) -> tuple[list[EncoderCheck], str | None]:
    """Each variant's output on export's probe ids against the folder's model's (golden.json),
    its ms per text the best of TIMED_ROUNDS interleaved rounds; and a tokenizer problem."""
    fp32, golden = encoder_golden(path)
    names = variants or list(fp32.config.variants)
    for name in names:
        if name not in fp32.config.variants:
            raise ValueError(f"variant {name!r} is not in this package (it has "
                             f"{', '.join(fp32.config.variants)})")  # fmt: skip
    ids, mask, types = (np.asarray(a, np.int64) for a in (golden.ids, golden.mask,
                        golden.token_type_ids))  # fmt: skip
    want = np.asarray(golden.reference)
    output = CLASSIFIER_LOGITS if fp32.classifier else SENTENCE_EMBEDDING
    checks, sessions = [], {}
    for name in names:
        try:
            model = type(fp32)(fp32.path, name, threads=threads, verify=False)
            got = run_encoder(model.session, ids, mask, types, output)
        except Exception as e:  # this machine cannot run the variant: say so, go on
            checks.append(EncoderCheck(name, error=f"{type(e).__name__}: {e}"))
            continue
        a, b = (got.reshape(1, -1), want.reshape(1, -1)) if fp32.classifier else (got, want)
        checks.append(EncoderCheck(name, float(cosines(a, b).min()),
                                   float(relative_errors(a, b).max())))  # fmt: skip
        sessions[name] = model.session
    best = dict.fromkeys(sessions, float("inf"))
    for _ in range(TIMED_ROUNDS):
        for name, session in sessions.items():
            t = time.perf_counter()
            run_encoder(session, ids, mask, types, output)
            best[name] = min(best[name], (time.perf_counter() - t) * 1e3 / len(ids))
    for c in checks:
        c.ms_per_text = best.get(c.variant, c.ms_per_text)
    return checks, tokenizer_problem(fp32, golden)


def encoder_table(checks: list[EncoderCheck], tokenizer: str | None) -> str:
    w = max([8, *(len(c.variant) for c in checks)])
    lines = [f"{'variant':<{w}} {'min cosine':>10} {'rel. error':>10} {'ms/text':>8}  verdict"]
    for c in checks:
        if c.error:
            lines.append(f"{c.variant:<{w}} {'—':>10} {'—':>10} {'—':>8}  FAILED: {c.error[:200]}")
            continue
        fp32 = c.variant == "fp32"
        extra = f", relative error <= {ENCODER_FP32_MAX_RELATIVE_ERROR:g}" if fp32 else ""
        verdict = "ok" if c.passed else f"FAILED (cosine >= {c.bound:g}{extra})"
        lines.append(f"{c.variant:<{w}} {c.min_cosine:>10.6f} {c.max_relative_error:>10.1e} "
                     f"{c.ms_per_text:>8.3f}  {verdict}")  # fmt: skip
    lines.append(f"tokenizer: {'FAILED: ' + tokenizer if tokenizer else 'ok (export probe ids)'}")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser, command: str = "verify") -> None:
    p.add_argument("package", help="model package folder (edgeformer export)")
    p.add_argument("--variants", default="", help="comma-separated (default: every variant)")
    p.add_argument("--threads", type=int, default=None, help="intra-op threads (default: cores)")


def run(args: argparse.Namespace) -> int:
    variants = [v.strip() for v in args.variants.split(",") if v.strip()] or None
    if is_encoder_package(args.package):
        found, tokenizer = verify_encoder(args.package, variants, args.threads)
        print(encoder_table(found, tokenizer))
        return 0 if all(c.passed for c in found) and tokenizer is None else 1
    checks = verify(args.package, variants, args.threads)
    print(table(checks))
    return 0 if all(c.passed for c in checks) else 1
