"""Our server beside llama.cpp's on the same model (benchmarks/serve_peers.py): a short run on
the quick lm shape, skipped without llama.cpp's environment holding its server's packages."""

from __future__ import annotations

import importlib.util
import json

import pytest

from edgeformer.benchmarks import llama_env, serve_peers

HAVE_HF = all(importlib.util.find_spec(m) for m in ("transformers", "torch"))


def test_prompts_are_vocabulary_words_of_different_lengths():
    vocab = ["<unk>", "<s>", "</s>", *(f"t{i}" for i in range(3, 100))]
    texts = serve_peers.prompts(vocab, n=3, length=8)
    assert [len(t.split()) for t in texts] == [8, 6, 4]
    assert all(w in vocab[3:] for t in texts for w in t.split())


@pytest.mark.skipif(not HAVE_HF, reason="needs transformers and torch (the bench extra)")
def test_both_servers_answer_the_same_requests(tmp_path):
    python = llama_env.resolve()
    problem = serve_peers.server_problem(python)
    if problem:
        pytest.skip(problem)
    out = tmp_path / "serve.json"
    argv = ["--quick", "--work", str(tmp_path / "work"), "--clients", "1,2", "--requests", "3",
            "--max-tokens", "4", "--rounds", "1", "--turns", "0", "--threads", "1",
            "--out", str(out)]  # fmt: skip
    assert serve_peers.main(argv) == 0
    result = json.loads(out.read_text())
    for rows in (result["rows"], result["against"]["llama.cpp"]["rows"]):
        assert [r["clients"] for r in rows] == [1, 2]
        # every request made its 4 tokens (llama.cpp's counted by its streamed chunks)
        assert all(r["requests"] == 3 and r["tokens_per_s"] > 0 for r in rows)
