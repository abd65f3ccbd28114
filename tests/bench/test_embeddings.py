"""benchmarks/embeddings.py's bookkeeping (`edgeformer bench --embeddings`): which of our stacks
each peer is compared with, the table, and names it does not know. The run itself is the
committed benchmarks/results/embeddings.{md,json} (minutes: real exports and four engines)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeformer.benchmarks import embeddings


def row(per_s: float) -> dict:
    return {"ms_per_query": 1e3 / per_s, "query_per_s": per_s, "b32_per_s": 10 * per_s,
            "passages_per_s": per_s / 2, "loaded_rss_mb": 100.0, "peak_rss_mb": 120.0,
            "size_mb": 90.0, "min_cosine_vs_st": 0.99999}  # fmt: skip


def test_ratios_compare_the_same_precision():
    """fp32 peers (sentence-transformers is fp32) meet our fp32, int8 peers our faster int8
    variant; a failed stack is reported in the table, not compared."""
    stacks = {
        "edgeformer-fp32": row(100), "edgeformer-int8": row(150),
        "edgeformer-int8-dynamic": row(300), "st-torch": row(50), "optimum-int8": row(200),
        "ct2-fp32": {"error": "RuntimeError: no"},
    }  # fmt: skip
    found = {r["peer"]: r for r in embeddings.ratios(stacks)}
    assert set(found) == {"st-torch", "optimum-int8"}
    assert found["st-torch"]["query_per_s"] == pytest.approx(2.0)
    assert found["st-torch"]["query_per_s_ours"] == "edgeformer-fp32"
    assert found["optimum-int8"]["b32_per_s"] == pytest.approx(1.5)
    assert found["optimum-int8"]["b32_per_s_ours"] == "edgeformer-int8-dynamic"
    shape = {"description": "d", "pooling": "mean", "max_len": 256, "stacks": stacks,
             "ratios": list(found.values())}  # fmt: skip
    text = embeddings.table({"shapes": {"minilm-l6": shape}})
    assert "| ct2-fp32 | failed: RuntimeError: no" in text
    assert "| optimum-int8 | 1.50 (int8-dynamic) | 1.50 (int8-dynamic) |" in text


def test_unknown_names(tmp_path: Path):
    settings = embeddings.EmbedSettings(("minilm-l12",), ("st-torch", "ct2-int4"), 2, 1, 1,
                                        tmp_path, "x", tmp_path)  # fmt: skip
    with pytest.raises(ValueError, match=r"\['minilm-l12', 'ct2-int4'\]: shapes minilm-l6, bge"):
        embeddings.run_embeddings(settings)
    assert not (tmp_path / "x.json").exists()
