"""`edgeformer bench --hf DIR|FILE.gguf`: a real model's own weights, every stack on them, with
perplexity beside speed (the speed-at-quality frontier on trained weights).

The input is a Hugging Face model folder or a GGUF file. A GGUF file's Hugging Face folder is
its weights dequantized (models.gguf.convert.write_hf_folder: as transformers and llama.cpp
read them), made once under the run's work folder. Every stack of the row runs that folder:
ours its conversion (from the GGUF file itself where there is one, so that the `gguf` variant
keeps the file's blocks), HF PyTorch it as it is, onnxruntime-genai its model builder's int4,
llama.cpp its own converter's f32 GGUF quantized by its own quantizer (Q8_0, Q4_0, Q4_K_M),
and the original GGUF file as given (`llamacpp-gguf`).

Same ids everywhere: the perplexity windows are Tiny Shakespeare's validation split tokenized
by the folder's tokenizer.json (line by line, no special tokens: the cut export's held-out check
makes, export.quality: CONVERTED_WINDOWS windows of CONVERTED_WINDOW_TOKENS tokens), and the
speed workloads' prompts are that text's first ids. Each stack scores the windows teacher-forced
in its own process (`Runner.nll`: the sum of -log p of every token after a window's first, from
the stack's own logits); the ratio column divides by hf-torch's (transformers fp32).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from .shapes import Shape, config_shape_name, read_config_json, real_shape

# the stacks of an --hf run when --stacks is left at "all": ours, the reference, the peers
HF_STACKS = (
    "edgeformer-fp32", "edgeformer-int8", "edgeformer-int4", "edgeformer-int8-dynamic",
    "edgeformer-gguf", "hf-torch", "genai-int4", "llamacpp-gguf", "llamacpp-q8_0",
    "llamacpp-q4_0", "llamacpp-q4_k_m",
)  # fmt: skip
HF_WORKLOADS = "W1,W4"  # batch 1: a 16-token prompt (ms/token) and a 512-token one (TTFT)
QUICK_WINDOWS, QUICK_WINDOW_TOKENS = 2, 64  # --quick: a smoke test of the path
PROMPT_IDS = 1024  # the text's first ids, the workloads' prompts (W4: 512, W2: 8 x 16)
REFERENCE = "hf-torch"  # the perplexity ratio's denominator: transformers fp32
NO_GGUF = "the {what} needs a GGUF file: edgeformer bench --hf FILE.gguf"


def is_gguf(path: str | Path) -> bool:
    return Path(path).suffix.lower() == ".gguf"


def digest(path: Path) -> str:
    """What identifies the input's content cheaply: each file's name, size and mtime."""
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file())
    stat = [(p.name, p.stat().st_size, int(p.stat().st_mtime)) for p in files]
    return hashlib.sha256(json.dumps(stat).encode()).hexdigest()[:12]


def check_source(source: Path) -> None:
    """One clear error for an input that is neither a model folder nor a GGUF file."""
    if is_gguf(source):
        if not source.is_file():
            raise ValueError(f"--hf {source}: no such GGUF file")
        return
    if not source.is_dir():
        raise ValueError(f"--hf {source}: not a folder (a Hugging Face model) nor a .gguf file")
    for name in ("config.json", "tokenizer.json"):
        if not (source / name).is_file():
            raise ValueError(f"--hf {source}: no {name} (a Hugging Face model folder has both)")
    if not list(source.glob("*.safetensors")) and not list(source.glob("*.bin")):
        raise ValueError(f"--hf {source}: no weights (*.safetensors or *.bin)")


def hf_shape(source: str | Path, folder: Path) -> Shape:
    """The Shape of the input's model (`folder`: its Hugging Face folder, artifacts.hf_folder),
    holding its own weights (`weights_of`) and the text prompt every stack is given
    (`prompt_rows`)."""
    source = Path(source).absolute()
    fields = read_config_json(folder / "config.json")
    name = config_shape_name(source if is_gguf(source) else folder / "config.json", fields)
    shape = real_shape(name, fields, str(source))
    if shape.is_ed:
        raise ValueError(f"--hf {source}: a decoder-only model (perplexity of a causal LM)")
    prompt = text_ids(folder / "tokenizer.json")[:PROMPT_IDS]
    assert shape.hf is not None  # real_shape gives the HF config
    extra = {
        "_bench_weights": str(folder),
        "_bench_gguf": str(source) if is_gguf(source) else None,
        "_bench_digest": digest(source),
        "_bench_prompt": prompt,
    }
    return Shape(shape.name, shape.cfg, {**shape.hf, **extra})


def weights_of(shape: Shape) -> Path | None:
    """The folder of a shape's own weights (--hf), None for random weights."""
    folder = (shape.hf or {}).get("_bench_weights")
    return Path(folder) if folder else None


def gguf_of(shape: Shape) -> Path | None:
    """The GGUF file an --hf run was given, None otherwise."""
    path = (shape.hf or {}).get("_bench_gguf")
    return Path(path) if path else None


def what(shape: Shape) -> str:
    """What the stacks of an --hf shape run, for the report."""
    gguf, folder = gguf_of(shape), weights_of(shape)
    if gguf is not None:
        return (
            f"the GGUF file {gguf.name}; ours converted from the file itself, the other stacks "
            "from its weights dequantized into a Hugging Face folder, llama.cpp's quantizations "
            "made by its own converter and quantizer from that folder"
        )
    return (
        f"the Hugging Face folder {folder}; llama.cpp's quantizations made by its own "
        "converter and quantizer from it"
    )


def prompt_rows(shape: Shape, batch: int, length: int) -> list[list[int]] | None:
    """`batch` prompts of `length` ids from the text (consecutive, wrapping around), or None for
    a shape with no text prompt (random weights: random ids)."""
    ids = (shape.hf or {}).get("_bench_prompt")
    if not ids:
        return None
    return [[ids[(b * length + t) % len(ids)] for t in range(length)] for b in range(batch)]


def text_ids(tokenizer_json: Path) -> list[int]:
    """Tiny Shakespeare's validation split in the model's ids (line by line, no specials)."""
    from ..core.data import load_shakespeare
    from ..export.quality import line_ids

    return line_ids(tokenizer_json, load_shakespeare()[1])


def text_windows(tokenizer_json: Path, quick: bool = False) -> list[list[int]]:
    """`text_ids` cut as export's held-out check of a converted LM cuts it (fewer and shorter
    windows with --quick)."""
    from ..core.metrics import windows
    from ..export.quality import CONVERTED_WINDOW_TOKENS, CONVERTED_WINDOWS

    ids = text_ids(tokenizer_json)
    n, T = (QUICK_WINDOWS, QUICK_WINDOW_TOKENS) if quick else (CONVERTED_WINDOWS,
                                                              CONVERTED_WINDOW_TOKENS)  # fmt: skip
    return windows(ids, T, n)


def windows_of(shape: Shape, quick: bool = False) -> list[list[int]]:
    folder = weights_of(shape)
    assert folder is not None  # an --hf shape
    return text_windows(folder / "tokenizer.json", quick)


def describe_windows(windows: list[list[int]]) -> dict[str, Any]:
    return {
        "text": "Tiny Shakespeare, validation split (core.data.load_shakespeare), tokenized line "
        "by line by the model's tokenizer.json, no special tokens",
        "windows": len(windows),
        "window_tokens": max(map(len, windows)) - 1,
        "predicted_tokens": sum(len(w) - 1 for w in windows),
    }


def perplexity(runners: dict, windows: list[list[int]], info: dict, log=print) -> None:
    """Each stack's teacher-forced perplexity on the windows (in its own process), into
    info[stack]["perplexity"]; a failure is reported there, not raised."""
    import time

    for name, r in runners.items():
        if r.nll is None:
            info[name]["perplexity"] = {"error": "this stack has no teacher-forced scoring"}
            continue
        try:
            t = time.perf_counter()
            got = r.nll(windows)
            ms = (time.perf_counter() - t) * 1e3
        except Exception as e:
            info[name]["perplexity"] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            log(f"  {name} failed to score the windows: {e}")
            continue
        if not math.isfinite(got["nll"]) or got["tokens"] != sum(len(w) - 1 for w in windows):
            info[name]["perplexity"] = {"error": f"scored {got['tokens']} tokens, nll {got['nll']}"}
            continue
        ppl = math.exp(got["nll"] / got["tokens"])
        info[name]["perplexity"] = {**got, "ppl": ppl, "eval_ms": ms}
        log(f"  perplexity {name:<24} {ppl:9.4f}")
    ref = info.get(REFERENCE, {}).get("perplexity", {}).get("ppl")
    for s in info.values():
        p = s.get("perplexity") or {}
        if ref and "ppl" in p:
            p["ratio"] = p["ppl"] / ref
