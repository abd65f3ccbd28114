"""The stacks under test, each loaded into a `Runner` with one calling convention.

    generate(ids, n)  token id lists -> n new ids per row (greedy, EOS ignored, no prompt/BOS)
    encode(ids)       the encoder alone (ED stacks that expose it), result discarded
    files             what the stack loads from disk (its model size)

Ours: the edgeformer runtime on a package variant, and our PyTorch model eager with KV cache.
Peers: HF PyTorch `generate`, Optimum + onnxruntime, CTranslate2. A stack whose Python package is
missing is skipped with the reason.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import artifacts
from .shapes import Shape, make_inputs


@dataclass(frozen=True)
class Stack:
    name: str
    group: str  # "ours" | "peers"
    precision: str  # "fp32" | "int8" | "int4" | "int8-dynamic" | "fp16"
    ref: str  # the stack whose fp32 outputs this one is compared with
    needs: tuple[str, ...] = ()  # Python modules it imports
    device: str = "cpu"
    variant: str = ""  # package variant (edgeformer runtime)


def all_stacks(cuda: bool = False) -> list[Stack]:
    ours = "edgeformer-torch"
    stacks = [Stack(ours, "ours", "fp32", ours, ("torch",))]
    for v in ("fp32", "int8", "int4", "int8-dynamic", "fp16"):
        stacks.append(Stack(f"edgeformer-{v}", "ours", v, ours, (), "cpu", v))
    if cuda:
        for v in ("fp32", "fp16"):
            stacks.append(Stack(f"edgeformer-{v}-cuda", "ours", v, ours, (), "cuda", v))
    hf, opt = ("torch", "transformers"), ("torch", "transformers", "optimum.onnxruntime")
    stacks += [
        Stack("hf-torch", "peers", "fp32", "hf-torch", hf),
        Stack("optimum-fp32", "peers", "fp32", "hf-torch", opt),
        Stack("optimum-int8", "peers", "int8-dynamic", "hf-torch", opt),
        Stack("ct2-fp32", "peers", "fp32", "hf-torch", ("ctranslate2", "transformers")),
        Stack("ct2-int8", "peers", "int8", "hf-torch", ("ctranslate2", "transformers")),
    ]
    return stacks


DEFAULT_EXCLUDE = ("edgeformer-fp16",)  # fp16 on CPU is not a deployment target; ask by name


def select_stacks(spec: str, cuda: bool = False) -> list[Stack]:
    """'all' | 'ours' | 'peers' | comma list of names or name prefixes ('edgeformer', 'ct2')."""
    stacks = all_stacks(cuda)
    chosen: list[Stack] = []
    for part in [p.strip() for p in spec.split(",") if p.strip()]:
        if part in ("all", "ours", "peers"):
            hit = [
                s
                for s in stacks
                if (part == "all" or s.group == part) and s.name not in DEFAULT_EXCLUDE
            ]
        else:
            hit = [s for s in stacks if s.name == part] or [
                s for s in stacks if s.name.startswith(part) and s.name not in DEFAULT_EXCLUDE
            ]
        if not hit:
            names = ", ".join(s.name for s in stacks)
            raise ValueError(f"unknown stack {part!r}; known: all, ours, peers, {names}")
        chosen += [s for s in hit if s not in chosen]
    return chosen


def missing_modules(stack: Stack) -> list[str]:
    """The modules `stack` needs that cannot be imported here."""

    def found(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package missing, or a None in sys.modules
            return False

    return [m for m in stack.needs if not found(m)]


def cuda_available() -> bool:
    try:
        import onnxruntime as ort
    except ImportError:
        return False
    return "CUDAExecutionProvider" in ort.get_available_providers()


@dataclass
class Runner:
    generate: Callable[[list[list[int]], int], list[list[int]]]
    encode: Callable[[list[list[int]]], object] | None = None
    files: list[Path] = field(default_factory=list)
    sessions: list = field(default_factory=list)  # onnxruntime sessions, for the profile
    # a stack in its own process (benchmarks.worker) reports the time measured there
    timed_generate: Callable[[list[list[int]], int], tuple[float, list[list[int]]]] | None = None
    timed_encode: Callable[[list[list[int]]], tuple[float, object]] | None = None
    close: Callable[[], None] | None = None


@dataclass
class Sources:
    """Where each stack's files are: filled lazily by `artifacts` for one shape."""

    shape: Shape
    work: Path
    package: Path | None = None  # a trained package given with --package
    checkpoint: Path | None = None  # its checkpoint (for edgeformer-torch), if given
    variants: tuple[str, ...] = ("fp32",)  # package variants to export (random weights)
    spinning: bool | None = None  # onnxruntime intra-op spinning for our runtime (None: default)

    def our_package(self) -> Path:
        return self.package or artifacts.our_package(self.shape, self.work, self.variants)

    def our_checkpoint(self) -> Path:
        if self.package and not self.checkpoint:
            raise RuntimeError("a --package was given without its --checkpoint")
        return self.checkpoint or artifacts.our_checkpoint(self.shape, self.work)


def package_variants(stacks: list[Stack]) -> tuple[str, ...]:
    """The package variants the selected stacks of our runtime need (fp32 always)."""
    wanted = {s.variant for s in stacks if s.variant}
    return ("fp32", *sorted(wanted - {"fp32"}))


def inputs_for(stack: Stack, shape: Shape, batch: int, length: int) -> list[list[int]]:
    """The same random ids for every stack of a family: ours (ids from 4) or the HF model's."""
    V = shape.cfg.vocab_size
    if stack.group == "ours":
        eos = shape.cfg.eos_id if shape.is_ed else None
        return make_inputs(batch, length, V, eos, 4, V)
    eos = 0 if shape.is_ed else None  # Marian: '</s>' = 0; GPT-2 prompt: no special token
    return make_inputs(batch, length, V, eos, 2, V - 1)


def prepare(stack: Stack, src: Sources) -> None:
    """Build the files `stack` needs (in the main process, before any timing)."""
    shape, work = src.shape, src.work
    if stack.name == "edgeformer-torch":
        src.our_checkpoint()
    elif stack.name.startswith("edgeformer-"):
        src.our_package()
    elif stack.name == "hf-torch":
        artifacts.hf_model_dir(shape, work)
    elif stack.name.startswith("optimum-"):
        artifacts.optimum_dir(shape, work, int8=stack.name.endswith("int8"))
    elif stack.name.startswith("ct2-"):
        artifacts.ct2_dir(shape, work, int8=stack.name.endswith("int8"))


def load(stack: Stack, src: Sources, threads: int) -> Runner:
    """Load `stack` for `src.shape` (files must exist: see `prepare`)."""
    if stack.name == "edgeformer-torch":
        return _load_our_torch(src, threads)
    if stack.name.startswith("edgeformer-"):
        return _load_our_runtime(stack, src, threads)
    if stack.name == "hf-torch":
        return _load_hf_torch(src, threads)
    if stack.name.startswith("optimum-"):
        return _load_optimum(stack, src, threads)
    if stack.name.startswith("ct2-"):
        return _load_ct2(stack, src, threads)
    raise ValueError(f"unknown stack {stack.name}")


# ---- ours --------------------------------------------------------------------------------------


def _load_our_torch(src: Sources, threads: int) -> Runner:
    import torch

    from edgeformer.models import complete_ids, translate_ids
    from edgeformer.models.checkpoint import WEIGHTS, load_checkpoint
    from edgeformer.models.generation import pad_batch
    from edgeformer.runtime.decoding import GenerationOptions

    torch.set_num_threads(threads)
    ckpt = src.our_checkpoint()
    model, _ = load_checkpoint(ckpt)
    fn = translate_ids if src.shape.is_ed else complete_ids

    def generate(ids, n):
        return fn(model, ids, GenerationOptions(max_new_tokens=n, ignore_eos=True))

    @torch.no_grad()
    def encode(ids):
        x, mask = pad_batch(ids, model.cfg.pad_id)
        return model.encode(x, mask)

    return Runner(generate, encode if src.shape.is_ed else None, [ckpt / WEIGHTS])


def ort_options(threads: int, spinning: bool | None = None, profile_file: str | None = None):
    """SessionOptions used for every onnxruntime session we create ourselves."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if spinning is not None:
        so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    if profile_file:
        so.enable_profiling = True
        so.profile_file_prefix = profile_file
    return so


def _load_our_runtime(stack: Stack, src: Sources, threads: int) -> Runner:
    import numpy as np
    import onnxruntime as ort

    from edgeformer.runtime import Generator, Translator
    from edgeformer.runtime.decoding import GenerationOptions
    from edgeformer.runtime.package import load_package

    pkg_path = src.our_package()
    pkg = load_package(pkg_path, verify=False)
    if stack.variant not in pkg.variants:
        raise RuntimeError(f"package has no {stack.variant} variant (it has {pkg.variants})")
    provider = "cuda" if stack.device == "cuda" else "cpu"
    cls = Translator if src.shape.is_ed else Generator
    rt = cls(pkg_path, stack.variant, provider, threads, src.spinning)
    call = getattr(rt, "translate_ids" if src.shape.is_ed else "generate_ids")

    def generate(ids, n):
        return call(ids, GenerationOptions(max_new_tokens=n, ignore_eos=True))

    graphs = pkg.config["variants"][stack.variant]["files"]
    files = [pkg_path / f for f in graphs.values()]
    files += [
        f.with_name(f.name + ".data") for f in files if f.with_name(f.name + ".data").exists()
    ]
    encode = None
    if src.shape.is_ed:  # a session of our own on the variant's encoder graph
        providers = ["CPUExecutionProvider"]
        if stack.device == "cuda":
            providers.insert(0, "CUDAExecutionProvider")
        enc = ort.InferenceSession(
            str(pkg.file("encoder", stack.variant)), ort_options(threads), providers=providers
        )
        pad = pkg.config["special_tokens"]["pad_id"]

        def encode(ids):
            T = max(map(len, ids))
            x = np.full((len(ids), T), pad, dtype=np.int64)
            m = np.zeros((len(ids), T), dtype=np.int64)
            for i, r in enumerate(ids):
                x[i, : len(r)], m[i, : len(r)] = r, 1
            return enc.run(None, {"input_ids": x, "attention_mask": m})

    return Runner(generate, encode, files)


# ---- peers -------------------------------------------------------------------------------------


def _hf_generate(model, is_ed: bool, pad_id: int):
    """HF `generate`, greedy, exactly n new tokens (min_new_tokens = max_new_tokens)."""
    import torch

    @torch.no_grad()
    def generate(ids, n):
        x = torch.tensor(ids, dtype=torch.long)  # workloads have equal-length rows
        out = model.generate(
            input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=n, min_new_tokens=n,
            do_sample=False, num_beams=1, use_cache=True, pad_token_id=pad_id,
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


def _load_hf_torch(src: Sources, threads: int) -> Runner:
    import torch
    from transformers import GPT2LMHeadModel, MarianMTModel

    torch.set_num_threads(threads)
    path = artifacts.hf_model_dir(src.shape, src.work)
    cls = MarianMTModel if src.shape.is_ed else GPT2LMHeadModel
    model = cls.from_pretrained(path).eval()
    pad = model.config.pad_token_id
    encode = _hf_encode(model.get_encoder()) if src.shape.is_ed else None
    return Runner(_hf_generate(model, src.shape.is_ed, pad), encode, [path / "model.safetensors"])


OPTIMUM_SPINNING = False  # onnx-facts: spinning ORT threads fight torch between session.run calls


def _load_optimum(stack: Stack, src: Sources, threads: int) -> Runner:
    import torch
    from optimum.onnxruntime import ORTModelForCausalLM, ORTModelForSeq2SeqLM
    from optimum.utils import logging as optimum_logging

    optimum_logging.set_verbosity_error()  # "no standard file name" warnings for *_quantized
    torch.set_num_threads(threads)
    int8 = stack.name.endswith("int8")
    path = artifacts.optimum_dir(src.shape, src.work, int8=int8)
    cls = ORTModelForSeq2SeqLM if src.shape.is_ed else ORTModelForCausalLM
    so = ort_options(threads, OPTIMUM_SPINNING if src.spinning is None else src.spinning)
    model = cls.from_pretrained(path, session_options=so, provider="CPUExecutionProvider")
    sessions = [
        getattr(getattr(model, part, None), "session", None)
        for part in ("encoder", "decoder", "decoder_with_past")
    ]
    sessions = [s for s in sessions if s is not None] or [getattr(model, "session", None)]
    sessions = [s for s in sessions if s is not None]
    files = sorted({Path(s._model_path) for s in sessions if getattr(s, "_model_path", None)})
    if not files:
        files = sorted(path.glob("*.onnx"))
    files += [
        f.with_name(f.name + "_data") for f in files if f.with_name(f.name + "_data").exists()
    ]
    pad = model.config.pad_token_id
    encode = _hf_encode(model.encoder) if src.shape.is_ed else None
    return Runner(_hf_generate(model, src.shape.is_ed, pad), encode, files, sessions)


def _load_ct2(stack: Stack, src: Sources, threads: int) -> Runner:
    import ctranslate2

    int8 = stack.name.endswith("int8")
    path = artifacts.ct2_dir(src.shape, src.work, int8=int8)
    vocab = artifacts.hf_vocab(src.shape)
    index = {t: i for i, t in enumerate(vocab)}
    kw = dict(device="cpu", compute_type="int8" if int8 else "float32", inter_threads=1)
    kw["intra_threads"] = threads
    if src.shape.is_ed:
        tr = ctranslate2.Translator(str(path), **kw)

        def generate(ids, n):
            res = tr.translate_batch(
                [[vocab[i] for i in r] for r in ids], beam_size=1, max_decoding_length=n,
                min_decoding_length=n, max_input_length=0,
            )  # fmt: skip
            return [[index[t] for t in r.hypotheses[0]] for r in res]

    else:
        gen = ctranslate2.Generator(str(path), **kw)

        def generate(ids, n):
            res = gen.generate_batch(
                [[vocab[i] for i in r] for r in ids], max_length=n, min_length=n,
                sampling_topk=1, beam_size=1, include_prompt_in_result=False,
            )  # fmt: skip
            return [list(r.sequences_ids[0]) for r in res]

    return Runner(generate, None, [path / "model.bin"])


def env_threads(threads: int) -> dict[str, str]:
    """Environment for child processes: the same thread count for OpenMP-based engines."""
    return {**os.environ, "OMP_NUM_THREADS": str(threads)}
