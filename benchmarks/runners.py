"""How each engine is loaded and called: a `Runner` per stack (see `stacks`, the registry).

    generate(ids, n)  token id lists -> n new ids per row (greedy, EOS ignored: forced length)
    encode(ids)       the encoder alone (ED stacks that expose it), result discarded
    translate_file(ids, n, max_batch_size, batch_type)
                      ED stacks with a batch-translation path: the sources (no EOS) written to a
                      file, translated to a file (n tokens each); returns the ms of the latter
    files             what the stack loads from disk (its model size)

Every loader takes the `Job` (stack, shape, work folder, settings) and uses the files that
`artifacts` built for it; it imports only its own engine, so that a stack's process holds only
what a deployment of that stack would.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import artifacts
from .files import FileBatching
from .measure import logits_nll
from .settings import Job
from .shapes import forced_target


@dataclass
class Runner:
    generate: Callable[[list[list[int]], int], list[list[int]]]
    encode: Callable[[list[list[int]]], object] | None = None
    files: list[Path] = field(default_factory=list)
    sessions: list = field(default_factory=list)  # onnxruntime sessions, for the profile
    # a stack in its own process (benchmarks.child) reports the time measured there
    timed_generate: Callable[[list[list[int]], int], tuple[float, list[list[int]]]] | None = None
    timed_encode: Callable[[list[list[int]]], tuple[float, object]] | None = None
    close: Callable[[], None] | None = None
    rss: Callable[[], dict] | None = None  # the stack's process: {"rss_mb", "peak_rss_mb"}
    translate_file: Callable[[list[list[int]], int, FileBatching], float] | None = None
    # the frontier, on a trained package's text (TextPath): translations, (ms of each text
    # alone, translations), ms of a text file; timed in the stack's process
    translate_texts: Callable[[list[str], int], list[str]] | None = None  # (texts, beams)
    sentences_ms: Callable[[list[str]], tuple[list[float], list[str]]] | None = None
    text_file_ms: Callable[[Path, Path, FileBatching], float] | None = None
    # an LM's teacher-forced score of token windows (bench --hf): {"nll": -sum log p of every
    # token after a window's first, "tokens": how many}, from the stack's own logits
    nll: Callable[[list[list[int]]], dict] | None = None


@dataclass
class TextPath:
    """A stack's text-in, text-out calls on a trained package (the frontier):

    translate(texts, beams)   translations in sub-batches of TEXT_BATCH (beams 1: greedy)
    one(text)                 one text alone, greedy: the batch-1 request of a user
    file(src, out, batching)  a text file translated into `out`, greedy, by the stack's batch
                              path (ours: Translator.translate_file)

    Each decodes to EOS, with at most the model's positions (max_len new tokens), sources cut
    to max_len tokens with EOS (truncate)."""

    translate: Callable[[list[str], int], list[str]]
    one: Callable[[str], str]
    file: Callable[[Path, Path, FileBatching], None]

    def attach(self, r: Runner) -> Runner:
        """`r` with the calls of this path (timed here: in the stack's process)."""
        r.translate_texts = self.translate
        r.sentences_ms, r.text_file_ms = self.sentences_ms, self.file_ms
        return r

    def sentences_ms(self, texts: list[str]) -> tuple[list[float], list[str]]:
        """(ms of each text translated alone, the translations)."""
        times, outs = [], []
        for text in texts:
            t = time.perf_counter()
            outs.append(self.one(text))
            times.append((time.perf_counter() - t) * 1e3)
        return times, outs

    def file_ms(self, src: Path, out: Path, batching: FileBatching) -> float:
        """ms of translating the file `src` into `out` (checked: one line per source line)."""
        t = time.perf_counter()
        self.file(src, out, batching)
        ms = (time.perf_counter() - t) * 1e3
        want = src.read_text(encoding="utf-8").count("\n")
        lines = out.read_text(encoding="utf-8").count("\n")
        if lines != want:
            raise RuntimeError(f"translated {lines} lines of {want}")
        return ms


TEXT_BATCH = 32  # sentences per sub-batch of TextPath.translate (the quality pass)


def file_timer(vocab: list[str], translate: Callable[[Path, Path, int, FileBatching], None]):
    """Runner.translate_file around translate(src, out, n, batching): the sources are written
    as words of the stack's vocabulary (untimed), the translation is timed and its output
    checked to have one line per source."""

    def timed(ids: list[list[int]], n: int, batching: FileBatching) -> float:
        from .files import write_tokens

        with tempfile.TemporaryDirectory(prefix="edgeformer-bench-file-") as d:
            src, out = Path(d) / "src.txt", Path(d) / "out.txt"
            write_tokens(src, ids, vocab)
            t = time.perf_counter()
            translate(src, out, n, batching)
            ms = (time.perf_counter() - t) * 1e3
            lines = out.read_text(encoding="utf-8").count("\n")
            if lines != len(ids):
                raise RuntimeError(f"translated {lines} lines of {len(ids)}")
        return ms

    return timed


def quiet_libraries() -> None:
    """Errors only from the engines' loggers, no progress bars, no warnings."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # every model is built locally
    for name in ("optimum", "transformers", "onnxruntime", "root"):
        logging.getLogger(name).setLevel(logging.ERROR)
    logging.getLogger().setLevel(logging.WARNING)
    try:
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
    except (ImportError, AttributeError):
        pass
    warnings.filterwarnings("ignore")


def ort_options(threads: int, spinning: bool | None = None):
    """SessionOptions of the peers' onnxruntime sessions (Optimum) and of the encoder timing
    session (the runtime's own sessions come from edgeformer.runtime.session)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if spinning is not None:
        so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    return so


Decode = Callable[[int, list[int] | None], list[list[int]]]  # (new tokens, forced prefix)


def forcing_first(forced: int | None, n: int, decode: Decode) -> list[list[int]]:
    """n tokens per row whose first is `forced` (a multilingual shape's target language,
    counted in the n as transformers counts forced_bos_token_id): `decode(k, prefix)` with the
    forced token as each row's target prefix and n - 1 more. n == 1 (TTFT): the one decoding
    step, its token replaced by the forced one, as transformers' forcing processor does (the same
    work). Without a forced token: decode(n, None)."""
    if forced is None:
        return decode(n, None)
    if n == 1:
        return [[forced] + r[1:] for r in decode(1, None)]
    return decode(n - 1, [forced])


def env_threads(threads: int) -> dict[str, str]:
    """Environment for child processes: the same thread count for OpenMP-based engines."""
    return {**os.environ, "OMP_NUM_THREADS": str(threads)}


# ---- ours --------------------------------------------------------------------------------------


def load_our_torch(job: Job) -> Runner:
    import torch

    from edgeformer.core.decoding import GenerationOptions
    from edgeformer.models import EncoderDecoder, complete_ids, translate_ids
    from edgeformer.models.checkpoint import WEIGHTS, load_checkpoint
    from edgeformer.models.generation import pad_batch

    torch.set_num_threads(job.threads)
    ckpt = artifacts.checkpoint_for(job)
    model, _ = load_checkpoint(ckpt)
    forced = forced_target(job.shape)

    @torch.no_grad()
    def translate(ids, k: int, prefix: list[int] | None):
        from edgeformer.core.decoding import DecodeInputs
        from edgeformer.core.decoding import generate as decode
        from edgeformer.core.options import prepare_options
        from edgeformer.models.generation import EncoderDecoderStepper, never

        assert isinstance(model, EncoderDecoder)
        options = GenerationOptions(max_new_tokens=k, ignore_eos=True)
        if prefix is None:
            return translate_ids(model, ids, options)
        cfg = model.cfg  # models.translate_ids with a forced prefix per row
        opts, _ = prepare_options(options, cfg.vocab_size, cfg.max_len - len(prefix))
        x, mask = pad_batch(ids, cfg.source_pad_id)
        stepper = EncoderDecoderStepper(model, x, mask)
        inputs = DecodeInputs(cfg.eos_id, banned=never(cfg), prefixes=[prefix] * len(ids))
        return decode(stepper.first_logits(), stepper, opts, inputs)

    def generate(ids, n):
        if isinstance(model, EncoderDecoder):
            return forcing_first(forced, n, lambda k, prefix: translate(ids, k, prefix))
        return complete_ids(model, ids, GenerationOptions(max_new_tokens=n, ignore_eos=True))

    @torch.no_grad()
    def encode(ids):
        assert isinstance(model, EncoderDecoder)  # passed on only for encoder-decoder shapes
        x, mask = pad_batch(ids, model.cfg.pad_id)
        return model.encode(x, mask)

    return Runner(generate, encode if job.shape.is_ed else None, [ckpt / WEIGHTS])


def variant_files(pkg, variant: str) -> list[Path]:
    """The files of one package variant: its graphs and their external weights."""
    entry = pkg.variant(variant)
    return [pkg.path / n for n in sorted({*entry.files.values(), entry.weights})]


def load_our_runtime(
    job: Job, variant: str, package: Callable[[Job], Path] = artifacts.package_for
) -> Runner:
    """Our runtime on one variant of the job's package (`package`: which one; the Llama stacks
    pass artifacts.llama_package_for)."""
    import numpy as np

    from edgeformer.core.decoding import GenerationOptions
    from edgeformer.runtime import Generator, Translator

    from ..runtime.package import load_package

    pkg_path = package(job)
    pkg = load_package(pkg_path, verify=False)
    if variant not in pkg.variants:
        raise RuntimeError(f"package has no {variant} variant (it has {pkg.variants})")
    cls = Translator if job.shape.is_ed else Generator
    rt = cls(
        pkg_path, variant=variant, provider="cpu", threads=job.threads,
        spinning=job.settings.spinning,
    )  # fmt: skip
    call = getattr(rt, "translate_ids" if job.shape.is_ed else "generate_ids")
    forced = forced_target(job.shape)

    def generate(ids, n):
        def decode(k: int, prefix: list[int] | None):
            opts = GenerationOptions(max_new_tokens=k, ignore_eos=True)
            if prefix is None:
                return call(ids, opts)
            return call(ids, opts, target_prefix=[prefix] * len(ids))

        return forcing_first(forced, n, decode)

    encode = None
    if job.shape.is_ed:  # the runtime's own encoder session (a second one would double the RSS
        # of the encoder's weights: 1 GB of fp32 embedding at NLLB-600M's shape)
        encoder = rt.model.graphs["encoder"]
        pad = pkg.config.special_tokens.pad_id

        def encode(ids):
            T = max(map(len, ids))
            x = np.full((len(ids), T), pad, dtype=np.int64)
            m = np.zeros((len(ids), T), dtype=np.int64)
            for i, r in enumerate(ids):
                x[i, : len(r)], m[i, : len(r)] = r, 1
            return encoder.run({"input_ids": x, "attention_mask": m})

    parallel: dict[int, Translator] = {}  # inter_threads > 1: a translator with threads / inter

    def translator(inter: int = 1) -> Translator:
        """The stack's translator, or one that runs `inter` sub-batches at once."""
        assert isinstance(rt, Translator)  # set on encoder-decoder shapes only
        if inter == 1:
            return rt
        if inter not in parallel:
            parallel[inter] = Translator(
                pkg_path, variant=variant, provider="cpu", spinning=job.settings.spinning,
                threads=max(1, job.threads // inter), inter_threads=inter,
            )  # fmt: skip
        return parallel[inter]

    def translate_file(src: Path, out: Path, n: int, b: FileBatching):
        translator(b.inter_threads).translate_file(
            src, out, b.max_batch_size, b.batch_type, progress=False, max_new_tokens=n,
            ignore_eos=True,
        )  # fmt: skip

    def text_file(src: Path, out: Path, b: FileBatching):
        translator(b.inter_threads).translate_file(
            src, out, b.max_batch_size, b.batch_type, truncate=True, progress=False, num_beams=1
        )

    def translate_texts(texts: list[str], beams: int) -> list[str]:
        found = translator().translate_iterable(texts, TEXT_BATCH, truncate=True, num_beams=beams)
        return list(found)

    def one(text: str) -> str:
        return translator().translate_batch([text], truncate=True, num_beams=1)[0]

    r = Runner(generate, encode, variant_files(pkg, variant))
    if isinstance(rt, Generator):  # an LM: one window a call (its logits: 257 x vocabulary)
        lm = rt
        r.nll = lambda windows: _summed([-float(lm.score_ids([w])[0].sum()) for w in windows],
                                        windows)  # fmt: skip
    if job.shape.is_ed:
        words = [
            rt.model.tokenizer.id_to_token(i) or "" for i in range(pkg.config.model.vocab_size)
        ]
        r.translate_file = file_timer(words, translate_file)
        TextPath(translate_texts, one, text_file).attach(r)
    return r


def _summed(nlls: list[float], windows: list[list[int]]) -> dict:
    """Runner.nll's answer from each window's nll."""
    return {"nll": sum(nlls), "tokens": sum(len(w) - 1 for w in windows)}


# ---- peers: Hugging Face PyTorch, Optimum, CTranslate2 -----------------------------------------


def _hf_generate(model, is_ed: bool, pad_id: int, forced: int | None = None):
    """HF `generate`, greedy, exactly n new tokens (min_new_tokens = max_new_tokens); `forced`:
    the target language forced first (forced_bos_token_id, as NLLB's translations are made)."""
    import torch

    extra = {} if forced is None else {"forced_bos_token_id": forced}

    @torch.no_grad()
    def generate(ids, n):
        x = torch.tensor(ids, dtype=torch.long)  # workloads have equal-length rows
        out = model.generate(
            input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=n, min_new_tokens=n,
            do_sample=False, num_beams=1, use_cache=True, pad_token_id=pad_id, **extra,
        )  # fmt: skip
        start = 1 if is_ed else x.shape[1]  # ED: drop the decoder start token; LM: the prompt
        return out[:, start:].tolist()

    return generate


def _hf_encode(encoder):
    import torch

    @torch.no_grad()
    def encode(ids):
        x = torch.tensor(ids, dtype=torch.long)
        return encoder(input_ids=x, attention_mask=torch.ones_like(x))

    return encode


def load_hf_torch(job: Job) -> Runner:
    """MarianMTModel (ED) or GPT2LMHeadModel (LM), or a real shape's own architecture, eager
    PyTorch."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    torch.set_num_threads(job.threads)
    path = artifacts.hf_model_dir(job.shape, job.work)
    cls = AutoModelForSeq2SeqLM if job.shape.is_ed else AutoModelForCausalLM
    model = cls.from_pretrained(path, dtype=torch.float32).eval()
    pad = model.config.pad_token_id
    if pad is None:  # Llama / Qwen2 configs have none: generate pads with EOS
        pad = model.config.eos_token_id
    encode = _hf_encode(model.get_encoder()) if job.shape.is_ed else None
    files = sorted(path.glob("*.safetensors"))
    generate = _hf_generate(model, job.shape.is_ed, pad, forced_target(job.shape))
    r = Runner(generate, encode, files)
    if not job.shape.is_ed:

        @torch.inference_mode()
        def nll(windows):
            return _summed([logits_nll(model(torch.tensor([w])).logits[0, :-1].numpy(), w[1:])
                            for w in windows], windows)  # fmt: skip

        r.nll = nll
    return r


def load_hf_llama(job: Job) -> Runner:
    """The Llama that onnxruntime-genai converts, eager PyTorch: the genai stacks' reference."""
    import torch
    from transformers import LlamaForCausalLM

    torch.set_num_threads(job.threads)
    path = artifacts.llama_dir(job.shape, job.work)
    model = LlamaForCausalLM.from_pretrained(path).eval()
    return Runner(_hf_generate(model, False, model.config.pad_token_id), None,
                  [path / "model.safetensors"])  # fmt: skip


OPTIMUM_SPINNING = False  # onnx-facts: spinning ORT threads fight torch between session.run calls


def load_optimum(job: Job, int8: bool) -> Runner:
    import torch
    from optimum.onnxruntime import ORTModelForCausalLM, ORTModelForSeq2SeqLM
    from optimum.utils import logging as optimum_logging

    optimum_logging.set_verbosity_error()  # "no standard file name" warnings for *_quantized
    torch.set_num_threads(job.threads)
    path = artifacts.optimum_dir(job.shape, job.work, int8=int8)
    cls = ORTModelForSeq2SeqLM if job.shape.is_ed else ORTModelForCausalLM
    spinning = job.settings.spinning
    so = ort_options(job.threads, OPTIMUM_SPINNING if spinning is None else spinning)
    model = cls.from_pretrained(path, session_options=so, provider="CPUExecutionProvider")
    found = [
        getattr(getattr(model, part, None), "session", None)
        for part in ("encoder", "decoder", "decoder_with_past")
    ]
    found = [s for s in found if s is not None] or [getattr(model, "session", None)]
    sessions = [s for s in found if s is not None]
    files = sorted({Path(s._model_path) for s in sessions if getattr(s, "_model_path", None)})
    if not files:
        files = sorted(path.glob("*.onnx"))
    files += [
        f.with_name(f.name + "_data") for f in files if f.with_name(f.name + "_data").exists()
    ]
    pad = model.config.pad_token_id
    encode = _hf_encode(model.encoder) if job.shape.is_ed else None
    generate = _hf_generate(model, job.shape.is_ed, pad, forced_target(job.shape))
    return Runner(generate, encode, files, sessions)


def load_ct2(job: Job, int8: bool) -> Runner:
    import ctranslate2

    if job.frontier:
        return load_ct2_package(job, int8)
    path = artifacts.ct2_dir(job.shape, job.work, int8=int8)
    vocab = artifacts.ct2_vocab(path) if job.shape.real else artifacts.hf_vocab(job.shape)
    index = {t: i for i, t in enumerate(vocab)}
    forced = forced_target(job.shape)
    kw = dict(device="cpu", compute_type="int8" if int8 else "float32", inter_threads=1)
    kw["intra_threads"] = job.threads
    if job.shape.is_ed:
        tr = ctranslate2.Translator(str(path), **kw)

        def decode(ids, k: int, prefix: list[int] | None):
            # the target prefix counts in max_decoding_length and is in the hypotheses
            extra = {}
            if prefix is not None:
                extra["target_prefix"] = [[vocab[i] for i in prefix]] * len(ids)
                k += len(prefix)
            res = tr.translate_batch(
                [[vocab[i] for i in r] for r in ids], beam_size=1, max_decoding_length=k,
                min_decoding_length=k, max_input_length=0, **extra,
            )  # fmt: skip
            return [[index[t] for t in r.hypotheses[0]] for r in res]

        def generate(ids, n):
            return forcing_first(forced, n, lambda k, prefix: decode(ids, k, prefix))

        parallel: dict[int, ctranslate2.Translator] = {}  # inter_threads > 1

        def translate_file(src: Path, out: Path, n: int, b: FileBatching):
            t = tr
            if b.inter_threads > 1:
                if b.inter_threads not in parallel:
                    threads = max(1, job.threads // b.inter_threads)
                    options = kw | dict(inter_threads=b.inter_threads, intra_threads=threads)
                    parallel[b.inter_threads] = ctranslate2.Translator(str(path), **options)
                t = parallel[b.inter_threads]
            # the source ends with EOS, as in `generate` (Marian's '</s>' is id 0)
            eos = vocab[job.shape.cfg.eos_id if job.shape.real else 0]
            lines = src.read_text(encoding="utf-8").splitlines()
            res = t.translate_batch(
                [line.split() + [eos] for line in lines], max_batch_size=b.max_batch_size,
                batch_type=b.batch_type, beam_size=1, max_decoding_length=n,
                min_decoding_length=n, max_input_length=0,
            )  # fmt: skip
            out.write_text("".join(" ".join(r.hypotheses[0]) + "\n" for r in res), "utf-8")

    else:
        gen = ctranslate2.Generator(str(path), **kw)

        def generate(ids, n):
            res = gen.generate_batch(
                [[vocab[i] for i in r] for r in ids], max_length=n, min_length=n,
                sampling_topk=1, beam_size=1, include_prompt_in_result=False,
            )  # fmt: skip
            return [list(r.sequences_ids[0]) for r in res]

    r = Runner(generate, None, [path / "model.bin"])
    if job.shape.is_ed:
        r.translate_file = file_timer(vocab, translate_file)
    return r


def load_ct2_package(job: Job, int8: bool) -> Runner:
    """CTranslate2 on the conversion of the job's package's own weights (the frontier): text in
    and out through the package's tokenizers, as our runtime (sources cut to max_len tokens with
    EOS, up to max_len new tokens, padding and BOS never chosen)."""
    import ctranslate2
    from tokenizers import Tokenizer

    from edgeformer.core.format import TOKENIZER_FILE

    from ..runtime.package import load_package

    assert job.package is not None  # a frontier job runs a package
    pkg = load_package(job.package, verify=False)
    cfg, special = pkg.config.model, pkg.config.special_tokens
    path = artifacts.ct2_package_dir(job.package, job.work, int8=int8)
    source = Tokenizer.from_file(str(pkg.source_tokenizer))
    target = Tokenizer.from_file(str(pkg.path / TOKENIZER_FILE))
    vocab = artifacts.package_vocab(pkg.path / TOKENIZER_FILE, cfg.vocab_size)
    index = {t: i for i, t in enumerate(vocab)}
    eos = artifacts.package_vocab(pkg.source_tokenizer, cfg.vocab_size)[special.eos_id]
    banned = [[vocab[special.pad_id]], [vocab[special.bos_id]]]
    kw = dict(device="cpu", compute_type="int8" if int8 else "float32", inter_threads=1)
    translators = {1: ctranslate2.Translator(str(path), **kw, intra_threads=job.threads)}

    def translator(inter: int) -> ctranslate2.Translator:
        if inter not in translators:
            threads = max(1, job.threads // inter)
            options = kw | dict(inter_threads=inter, intra_threads=threads)
            translators[inter] = ctranslate2.Translator(str(path), **options)
        return translators[inter]

    def translate(texts: list[str], beams: int, b: FileBatching | None = None) -> list[str]:
        b = b or FileBatching(TEXT_BATCH)
        enc = source.encode_batch(texts, add_special_tokens=False)
        res = translator(b.inter_threads).translate_batch(
            [e.tokens[: cfg.max_len - 1] + [eos] for e in enc], max_batch_size=b.max_batch_size,
            batch_type=b.batch_type, beam_size=beams, max_decoding_length=cfg.max_len,
            suppress_sequences=banned,
        )  # fmt: skip
        ids = [[index[t] for t in r.hypotheses[0]] for r in res]
        return target.decode_batch(ids, skip_special_tokens=True)

    def one(text: str) -> str:
        return translate([text], 1, FileBatching(1))[0]

    def file(src: Path, out: Path, b: FileBatching) -> None:
        lines = src.read_text(encoding="utf-8").splitlines()
        out.write_text("".join(t + "\n" for t in translate(lines, 1, b)), encoding="utf-8")

    def generate(ids, n):  # the package's ids, forced length (not a frontier measure)
        res = translators[1].translate_batch(
            [[vocab[i] for i in r] for r in ids], beam_size=1, max_decoding_length=n,
            min_decoding_length=n,
        )  # fmt: skip
        return [[index[t] for t in r.hypotheses[0]] for r in res]

    return TextPath(translate, one, file).attach(Runner(generate, None, [path / "model.bin"]))


# ---- onnxruntime-genai -------------------------------------------------------------------------


def load_genai(job: Job, precision: str) -> Runner:
    """onnxruntime-genai's C++ generation loop on the model builder's graph (CPU): greedy,
    min_length = max_length = prompt + n, the intra-op threads set through genai's config.
    genai's config has no onnxruntime spinning option: its sessions keep onnxruntime's default."""
    import numpy as np
    import onnxruntime_genai as og

    path = artifacts.genai_dir(job.shape, job.work, precision)
    config = og.Config(str(path))
    options = {"intra_op_num_threads": job.threads, "inter_op_num_threads": 1}
    config.overlay(json.dumps({"model": {"decoder": {"session_options": options}}}))
    config.clear_providers()  # the CPU
    model = og.Model(config)

    def generate(ids, n):
        B, P = len(ids), len(ids[0])  # workloads have equal-length rows
        params = og.GeneratorParams(model)
        params.set_search_options(
            do_sample=False, num_beams=1, batch_size=B, max_length=P + n, min_length=P + n
        )
        gen = og.Generator(model, params)
        gen.append_tokens(np.asarray(ids, dtype=np.int32))
        while not gen.is_done():
            gen.generate_next_token()
        return [np.asarray(gen.get_sequence(i))[P:].tolist() for i in range(B)]

    def nll(windows):
        """Each window as a prompt: genai's own run of it gives every position's logits."""
        total = []
        for w in windows:
            params = og.GeneratorParams(model)
            params.set_search_options(batch_size=1, max_length=len(w) + 1)
            gen = og.Generator(model, params)
            gen.append_tokens(np.asarray([w], dtype=np.int32))
            logits = np.asarray(gen.get_output("logits"))[0, :-1]  # (T, V): every position
            total.append(logits_nll(logits, w[1:]))
        return _summed(total, windows)

    files = sorted(f for f in path.iterdir() if f.suffix in (".onnx", ".data"))
    return Runner(generate, None, files, nll=nll)


def load_llamacpp(job: Job, quant: str) -> Runner:
    """llama.cpp (llama-cpp-python's bindings of llama.h) on the GGUF quantized at `quant`
    (benchmarks.llamacpp: one context, a sequence per row, greedy with EOS banned)."""
    from .llamacpp import load, perplexity

    if quant == "gguf":  # the --hf run's own file, as given
        path = artifacts.gguf_original(job.shape)
    else:
        path = artifacts.gguf_quantized(job.shape, job.work, quant, job.threads) / "model.gguf"
    generate, close = load(path, job.threads)

    def nll(windows):
        got = perplexity(path, windows, job.threads)
        return {"nll": got["nll"], "tokens": got["tokens"]}

    return Runner(generate, None, [path], close=close, nll=nll)
