"""The registry of stacks: every stack `edgeformer bench` knows, in one list, each with how its
files are built (`build`, in the main process, before any timing) and how it is loaded (`load`,
in the stack's own process: `runners`).

Ours: the edgeformer runtime on each package variant (`edgeformer.core.format.VARIANTS`),
and our PyTorch model eager with KV cache; the edgeformer-llama-* stacks: our runtime on the
Llama that onnxruntime-genai converts (LM only). Peers: HF PyTorch `generate` (GPT-2 / Marian,
and that Llama), Optimum + onnxruntime, CTranslate2, onnxruntime-genai. A stack whose Python
package is missing is skipped with the reason. The optimum-* stacks run (and build their files)
under the interpreter of Optimum's own environment when one is configured (`python_for`,
`optimum_env`): Optimum cannot be installed beside transformers 5.

Same weights: every stack of a row runs one model. Ours run the conversion of the Marian /
GPT-2 model the peers run (`artifacts.hf_weights`; `for_job` then gives them the peers' ids and
hf-torch as reference), and the Llama genai runs; only a --package (the user's trained model,
our vocabulary) or a missing transformers makes ours run a model of their own.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from ..core.commandline import pip_extra
from . import artifacts, llama_env, optimum_env, runners
from .runners import Runner
from .settings import Job, Settings
from .shapes import Shape, languages, make_inputs
from .weights import NO_GGUF, gguf_of, prompt_rows

ED, LM = "encoder-decoder", "decoder-only"


@dataclass(frozen=True)
class Stack:
    name: str
    group: str  # "ours" | "peers"
    precision: str  # "fp32" | "int8" | "int4" | "int8-dynamic" | "fp16"
    ref: str  # the stack whose fp32 outputs this one's are compared with ("agree")
    build: Callable[[Job], object]  # make the files (main process)
    load: Callable[[Job], Runner]  # load them (the stack's process)
    needs: tuple[str, ...] = ()  # Python modules it imports
    device: str = "cpu"
    variant: str = ""  # package variant (edgeformer runtime)
    families: tuple[str, ...] = (ED, LM)  # the shapes it has a model for
    vocab: str = "ours"  # whose token ids it takes: "ours" | "hf" | "llama"
    note: str = ""  # why a family is missing, for the skip reason
    # "optimum": runs in Optimum's own environment when one is configured (optimum_env); its
    # `build` runs there too, after `shared` (the files made here: the HF model) is built here
    env: str = ""
    shared: Callable[[Job], object] | None = None


def _variants() -> tuple[str, ...]:
    """The runtime's variants, less the web ones (fp32 compute: for onnxruntime-web, slower
    than fp32 on the CPU provider this bench runs)."""
    from ..core.format import VARIANTS, WEB_VARIANTS

    return tuple(v for v in VARIANTS if v not in WEB_VARIANTS)


def _build_package(job: Job) -> None:
    artifacts.package_for(job)


def _build_checkpoint(job: Job) -> None:
    artifacts.checkpoint_for(job)


def _build_llama_package(job: Job) -> None:
    artifacts.llama_package_for(job)


LLAMA_OURS = "edgeformer-llama-"
NO_LLAMA_ED = "onnxruntime-genai's model builder has no encoder-decoder text model (Whisper only)"


def all_stacks(cuda: bool = False) -> list[Stack]:
    """Every stack, in report order. Our variants come from the runtime's VARIANTS."""
    ours = "edgeformer-torch"
    stacks = [Stack(ours, "ours", "fp32", ours, _build_checkpoint, runners.load_our_torch,
                    ("torch",))]  # fmt: skip
    variants = _variants()
    for v in variants:
        load = partial(runners.load_our_runtime, variant=v)
        stacks.append(Stack(f"edgeformer-{v}", "ours", v, ours, _build_package, load, variant=v))
    # no -cuda stacks of ours: the runtime decodes on the CPU provider (runtime.api.cpu_only)
    # the Llama that onnxruntime-genai converts, converted by us too (same weights, same ids)
    llama_ours = ("torch", "transformers")  # to make the Llama and convert it
    for v in artifacts.LLAMA_VARIANTS:
        load = partial(runners.load_our_runtime, variant=v, package=artifacts.llama_package_for)
        stacks.append(Stack(f"edgeformer-llama-{v}", "ours", v, "hf-torch-llama",
                            _build_llama_package, load, llama_ours, variant=v, families=(LM,),
                            vocab="llama", note=NO_LLAMA_ED))  # fmt: skip

    def hf(job):
        return artifacts.hf_model_dir(job.shape, job.work)

    def optimum(int8):
        return lambda job: artifacts.optimum_dir(job.shape, job.work, int8=int8)

    def ct2(int8):
        return lambda job: artifacts.ct2_dir(job.shape, job.work, int8=int8)

    def genai(precision):
        return lambda job: artifacts.genai_dir(job.shape, job.work, precision)

    def gguf_f32(job):  # in the bench's environment (the converter needs torch, transformers)
        vendor = llama_env.vendor_dir(job.settings.llama_python or "")
        return artifacts.gguf_f32(job.shape, job.work, vendor)

    def gguf(quant):  # in llama.cpp's environment
        return lambda job: artifacts.gguf_quantized(job.shape, job.work, quant, job.threads)

    torch_hf = ("torch", "transformers")
    opt = (*torch_hf, "optimum.onnxruntime")
    ct = ("ctranslate2", "transformers")
    og = ("onnxruntime_genai", *torch_hf, "onnx_ir")  # onnx_ir: the model builder
    llama: dict[str, Any] = dict(families=(LM,), vocab="llama", note=NO_LLAMA_ED)
    own_env: dict[str, Any] = dict(vocab="hf", env="optimum", shared=hf)
    stacks += [
        Stack("hf-torch", "peers", "fp32", "hf-torch", hf, runners.load_hf_torch, torch_hf,
              vocab="hf"),
        Stack("optimum-fp32", "peers", "fp32", "hf-torch", optimum(False),
              partial(runners.load_optimum, int8=False), opt, **own_env),
        Stack("optimum-int8", "peers", "int8-dynamic", "hf-torch", optimum(True),
              partial(runners.load_optimum, int8=True), opt, **own_env),
        Stack("ct2-fp32", "peers", "fp32", "hf-torch", ct2(False),
              partial(runners.load_ct2, int8=False), ct, vocab="hf"),
        Stack("ct2-int8", "peers", "int8", "hf-torch", ct2(True),
              partial(runners.load_ct2, int8=True), ct, vocab="hf"),
        Stack("hf-torch-llama", "peers", "fp32", "hf-torch-llama",
              lambda job: artifacts.llama_dir(job.shape, job.work), runners.load_hf_llama,
              torch_hf, **llama),
        Stack("genai-fp32", "peers", "fp32", "hf-torch-llama", genai("fp32"),
              partial(runners.load_genai, precision="fp32"), og, **llama),
        Stack("genai-int4", "peers", "int4", "hf-torch-llama", genai("int4"),
              partial(runners.load_genai, precision="int4"), og, **llama),
    ]  # fmt: skip
    no_ed = "llama.cpp runs decoder-only models (its converter has no Marian)"
    own_llama: dict[str, Any] = dict(env="llamacpp", shared=gguf_f32, **{**llama, "note": no_ed})
    for quant, precision in (("q8_0", "int8"), ("q4_0", "int4"), ("q4_k_m", "int4")):
        stacks.append(Stack(f"llamacpp-{quant}", "peers", precision, "hf-torch-llama",
                            gguf(quant), partial(runners.load_llamacpp, quant=quant),
                            ("llama_cpp",), **own_llama))  # fmt: skip
    # an --hf FILE.gguf run: the file itself (its own types), nothing converted or quantized
    original = {**own_llama, "shared": None}
    stacks.append(Stack("llamacpp-gguf", "peers", "gguf", "hf-torch-llama",
                        lambda job: artifacts.gguf_original(job.shape),
                        partial(runners.load_llamacpp, quant="gguf"), ("llama_cpp",),
                        **original))  # fmt: skip
    return stacks


DEFAULT_EXCLUDE = ("edgeformer-fp16",)  # fp16 on CPU is not a deployment target; ask by name


def get_stack(name: str) -> Stack:
    for s in all_stacks(cuda=True):
        if s.name == name:
            return s
    raise ValueError(f"unknown stack {name!r}")


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


def for_job(stack: Stack, job: Job) -> Stack:
    """`stack` as it runs in `job`. Our ED / LM stacks (vocab "ours") run the conversion of the
    peers' Marian / GPT-2 model unless a --package is given (`artifacts.hf_weights`): then they
    take that model's ("hf") ids and their reference is hf-torch, like every peer of the row;
    with a --package they run the user's model, in our vocabulary, against edgeformer-torch.
    On a real shape there is one model (its own architecture): the Llama stacks run it too,
    with its ids, against hf-torch."""
    if stack.vocab == "ours" and artifacts.hf_weights(job):
        return dataclasses.replace(stack, vocab="hf", ref="hf-torch")
    if stack.vocab == "llama" and job.shape.real:
        ref = "hf-torch" if stack.ref == "hf-torch-llama" else stack.ref
        return dataclasses.replace(stack, vocab="hf", ref=ref)
    return stack


# on a real shape these stacks would run what another stack of the row runs
SAME_ON_REAL = {"hf-torch-llama": "hf-torch"}
REAL_DUPLICATE = (
    "on a real shape the model is the shape's own architecture, which {other} runs: no separate "
    "Llama"
)


def package_of(stack: Stack, job: Job) -> Path:
    """The package one of our runtime stacks runs: the converted Llama's for the
    edgeformer-llama-* stacks, the job's package otherwise."""
    llama = stack.vocab == "llama"
    return artifacts.llama_package_for(job) if llama else artifacts.package_for(job)


def missing_modules(stack: Stack) -> list[str]:
    """The modules `stack` needs that cannot be imported here."""
    return [m for m in stack.needs if not artifacts.installed(m)]


def python_for(stack: Stack, settings: Settings) -> str:
    """The interpreter of the stack's process: Optimum's environment for the optimum-* stacks
    when one is configured (`Settings.optimum_python`), llama.cpp's for the llamacpp-* stacks
    (`Settings.llama_python`), else the bench's own."""
    if stack.env == "optimum" and settings.optimum_python:
        return settings.optimum_python
    if stack.env == "llamacpp" and settings.llama_python:
        return settings.llama_python
    return sys.executable


def elsewhere(stack: Stack, settings: Settings) -> bool:
    """Whether the stack runs (and builds its files) in an environment other than the bench's."""
    return python_for(stack, settings) != sys.executable


def skip_reason(stack: Stack, shape: Shape, job: Job) -> str | None:
    """Why `stack` cannot run on this shape here (None: it can)."""
    if shape.family not in stack.families:
        return stack.note or f"no {shape.family} model"
    if shape.real and (stack.name in SAME_ON_REAL or stack.name.startswith(LLAMA_OURS)):
        other = SAME_ON_REAL.get(stack.name, stack.name.replace(LLAMA_OURS, "edgeformer-"))
        return REAL_DUPLICATE.format(other=other)
    if (stack.variant == "gguf" or stack.name == "llamacpp-gguf") and gguf_of(shape) is None:
        return NO_GGUF.format(what="gguf variant (a GGUF file's own blocks)"
                              if stack.variant else "original file")  # fmt: skip
    if stack.env == "llamacpp":  # only in its own environment
        return llama_env.problem(job.settings.llama_python)
    if elsewhere(stack, job.settings):
        return optimum_env.problem(python_for(stack, job.settings))
    missing = missing_modules(stack)
    if missing:
        how = (
            "its own environment: edgeformer bench --make-optimum-env DIR or --optimum-python, "
            "benchmarks/README.md"
            if stack.env == "optimum"
            else pip_extra("bench")
        )
        return f"not installed: {', '.join(missing)} ({how})"
    if stack.name == "edgeformer-torch" and job.package and not job.checkpoint:
        return "--package given without its --checkpoint"
    return None


def cuda_available() -> bool:
    try:
        import onnxruntime as ort
    except ImportError:
        return False
    return "CUDAExecutionProvider" in ort.get_available_providers()


def package_variants(stacks: list[Stack], gguf: bool = False) -> tuple[str, ...]:
    """The package variants the selected stacks of our runtime need (fp32 always); `gguf`
    only where the model comes from a GGUF file (`gguf`: an --hf FILE.gguf run)."""
    wanted = {s.variant for s in stacks if s.variant} - ({"fp32"} if gguf else {"fp32", "gguf"})
    return ("fp32", *sorted(wanted))


def inputs_for(stack: Stack, shape: Shape, batch: int, length: int) -> list[list[int]]:
    """The same random ids for every stack of a family, in the stack's own vocabulary: ours (ids
    from 4), the HF GPT-2 / Marian models' (from 2, below the last id) or the Llama's (from 3);
    a multilingual shape's sources start with the source language (NLLB's `eng_Latn` words
    `</s>`, words from 4, below the language codes)."""
    text = prompt_rows(shape, batch, length)
    if text is not None and stack.vocab != "ours":  # --hf: the text's ids, the model's own
        return text
    V = shape.cfg.vocab_size
    lang = languages(shape)
    if lang is not None and stack.vocab != "ours":  # NLLB: `eng_Latn words </s>`
        rows = make_inputs(batch, length - 1, V, _real_eos(shape), 4, lang["words"])
        return [[int(lang["source"][1]), *r] for r in rows]
    if shape.hf is not None and stack.vocab != "ours":  # ids below the config's special ones
        return make_inputs(batch, length, V, _real_eos(shape), 2, _real_high(shape))
    if stack.vocab == "ours":
        eos = shape.cfg.eos_id if shape.is_ed else None
        return make_inputs(batch, length, V, eos, 4, V)
    if stack.vocab == "llama":
        return make_inputs(batch, length, V, None, len(artifacts.LLAMA_SPECIALS), V)
    eos = 0 if shape.is_ed else None  # Marian: '</s>' = 0; GPT-2 prompt: no special token
    return make_inputs(batch, length, V, eos, 2, V - 1)


def _real_eos(shape: Shape) -> int | None:
    """The EOS id a real translator's sources end with (None for an LM's prompt)."""
    if not shape.is_ed or shape.hf is None:
        return None
    eos = shape.hf.get("eos_token_id")
    return eos[0] if isinstance(eos, list) else eos


def _real_high(shape: Shape) -> int:
    """One past the largest id of a real shape's random inputs: below its special tokens that
    follow the words (Qwen2.5's from 151,643, Marian's pad), so prompts hold words only."""
    assert shape.hf is not None
    specials = [i for i in artifacts.real_specials(shape.hf) if i > 2]
    return min([*specials, shape.cfg.vocab_size])
