"""The ONNX runtime (edgeformer.runtime) against the PyTorch models, and its edges."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import threading

import pytest

from edgeformer.runtime import GenerationOptions, Generator, PackageError, Translator
from edgeformer.runtime.text import TextStream

ort = pytest.importorskip("onnxruntime")


@pytest.fixture(scope="session")
def translator(ed_package):
    return Translator(ed_package, threads=1)


@pytest.fixture(scope="session")
def generator(lm_package):
    return Generator(lm_package, threads=1)


def _load(checkpoint):
    from edgeformer.models.checkpoint import load_checkpoint

    return load_checkpoint(checkpoint)[0]


SOURCES = [[5, 6, 7, 8, 9, 2], [10, 11, 2], [12, 13, 14, 15, 16, 17, 18, 19, 2]]
PROMPTS = [[5, 6, 7], [8], [9, 10, 11, 12, 13, 14]]
OPTIONS = {
    "greedy": dict(max_new_tokens=12),
    "beam": dict(max_new_tokens=12, num_beams=3),
    "beam-nbest-lp": dict(max_new_tokens=10, num_beams=4, num_hypotheses=3, length_penalty=0.6),
    "beam-no-early-stop": dict(max_new_tokens=8, num_beams=2, early_stopping=False),
    "penalties": dict(max_new_tokens=12, repetition_penalty=1.5, min_new_tokens=4),
    "sampling": dict(max_new_tokens=12, sampling=True, seed=3, top_k=20, top_p=0.9),
}


@pytest.mark.parametrize("name", list(OPTIONS))
def test_translate_ids_equal_pytorch(name, translator, ed_checkpoint):
    from edgeformer.models import translate_ids

    opts = GenerationOptions(**OPTIONS[name])
    expected = translate_ids(_load(ed_checkpoint), SOURCES, opts)
    assert translator.translate_ids(SOURCES, opts) == expected


@pytest.mark.parametrize("name", list(OPTIONS))
def test_generate_ids_equal_pytorch(name, generator, lm_checkpoint):
    from edgeformer.models import complete_ids

    opts = GenerationOptions(**OPTIONS[name])
    expected = complete_ids(_load(lm_checkpoint), PROMPTS, opts)
    assert generator.generate_ids(PROMPTS, opts) == expected


def test_score_ids_equal_pytorch_teacher_forcing(generator, lm_checkpoint):
    import torch

    model = _load(lm_checkpoint)
    seqs = [[5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15, 16]]
    got = generator.score_ids(seqs)
    for seq, logp in zip(seqs, got):
        with torch.no_grad():
            logits, _ = model(torch.tensor([seq[:-1]]))
        ref = torch.log_softmax(logits[0].double(), -1)[torch.arange(len(seq) - 1), seq[1:]]
        assert logp.shape == (len(seq) - 1,)
        assert abs(logp - ref.numpy()).max() < 1e-4
    with pytest.raises(ValueError, match="2 .. max_len"):
        generator.score_ids([[5]])


def test_translator_score_batch_equals_pytorch(translator, ed_checkpoint):
    """Teacher-forced log p of every target token and the EOS after it, as PyTorch computes."""
    import torch

    from edgeformer.models.generation import pad_batch

    model, m = _load(ed_checkpoint), translator.model
    sources, targets = ["two dogs play .", "a man"], ["zwei hunde spielen .", "ein mann fährt rad"]
    results = translator.score_batch(sources, targets)
    for src, tgt, r in zip(sources, targets, results):
        s, t = m.encode(src) + [m.eos_id], m.encode(tgt)
        src_ids, src_mask = pad_batch([s], m.pad_id)
        with torch.no_grad():
            logits = model(src_ids, torch.tensor([[m.bos_id] + t]), src_mask)
        ref = torch.log_softmax(logits[0].double(), -1)[torch.arange(len(t) + 1), t + [m.eos_id]]
        assert r.token_ids == t + [m.eos_id] and len(r.tokens) == len(t) + 1
        assert max(abs(a - b) for a, b in zip(r.log_probs, ref.tolist())) < 1e-4
        assert r.total == pytest.approx(sum(r.log_probs)) and r.normalized < 0
    with pytest.raises(ValueError, match="list of strings"):
        translator.score_batch("two dogs", "zwei hunde")
    with pytest.raises(ValueError, match="2 sources but 1 targets"):
        translator.score_batch(sources, targets[:1])


def test_generator_score_batch_and_cli(generator, lm_checkpoint, lm_package, capsys, monkeypatch):
    import io
    import math

    from edgeformer.cli import main

    texts = ["two dogs play in the snow .", "a man"]
    results = generator.score_batch(texts)
    for text, r in zip(texts, results):
        ids = generator.model.encode(text)
        (ref,) = generator.score_ids([ids])
        assert r.token_ids == ids[1:] and r.log_probs == ref.tolist()
        assert r.perplexity == pytest.approx(math.exp(-r.total / len(r.log_probs)))
    with pytest.raises(ValueError, match="text 0 has 1 tokens"):
        generator.score_batch(["a"])
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(texts) + "\n"))
    assert main(["score", str(lm_package)]) == 0
    out = capsys.readouterr()
    rows = [line.split("\t") for line in out.out.splitlines()]
    assert [float(r[1]) for r in rows] == [pytest.approx(r.total, abs=1e-4) for r in results]
    assert "perplexity" in out.err


def test_cli_cut_generation_note_is_one_plain_line(lm_package, capsys):
    import warnings

    from edgeformer.cli import main

    saved = warnings.showwarning
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert main(["generate", str(lm_package), "two", "--max-new-tokens", "500"]) == 0
    assert warnings.showwarning is saved  # restored when main returns
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if "cut to" in line]
    assert len(notes) == 1 and notes[0].startswith("edgeformer generate: note: max_new_tokens")
    assert "UserWarning" not in err and ".py:" not in err


def test_cli_info(ed_package, lm_package, capsys, tmp_path):
    from edgeformer.cli import main

    assert main(["info", str(ed_package)]) == 0
    out = capsys.readouterr().out
    for text in ("encoder-decoder", "checksums verified", "int4", "MB", "encoder: in input_ids"):
        assert text in out, text
    assert "defaults: sampling False, num_beams 1" in out  # generation_config.json
    assert main(["info", str(lm_package)]) == 0
    out = capsys.readouterr().out
    assert "decoder-only" in out and "genai_config.json" in out
    assert main(["info", str(tmp_path)]) == 2
    assert "config.json" in capsys.readouterr().err


def test_cli_texts_after_options(ed_package, capsys):
    from edgeformer.cli import main

    assert main(["translate", str(ed_package), "--max-new-tokens", "4", "two dogs ."]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
    assert main(["translate", str(ed_package), "--beam", "0", "two dogs ."]) == 2
    assert "num_beams" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["translate", str(ed_package), "x", "--no-such-flag"])


def test_cli_score_translation(translator, ed_package, capsys):
    from edgeformer.cli import main

    assert main(["score", str(ed_package), "two dogs .\tzwei hunde ."]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    (r,) = translator.score_batch(["two dogs ."], ["zwei hunde ."])
    assert float(line.split("\t")[1]) == pytest.approx(r.total, abs=1e-4)
    assert main(["score", str(ed_package), "no tab here"]) == 2
    assert "line 1: expected 'source<TAB>target'" in capsys.readouterr().err


@pytest.fixture(scope="session")
def trained_ed(tokenizer_json, tmp_path_factory):
    """A tiny encoder-decoder trained (~300 steps) to copy the conftest sentences."""
    from conftest import SENTENCES, export, torch_module

    torch = torch_module()
    from tokenizers import Tokenizer

    from edgeformer.models import ModelConfig, build_model
    from edgeformer.models.checkpoint import save_checkpoint
    from edgeformer.models.generation import pad_batch

    tok = Tokenizer.from_file(str(tokenizer_json))
    torch.manual_seed(0)
    cfg = ModelConfig(
        vocab_size=tok.get_vocab_size(), d_model=64, n_heads=4, n_encoder_layers=2,
        n_decoder_layers=2, d_ff=128, dropout=0.0, max_len=64,
    )  # fmt: skip
    model = build_model(cfg)
    seqs = [tok.encode(s).ids for s in SENTENCES]
    src, src_mask = pad_batch([s + [cfg.eos_id] for s in seqs], cfg.pad_id)
    tgt, _ = pad_batch([[cfg.bos_id] + s + [cfg.eos_id] for s in seqs], cfg.pad_id)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is faster, above all on a busy machine
    for _ in range(300):
        logits = model(src, tgt[:, :-1], src_mask)
        loss = torch.nn.functional.cross_entropy(
            logits.transpose(1, 2), tgt[:, 1:], ignore_index=cfg.pad_id
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.set_num_threads(threads)
    ckpt = save_checkpoint(tmp_path_factory.mktemp("trained") / "ed", model.eval(), tokenizer_json)
    return ckpt, export(ckpt, tmp_path_factory, "trained"), SENTENCES


def test_trained_model_equals_pytorch_and_copies(trained_ed):
    from edgeformer.models import translate_ids

    ckpt, package, sentences = trained_ed
    t, model = Translator(package, threads=1), _load(ckpt)
    sources = [t.model.encode(s) + [t.model.eos_id] for s in sentences]
    for opts in (GenerationOptions(max_new_tokens=30), GenerationOptions(30, num_beams=4)):
        assert t.translate_ids(sources, opts) == translate_ids(model, sources, opts)
    # the model really learned the task (outputs are not degenerate) ...
    copied = t.translate_batch(sentences, max_new_tokens=30)
    assert sum(a == b for a, b in zip(copied, sentences)) >= len(sentences) - 1, copied
    # ... and beam search n-best comes out best first
    nbest = t.translate_batch_nbest(sentences[:2], num_beams=4, num_hypotheses=3)
    for hyps in nbest:
        scores = [s for _, s in hyps]
        assert len(hyps) == 3 and scores == sorted(scores, reverse=True)
    assert [h[0][0] for h in nbest] == t.translate_batch(sentences[:2], num_beams=4)


def _in_threads(work, n: int) -> None:
    """work(0) .. work(n - 1), each on its own thread, all at once; returns when all are done."""
    threads = [threading.Thread(target=work, args=(k,)) for k in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()


def test_one_translator_many_threads(translator):
    texts = ["a man rides a bike .", "two dogs play in the snow .", "zwei hunde .", "a"]
    jobs = [(texts[i % 4 :] + texts[: i % 4], i % 3 + 1) for i in range(16)]
    expected = [translator.translate_batch(x, num_beams=b, max_new_tokens=10) for x, b in jobs]
    got: dict[int, list[str]] = {}

    def work(k: int) -> None:
        for i in range(k, len(jobs), 8):
            x, b = jobs[i]
            got[i] = translator.translate_batch(x, num_beams=b, max_new_tokens=10)

    _in_threads(work, 8)
    assert [got[i] for i in range(len(jobs))] == expected


def test_empty_and_too_long_inputs(translator, generator):
    assert translator.translate("") == ""
    assert translator.translate_batch(["", "two dogs ."])[0] == ""
    long = "two dogs play in the snow . " * 20  # > max_len 64 tokens
    with pytest.raises(ValueError, match="max_len 64"):
        translator.translate(long)
    # truncate: the source's first max_len - 1 ids and EOS, translated as those ids are
    m = translator.model
    whole = m.encode_source(long)
    cut = translator.source_ids(long, truncate=True)
    assert cut == whole[: translator.max_len - 1] + [m.eos_id] and len(whole) >= translator.max_len
    opts = GenerationOptions(max_new_tokens=4)
    want = m.decode(translator.translate_ids([cut], opts)[0])
    assert translator.translate(long, truncate=True, max_new_tokens=4) == want
    with pytest.raises(ValueError, match="max_len 64"):
        generator.generate(long)
    # a prompt keeps its end: generated as the cut ids are
    kept = generator.prompt_ids(long, truncate=True)
    full = generator.model.encode_prompt(long)
    assert len(kept) < len(full) and kept == full[len(full) - len(kept) :]
    got = generator.generate_results([long], truncate=True, max_new_tokens=4)[0]
    assert got.hypotheses[0].ids == generator.generate_ids([kept], opts)[0]
    # generation stops at the context limit instead of failing
    assert len(generator.generate_ids([[5] * 60], GenerationOptions(50, ignore_eos=True))[0]) == 5


@pytest.mark.parametrize(
    "bad",
    [
        dict(top_p=0.0),
        dict(top_p=1.5),
        dict(temperature=0.0),
        dict(num_beams=0),
        dict(max_new_tokens=0),
        dict(top_k=-1),
        dict(num_beams=2, num_hypotheses=3),
        dict(sampling=True, num_beams=2),
        dict(repetition_penalty=0.0),
        dict(min_new_tokens=10, max_new_tokens=5),
        dict(beam_size=4),  # unknown option
    ],
)
def test_invalid_options(bad, translator, generator):
    with pytest.raises(ValueError):
        translator.translate("two dogs .", **bad)
    with pytest.raises(ValueError):
        generator.generate("two dogs", **bad)


def test_package_errors(ed_package, lm_package, tmp_path):
    with pytest.raises(PackageError, match="not found"):
        Translator(tmp_path / "nothing")
    with pytest.raises(PackageError, match="decoder-only.*Generator"):
        Translator(lm_package)
    with pytest.raises(PackageError, match="encoder-decoder.*Translator"):
        Generator(ed_package)
    with pytest.raises(PackageError, match="no variant 'int3'"):
        Translator(ed_package, variant="int3")
    broken = tmp_path / "broken"
    shutil.copytree(ed_package, broken)
    (broken / "decoder.onnx").write_bytes(b"junk")
    with pytest.raises(PackageError, match="checksum mismatch for decoder.onnx"):
        Translator(broken)
    (broken / "decoder.onnx").unlink()
    with pytest.raises(PackageError, match="missing decoder.onnx"):
        Translator(broken)
    assert issubclass(PackageError, ValueError)


def test_providers(ed_package):
    t = Translator(ed_package, provider="cpu", threads=1, spinning=False)
    want = Translator(ed_package).translate("two dogs .", max_new_tokens=3)
    assert t.provider == "cpu" and t.translate("two dogs .", max_new_tokens=3) == want
    with pytest.raises(ValueError, match="provider"):
        Translator(ed_package, provider="tpu")


def test_spinning_decoder_only_unless_asked(ed_package):
    """The decoder's pool spins (called step after step); the encoder's, called once, does
    not, so that it never competes with the decoder; spinning=True/False sets both."""
    from edgeformer.runtime.session import session_options

    key = "session.intra_op.allow_spinning"
    assert session_options(2, None).get_session_config_entry(key) == "0"
    assert session_options(2, True).get_session_config_entry(key) == "1"
    for spinning, want in ((None, {"encoder": "0", "decoder": "1"}), (False, "0"), (True, "1")):
        t = Translator(ed_package, threads=1, spinning=spinning)
        got = {
            g: graph.session.get_session_options().get_session_config_entry(key)
            for g, graph in t.model.graphs.items()
        }
        assert got == (want if isinstance(want, dict) else {g: want for g in got}), spinning


def test_cuda_is_a_clear_error_not_a_fallback(ed_package, lm_package):
    """GQA has no fp32 CUDA kernel: asking for CUDA says so instead of running on the CPU."""
    for cls, pkg in ((Translator, ed_package), (Generator, lm_package)):
        with pytest.raises(ValueError, match="cuda.*CPU provider only"):
            cls(pkg, provider="cuda")
        assert cls(pkg, provider="auto").provider == "cpu"


def test_sampling_is_reproducible(generator, translator):
    kw = dict(sampling=True, temperature=1.5, top_p=0.95, max_new_tokens=20)
    runs = [generator.generate_batch(["two dogs", "a man"], seed=7, **kw) for _ in range(2)]
    assert runs[0] == runs[1]
    assert translator.translate("a man .", seed=1, **kw) == translator.translate(
        "a man .", seed=1, **kw
    )
    others = {generator.generate("two dogs", seed=s, **kw) for s in range(5)}
    assert len(others) > 1  # the seed matters


@pytest.mark.parametrize("kw", [dict(), dict(sampling=True, seed=3), dict(num_beams=2)])
def test_stream_concatenates_to_generate(generator, kw):
    for prompt in ("two dogs", "", "zwei"):
        pieces = list(generator.stream(prompt, max_new_tokens=25, **kw))
        assert "".join(pieces) == generator.generate(prompt, max_new_tokens=25, **kw)
        assert all(pieces)


def test_text_stream_holds_back_split_characters():
    """A byte-level tokenizer with no merges: every multi-byte character is split over tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(sorted(alphabet))}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    text = "grüße, wörld € 😀 ok"
    ids = tok.encode(text).ids
    assert len(ids) == len(text.encode())  # one token per byte
    s = TextStream(tok)
    pieces = [s.push(i) for i in ids] + [s.flush()]
    assert "".join(pieces) == text and not any("\ufffd" in p for p in pieces)
    cut = TextStream(tok, ids[:4])  # a context ("grü": 4 bytes) already shown, then the rest
    assert "".join([cut.push(i) for i in ids[4:]] + [cut.flush()]) == text[3:]
    half = TextStream(tok)  # ends inside "€": flush gives what decode shows
    assert "".join([half.push(i) for i in ids[:15]] + [half.flush()]) == tok.decode(ids[:15])


def test_no_torch_in_the_runtime(ed_package, lm_package):
    code = textwrap.dedent(f"""
        import sys
        from edgeformer.runtime import Translator, Generator
        from edgeformer.cli import main
        t = Translator({str(ed_package)!r})
        print(t.translate("two dogs .", max_new_tokens=5), t.translate("a", num_beams=2))
        g = Generator({str(lm_package)!r})
        print("".join(g.stream("two", max_new_tokens=5)), g.generate("a", sampling=True))
        main(["translate", {str(ed_package)!r}, "two dogs .", "--max-new-tokens", "3"])
        assert "torch" not in sys.modules, sorted(m for m in sys.modules if "torch" in m)
        print("NO_TORCH")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "NO_TORCH" in out.stdout, out.stderr


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def test_one_row_requests_reuse_decoders_across_threads(translator, generator):
    """Batch-1 requests take a decoder given back by an earlier one (steppers.take_decoder):
    sources of every length, beams between them, streams left half-read, and eight threads
    at once give what each request gives on its own."""
    texts = ["a man rides a bike .", "zwei hunde .", "a", "two dogs play in the snow ." * 3]
    prompts = ["a man", "x", "two dogs play"]
    jobs = [(texts[i % 4], i % 2 + 1) for i in range(24)]
    gen = dict(max_new_tokens=8)
    expected = [translator.translate(x, num_beams=b, max_new_tokens=10) for x, b in jobs]
    expected_lm = [generator.generate(p, **gen) for p in prompts]
    translator.translate(texts[0], max_new_tokens=10)
    assert translator.model.graphs["decoder"].idle  # given back after a greedy request
    got: dict[int, str] = {}
    got_lm: dict[int, str] = {}

    def work(k: int) -> None:
        for i in range(k, len(jobs), 8):
            x, b = jobs[i]
            next(iter(translator.stream(x, max_new_tokens=10)), None)  # never given back
            got[i] = translator.translate(x, num_beams=b, max_new_tokens=10)
            got_lm[i] = generator.generate(prompts[i % 3], **gen)

    _in_threads(work, 8)
    assert [got[i] for i in range(len(jobs))] == expected
    assert [got_lm[i] for i in range(len(jobs))] == [expected_lm[i % 3] for i in range(len(jobs))]


def test_one_row_caches_are_sized_to_the_request_not_the_context(tmp_path_factory,
                                                                tokenizer_json):  # fmt: skip
    """A model of 4,096 positions: a short request's one-row decoder holds 256 positions (the
    power of two >= MIN_REUSED_CAPACITY), a longer one takes a larger decoder, and the next
    short one reuses the smallest that fits; outputs equal PyTorch's throughout."""
    from conftest import _checkpoint, export

    from edgeformer.models import complete_ids
    from edgeformer.runtime.steppers import MIN_REUSED_CAPACITY, reused_capacity

    assert reused_capacity(1, 4096) == MIN_REUSED_CAPACITY == 256
    assert [reused_capacity(n, 4096) for n in (256, 257, 3000, 5000)] == [256, 512, 4096, 4096]
    assert reused_capacity(10, 64) == 64
    ckpt = _checkpoint(tmp_path_factory, tokenizer_json, family="decoder-only",
                       n_decoder_layers=1, positional="rotary", max_len=4096)  # fmt: skip
    generator = Generator(export(ckpt, tmp_path_factory, "long-context"), threads=1)
    idle = generator.model.graphs["decoder"].idle
    model = _load(ckpt)

    def run(prompt: list[int], n: int) -> None:
        opts = GenerationOptions(max_new_tokens=n)
        assert generator.generate_ids([prompt], opts) == complete_ids(model, [prompt], opts)

    run([5, 6, 7], 8)
    assert [d.shape[1] for d in idle] == [256]
    run([8, 9], 300)
    assert sorted(d.shape[1] for d in idle) == [256, 512]
    run([10], 5)
    assert sorted(d.shape[1] for d in idle) == [256, 512]


def test_small_encoder_runs_one_row_on_one_thread(ed_package):
    """A small model's one-row requests run the encoder on a one-thread session (the latency
    setting), batches on the Translator's threads; translations are the same either way. The
    caller's own SessionOptions or threads=1 get no second session."""
    import numpy as np

    t = Translator(ed_package, threads=2)
    enc = t.model.graphs["encoder"]
    assert enc.one_row is not None
    one_row, runs = enc.one_row, []

    class Spy:
        def run(self, names, feed):
            runs.append(len(feed["input_ids"]))
            return one_row.run(names, feed)

    enc.one_row = Spy()  # type: ignore[assignment]
    texts = ["a man rides a bike .", "zwei hunde .", "two dogs play in the snow ." * 3]
    alone = [t.translate(x, max_new_tokens=10) for x in texts]
    batched = t.translate_batch(texts, max_new_tokens=10)
    assert runs == [1, 1, 1] and alone == batched  # the batch ran on the session's threads
    enc.one_row = None
    assert [t.translate(x, max_new_tokens=10) for x in texts] == alone
    feed = {"input_ids": np.array([[5, 6, 7, 2]]), "attention_mask": np.ones((1, 4), np.int64)}
    for a, b in zip(one_row.run(None, feed), enc.session.run(None, feed)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    assert Translator(ed_package, threads=1).model.graphs["encoder"].one_row is None
    own = Translator(ed_package, session_options=ort.SessionOptions())
    assert own.model.graphs["encoder"].one_row is None


def test_memory_is_stable_over_many_generations(generator, translator):
    opts = GenerationOptions(max_new_tokens=4, ignore_eos=True)
    beam = GenerationOptions(max_new_tokens=4, num_beams=2)
    for _ in range(100):  # warm-up: arenas and caches reach their size
        generator.generate_ids([[5, 6, 7]], opts)
        translator.translate_ids([[5, 6, 2], [7, 2]], beam)
    before = _rss_mb()
    for i in range(1000):
        generator.generate_ids([[5, 6, 7][: 1 + i % 3]], opts)
        if i % 4 == 0:
            translator.translate_ids([[5, 6, 2], [7, 2]], beam)
    growth = _rss_mb() - before
    print(f"RSS growth over 1000 LM + 250 ED beam generations: {growth:.1f} MB")
    assert growth < 20, f"RSS grew by {growth:.1f} MB"


def test_cli_translate_and_generate(ed_package, lm_package, capsys, monkeypatch):
    import io

    from edgeformer.cli import main

    t = Translator(ed_package)
    texts = ["two dogs .", "a man rides a bike ."]
    assert main(["translate", str(ed_package), *texts, "--max-new-tokens", "8"]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines() == t.translate_batch(texts, max_new_tokens=8)
    assert out.err == ""  # quiet by default
    assert main(["--log-level", "info", "translate", str(ed_package), *texts]) == 0
    err = capsys.readouterr().err
    assert "edgeformer translate: fp32 on cpu" in err and "sentences/s" in err
    monkeypatch.setattr(sys, "stdin", io.StringIO("two dogs .\n\na man rides a bike .\n"))
    assert main(["translate", str(ed_package), "--max-new-tokens", "8", "--beam", "2"]) == 0
    lines = capsys.readouterr().out.split("\n")[:-1]
    assert lines == t.translate_batch([texts[0], "", texts[1]], max_new_tokens=8, num_beams=2)
    assert main(["translate", str(ed_package), "x", "--n-best", "2", "--max-new-tokens", "4"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    g = Generator(lm_package)
    args = ["--sample", "--seed", "1", "--top-k", "5", "--max-new-tokens", "10"]
    assert main(["generate", str(lm_package), "two dogs", *args]) == 0
    expected = g.generate("two dogs", sampling=True, seed=1, top_k=5, max_new_tokens=10)
    assert capsys.readouterr().out == "two dogs" + expected + "\n"
    assert main(["translate", str(ed_package), "x", "--top-p", "2"]) == 2
    assert "top_p" in capsys.readouterr().err
    assert main(["generate", str(ed_package), "x"]) == 2
    assert "Translator" in capsys.readouterr().err


def test_package_config_is_read_not_guessed(ed_package, tmp_path):
    """A package whose graphs do not match the contract is refused with a clear error."""
    from edgeformer.core.files import sha256

    pkg = tmp_path / "swapped"
    shutil.copytree(ed_package, pkg)
    config = json.loads((pkg / "config.json").read_text())
    files = config["variants"]["fp32"]["files"]
    files["decoder"], files["encoder"] = files["encoder"], files["decoder"]
    config["files"] = {f: sha256(pkg / f) for f in config["files"]}
    (pkg / "config.json").write_text(json.dumps(config))
    with pytest.raises(PackageError, match="contract"):
        Translator(pkg)
