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


def _digest(path: Path) -> str:
    """What identifies the input's content cheaply: each file's name, size and mtime."""
    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file())
    stat = [(p.name, p.stat().st_size, int(p.stat().st_mtime)) for p in files]
    return hashlib.sha256(json.dumps(stat).encode()).hexdigest()[:12]


def hf_folder(source: Path, work: Path) -> Path:
    """The Hugging Face folder of the input: the folder itself, or a GGUF file dequantized
    (models.gguf.convert.write_hf_folder) under `work`, made once per file content."""
    if not is_gguf(source):
        return source
    from .artifacts import _cached

    def build(path: Path) -> None:
        from ..models.gguf.convert import write_hf_folder
        from ..models.gguf.reader import GGUFFile

        path.mkdir(parents=True)
        write_hf_folder(GGUFFile(source), path)

    key = {"gguf": str(source), "digest": _digest(source)}
    return _cached(work / f"{source.stem}-{key['digest']}-hf", key, build)


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


def hf_shape(source: str | Path, work: Path, quick: bool = False) -> Shape:
    """The Shape of the input's model, holding its own weights (`weights_of`) and the text
    prompt every stack is given (`prompt_ids`)."""
    source = Path(source).absolute()
    check_source(source)
    folder = hf_folder(source, work)
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
        "_bench_digest": _digest(source),
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
    from tokenizers import Tokenizer

    from ..core.data import load_shakespeare

    tok = Tokenizer.from_file(str(tokenizer_json))
    lines = load_shakespeare()[1].splitlines(keepends=True)
    return [i for e in tok.encode_batch(lines, add_special_tokens=False) for i in e.ids]


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


# ---- the report: one row per stack, perplexity beside speed ---------------------------------


def rows(results: dict) -> list[dict]:
    """One row per stack of the --hf shape: perplexity (and ratio), W1 ms/token, decode,
    TTFT at W1 and W4, size, RSS; sorted by perplexity, then speed."""
    shape = results["hf"]["shape"]
    work = {(r["stack"], r["workload"]): r for r in results["workloads"] if r["shape"] == shape}
    out = []
    for name, s in results["stacks"][shape].items():
        if s.get("status") != "ok":
            continue
        w1, w4 = work.get((name, "W1")), work.get((name, "W4"))
        m = s.get("memory") or {}
        p = s.get("perplexity") or {}
        out.append({
            "stack": name,
            "ppl": p.get("ppl"),
            "ratio": p.get("ratio"),
            "ppl_error": p.get("error"),
            "ms_per_token": w1["ms_per_token"]["median"] if w1 else None,
            "decode_ms": w1["decode_ms_per_token"]["median"] if w1 else None,
            "ttft_ms": w1["ttft_ms"]["median"] if w1 else None,
            "ttft_long_ms": w4["ttft_ms"]["median"] if w4 else None,
            "agree": w1["agreement"] if w1 else None,
            "size_mb": s.get("size_mb"),
            "rss_mb": m.get("run_peak_rss_mb", m.get("peak_rss_mb", m.get("loaded_rss_mb"))),
        })  # fmt: skip
    return sorted(out, key=lambda r: (r["ppl"] is None, r["ppl"] or 0, r["ms_per_token"] or 0))


def _f(x, nd: int) -> str:
    if x is None:
        return "—"
    return f"{x:,.{nd}f}"


def markdown(results: dict) -> list[str]:
    hf = results["hf"]
    w = hf["windows"]
    long = next((r for r in results["workloads"] if r["workload"] == "W4"), None)
    lines = [
        f"## Perplexity beside speed: {hf['source']}",
        "",
        f"Every stack runs this model's own weights ({hf['what']}). Perplexity: {w['windows']} "
        f"windows of {w['window_tokens']} tokens of {w['text']} ({w['predicted_tokens']:,} "
        f"tokens predicted, the same ids for every stack), teacher-forced in the stack's own "
        f"process; × fp32 = ÷ {REFERENCE}'s (transformers, fp32). Speed: batch 1, "
        f"{results['settings']['threads']} threads, the text's first ids as the prompt, greedy, "
        "forced length: ms/token and decode of W1 (16-token prompt, 32 new tokens), TTFT = "
        "prompt + first token"
        + (f" (W1; and W4's {long['src_len']}-token prompt)" if long else " (W1)")
        + ". agree = W1's tokens equal to hf-torch's. RSS = the stack's process after its runs.",
        "",
        "| stack | perplexity | × fp32 | ms/token | decode ms/token | TTFT ms | TTFT ms "
        "(512) | agree | size MB | RSS MB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows(results):
        ppl = _f(r["ppl"], 3) if r["ppl"] is not None else f"err: {r['ppl_error']}"
        lines.append(
            f"| {r['stack']} | {ppl} | {_f(r['ratio'], 4)} | {_f(r['ms_per_token'], 2)} "
            f"| {_f(r['decode_ms'], 2)} | {_f(r['ttft_ms'], 1)} | {_f(r['ttft_long_ms'], 0)} "
            f"| {_f(r['agree'], 3)} | {_f(r['size_mb'], 1)} | {_f(r['rss_mb'], 0)} |"
        )
    lines.append("")
    for c in comparisons(results):
        lines.append(f"- {c}")
    return lines + [""]


# issue 57's int4 goal: perplexity no worse than llama.cpp Q4_K_M's, at <= 0.8x its ms/token
INT4_PEER, INT4_SPEED = "llamacpp-q4_k_m", 0.8


def comparisons(results: dict) -> list[str]:
    """The ratios of this run that the frontier is read by: each of our quantized variants
    against llama.cpp's nearest quantization, and the gguf variant against the file."""
    by = {r["stack"]: r for r in rows(results)}
    pairs = (
        ("edgeformer-int4", INT4_PEER), ("edgeformer-int4", "llamacpp-q4_0"),
        ("edgeformer-int8", "llamacpp-q8_0"), ("edgeformer-gguf", "llamacpp-gguf"),
        ("edgeformer-fp32", REFERENCE),
    )  # fmt: skip
    out = []
    for ours, peer in pairs:
        a, b = by.get(ours), by.get(peer)
        if not (a and b and a["ppl"] and b["ppl"] and a["ms_per_token"] and b["ms_per_token"]):
            continue
        text = (
            f"{ours} ÷ {peer}: perplexity {a['ppl'] / b['ppl']:.4f}×, ms/token "
            f"{a['ms_per_token'] / b['ms_per_token']:.2f}×"
        )
        if ours == "edgeformer-int4" and peer == INT4_PEER:
            met = a["ppl"] <= b["ppl"] and a["ms_per_token"] <= INT4_SPEED * b["ms_per_token"]
            text += (
                f" (issue 57's int4 goal: perplexity ≤ and ms/token ≤ {INT4_SPEED}×: "
                f"{'met' if met else 'NOT met'})"
            )
        out.append(text)
    return out


MARKERS = {"edgeformer": "o", "hf": "P", "genai": "s", "llamacpp": "^"}


def plot(results: dict, path: Path) -> Path | None:
    """Two panels: perplexity (× fp32) against W1 ms/token and against size on disk; a point
    per stack, a marker per engine, the Pareto front of speed and perplexity dashed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    from .report import pareto

    pts = [r for r in rows(results) if r["ratio"] is not None]
    if not pts:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5))
    panels = (("ms_per_token", "ms per token, batch 1 (lower is better)"),
              ("size_mb", "size on disk, MB (lower is better)"))  # fmt: skip
    for ax, (key, label) in zip(axes, panels):
        shown = [r for r in pts if r[key]]
        for i, r in enumerate(shown):
            engine = r["stack"].split("-")[0]
            ax.scatter(r[key], r["ratio"], marker=MARKERS.get(engine, "*"), s=70,
                       color=f"C{i % 10}", edgecolors="black", linewidths=0.5, zorder=3,
                       label=r["stack"])  # fmt: skip
            ax.annotate(r["stack"], (r[key], r["ratio"]), fontsize=7, xytext=(4, 4),
                        textcoords="offset points")  # fmt: skip
        front = pareto([(r[key], -r["ratio"]) for r in shown], faster_is_lower=True)
        ax.step([x for x, _ in front], [-y for _, y in front], where="post", color="grey",
                alpha=0.6, linestyle="--", zorder=2)  # fmt: skip
        ax.set_xlabel(label)
        ax.set_ylabel("perplexity ÷ transformers fp32 (lower is better)")
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7, loc="best")
    hf, meta = results["hf"], results["meta"]
    axes[0].set_title("perplexity vs latency")
    axes[1].set_title("perplexity vs size")
    fig.suptitle(
        f"{Path(hf['source']).name}: every stack on its weights · {hf['windows']['windows']} x "
        f"{hf['windows']['window_tokens']} tokens of Tiny Shakespeare val · {meta['cpu']} · "
        f"{meta['threads']} threads · {meta['date']}",
        fontsize=8,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
