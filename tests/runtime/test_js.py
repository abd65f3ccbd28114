"""The JavaScript runtime (runtime/js, docs/ship-node.md) decodes packages as the Python one does.

Both families, every variant, on onnxruntime-node (cache in place and re-fed) and onnxruntime-web's
wasm backend running in Node: the greedy ids of the JS runtime against edgeformer.runtime's, and
the log-probability of every chosen token. Skipped, with the reason, when `node` is not on PATH or
runtime/js/node_modules is missing and npm's cache cannot install it offline (`make js` installs
it; the test never goes to the network).
"""

from __future__ import annotations

import importlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse
import warnings
from pathlib import Path

import numpy as np
import pytest

from edgeformer.core.format import FORMAT_VERSION
from edgeformer.runtime import Generator, Translator

ROOT = Path(__file__).resolve().parents[2]
JS = ROOT / "runtime" / "js"
VARIANTS = ("fp32", "int8-dynamic", "int8", "int4")
MAX_NEW = 24
SOURCES = [[73, 78, 114, 143, 8, 24, 124, 143, 39, 2], [49, 131, 65, 43, 2], [15, 7, 2]]
PROMPTS = [[5, 9, 14, 3, 22, 8], [40, 41], [100, 7, 120, 33, 60, 61, 62, 63, 64]]
TEXTS = ["A man is riding a bike.", "Two dogs play in the snow.", ""]
# runs cases {package, backend, variant, cache, inputs, options} in one node process: every
# hypothesis (ids, score, log-probs) of decodeIds; call "run" / "stream" / "chat" / "prompt" take
# texts (or messages); a refused case gives {error, kind} (PackageError / RangeError)
DRIVER = """
const { loadPackage } = await import(process.argv[1]);
const out = [];
for (const c of JSON.parse(process.argv[2])) {
  let m = null;
  try {
    m = await loadPackage(c.package, { backend: c.backend, variant: c.variant, cache: c.cache,
                                       threads: c.threads ?? 1 });
    const o = { maxNewTokens: c.max_new_tokens, scores: true, ...(c.options ?? {}) };
    const call = c.call ?? "ids";
    if (call === "ids") {
      const r = await m.decodeIds(c.inputs, o);
      out.push({ ...c, ids: r.ids, log_probs: r.logProbs, ms_per_token: r.msPerToken,
                 hypotheses: r.hypotheses });
    } else if (call === "run") {
      out.push({ ...c, lines: await m.run(c.inputs, o) });
    } else if (call === "stream") {
      const pieces = [];
      for await (const piece of m.stream(c.inputs[0], o)) pieces.push(piece);
      out.push({ ...c, pieces });
    } else if (call === "prompt") {
      out.push({ ...c, prompt: await m.chatPrompt(c.inputs) });
    } else if (call === "chat") {
      out.push({ ...c, text: await m.chat(c.inputs, o) });
    } else if (call === "sourceIds") {
      out.push({ ...c, ids: c.inputs.map((t) => m.sourceIds(t, c.options ?? {})),
                 languages: m.languages });
    }
  } catch (e) {
    out.push({ ...c, error: String(e.message ?? e), kind: e.name });
  }
  if (m) await m.release();
}
console.log(JSON.stringify(out));
"""


@pytest.fixture(scope="module")
def node() -> str:
    """The node executable, with runtime/js's dependencies installed (else the test skips)."""
    exe = shutil.which("node")
    # `make test` sets EDGEFORMER_REQUIRE_JS=1 after `make js`: CI fails rather than skips
    skip = pytest.fail if os.environ.get("EDGEFORMER_REQUIRE_JS") == "1" else pytest.skip
    if exe is None:
        skip("node is not on PATH: the JavaScript runtime (runtime/js) is not tested")
    modules = JS / "node_modules"
    needed = ("onnxruntime-node", "onnxruntime-web", "@huggingface/tokenizers")
    if not all((modules / name).is_dir() for name in needed):
        npm = shutil.which("npm")
        # the lock file's packages from npm's cache only: a test never goes to the network
        cmd = [npm or "npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--offline"]
        done = npm is not None and subprocess.run(cmd, cwd=JS, capture_output=True, timeout=120)
        if not done or done.returncode != 0:
            skip(
                "runtime/js/node_modules is missing and npm's cache cannot install it offline: "
                "run `make js` (it needs the npm registry once)"
            )
    return exe


def run_js(node: str, cases: list[dict], errors: bool = False, timeout: int = 300) -> list[dict]:
    """The driver's results, one per case (errors=False: a refused case fails the test)."""
    index = (JS / "index.mjs").as_uri()
    cmd = [node, "--input-type=module", "-e", DRIVER, index, json.dumps(cases)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout)
    if not errors:
        failed = [(c.get("options"), c["error"]) for c in out if "error" in c]
        assert not failed, failed
    return out


def cli(node: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    cmd = [node, str(JS / "cli.mjs"), *args]
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=120)


def python_greedy(package: Path, family: str, variant: str, inputs: list[list[int]]) -> list:
    """edgeformer.runtime's greedy (tokens, log-probs) per input, batched as the JS call is."""
    if family == "encoder-decoder":
        t = Translator(package, variant=variant, threads=1)
        opts = t.model.options(max_new_tokens=MAX_NEW, num_beams=1)
        found = t.translate_ids_nbest(inputs, opts)
    else:
        g = Generator(package, variant=variant, threads=1)
        opts = g.model.options(max_new_tokens=MAX_NEW, num_beams=1)
        found = g.generate_ids_nbest(inputs, opts)
    return [(h[0].tokens, h[0].log_probs) for h in found]


def test_js_greedy_matches_python(node, ed_package, lm_package, record_property):
    """Identical ids (and log-probs within 1e-5) on onnxruntime-node for every variant and on
    wasm for fp32. wasm's quantized variants are recorded, not asserted: its kernels are not
    native x86's. Native DynamicQuantizeMatMul (int8-dynamic) runs u8s8 kernels that lose
    accuracy on AVX2 without VNNI (measured: its logits 10x further from fp32's than wasm's), and
    MatMulNBits at accuracy_level 4 (int8, int4) quantizes activations to int8 natively; logits
    then differ by 0.01-1 between the backends, which flips near-tied argmaxes of a random model."""
    packages = {"encoder-decoder": (ed_package, SOURCES), "decoder-only": (lm_package, PROMPTS)}
    cases = []
    for family, (pkg, inputs) in packages.items():
        for variant in VARIANTS:
            runs = [("node", "inplace"), ("wasm", "refeed")]
            runs += [("node", "refeed")] if variant == "fp32" else []
            for backend, cache in runs:
                case = dict(package=str(pkg), family=family, inputs=inputs, max_new_tokens=MAX_NEW)
                cases.append({**case, "backend": backend, "variant": variant, "cache": cache})
    refs = {}
    for family, (pkg, inputs) in packages.items():
        for variant in VARIANTS:
            refs[family, variant] = python_greedy(pkg, family, variant, inputs)
    recorded = []
    for case in run_js(node, cases):
        want = refs[case["family"], case["variant"]]
        same = [w[0] == got for w, got in zip(want, case["ids"])]
        where = f"{case['family']} {case['variant']} on {case['backend']} ({case['cache']})"
        recorded.append(f"{where}: ids equal {same}, {case['ms_per_token']:.2f} ms/token")
        if case["backend"] == "wasm" and case["variant"] != "fp32":
            assert all(len(ids) <= MAX_NEW for ids in case["ids"]), where
            continue
        assert all(same), f"{where}: {case['ids']} != {[w[0] for w in want]}"
        for (_, lps), got in zip(want, case["log_probs"]):
            np.testing.assert_allclose(got, lps, atol=1e-5, err_msg=where)
    record_property("js_runs", recorded)
    print("\n".join(recorded))


def test_js_reads_format_4_packages(node, ed_package, tmp_path):
    """A format-4 encoder-decoder package (its step takes masks, not GQA's lengths) decodes on
    onnxruntime-node to the same ids as format 5's, in place and re-fed."""
    from test_run_configs import as_format_4

    old = as_format_4(ed_package, tmp_path / "v4")
    want = python_greedy(ed_package, "encoder-decoder", "fp32", SOURCES)
    case = dict(family="encoder-decoder", inputs=SOURCES, max_new_tokens=MAX_NEW)
    cases = [{**case, "package": str(old), "backend": "node", "variant": "fp32", "cache": cache}
             for cache in ("inplace", "refeed")]  # fmt: skip
    for got in run_js(node, cases):
        assert got["ids"] == [w[0] for w in want], got["cache"]


def test_web_variants_on_wasm_match_python(node, ed_checkpoint, lm_checkpoint, tmp_path):
    """int8-web / int4-web (MatMulNBits accuracy_level 0: fp32 compute) decode on wasm as the
    Python runtime decodes them on the CPU provider: the quantized variants whose golden run and
    measurements hold in a browser (int8 / int4 at accuracy_level 4 do not: see above)."""
    from edgeformer.export import export_package

    web = ("int8-web", "int4-web")
    ed = export_package(ed_checkpoint, tmp_path / "ed", variants=web, verbose=False)
    lm = export_package(lm_checkpoint, tmp_path / "lm", variants=web, verbose=False)
    packages = {"encoder-decoder": (ed, SOURCES), "decoder-only": (lm, PROMPTS)}
    cases = [
        dict(package=str(pkg), family=family, inputs=inputs, max_new_tokens=MAX_NEW,
             backend="wasm", variant=variant, cache="refeed")
        for family, (pkg, inputs) in packages.items()
        for variant in web
    ]  # fmt: skip
    for case in run_js(node, cases):
        pkg, inputs = packages[case["family"]]
        want = python_greedy(pkg, case["family"], case["variant"], inputs)
        where = f"{case['family']} {case['variant']} on wasm"
        assert case["ids"] == [w[0] for w in want], where
        for (_, lps), got in zip(want, case["log_probs"]):
            np.testing.assert_allclose(got, lps, atol=1e-4, err_msg=where)


def test_js_cli_texts_match_python(node, ed_package, lm_package):
    """The CLI on texts: the tokenizer library (@huggingface/tokenizers) encodes and decodes as
    the Python `tokenizers` does, so translations and continuations equal the Python runtime's."""
    python = {
        ed_package: Translator(ed_package, variant="fp32").translate_batch(TEXTS, max_new_tokens=8),
        lm_package: Generator(lm_package, variant="fp32").generate_batch(TEXTS, max_new_tokens=8),
    }
    for pkg, want in python.items():
        for backend in ("node", "wasm"):
            args = ["--backend", backend, "--variant", "fp32", "--max-new-tokens", "8"]
            run = cli(node, str(pkg), *args, *TEXTS)
            assert run.returncode == 0, run.stderr
            lines = [json.loads(line) for line in run.stdout.splitlines()]
            assert [line["input"] for line in lines] == TEXTS
            assert [line["text"] for line in lines] == want, (pkg.name, backend)


def test_js_cli_as_pythons_bundled_names_stdin_and_text_output(node):
    """The Node CLI takes a bundled package's name, reads stdin's lines when given no text,
    prints the plain translations with --format text (n-best: Python's index, score, text
    lines), and offers no option it then refuses."""
    texts = ["A man is riding a bike.", "Two dogs play in the snow."]
    want = Translator("m30k-en-de", threads=1).translate_batch(texts, max_new_tokens=16)
    run = cli(node, "m30k-en-de", "--format", "text", "--max-new-tokens", "16",
              stdin="\n".join(texts) + "\n")  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == want
    nbest = Translator("m30k-en-de", threads=1).translate_batch_nbest(
        texts, num_beams=4, num_hypotheses=2, max_new_tokens=16
    )  # fmt: skip
    run = cli(node, "m30k-en-de", "--format", "text", "--beam", "4", "--num-hypotheses", "2",
              "--n-best", "--max-new-tokens", "16", *texts)  # fmt: skip
    assert run.returncode == 0, run.stderr
    rows = [line.split("\t") for line in run.stdout.splitlines()]
    assert [(int(i), t) for i, _, t in rows] == [(i, t) for i, r in enumerate(nbest) for t, _ in r]
    run = cli(node, "m30k-en-de", "--format", "xml", "x")
    assert run.returncode == 2 and "--format xml: expected jsonl or text" in run.stderr
    helped = cli(node, "--help").stdout
    for refused in ("--sliding-window", "--return-alternatives", "--regex", "--json-schema"):
        assert refused not in helped
        value = ["x"] if refused in ("--regex", "--json-schema") else []
        run = cli(node, "m30k-en-de", refused, *value, "A man.")
        assert run.returncode == 2 and "not supported by the JavaScript runtime" in run.stderr


def test_js_refuses_what_it_cannot_run(node, lm_package, tmp_path):
    """An unknown format version asks for a re-export; the in-place cache on wasm (which
    onnxruntime-web 1.30 leaves at zeros without an error) is refused, not run."""
    pkg = tmp_path / "future"
    shutil.copytree(lm_package, pkg)
    config = json.loads((pkg / "config.json").read_text())
    config["format_version"] = 99
    (pkg / "config.json").write_text(json.dumps(config))
    run = cli(node, str(pkg), "--ids", "5,9")
    assert run.returncode == 2 and "re-export" in run.stderr, run.stderr
    run = cli(node, str(lm_package), "--backend", "wasm", "--cache", "inplace", "--ids", "5,9")
    assert run.returncode == 2 and "refeed" in run.stderr, run.stderr
    # structured output (llguidance: no wasm / JS build) is refused, not ignored
    run = cli(node, str(lm_package), "--ids", "5,9", "--regex", "a+")
    assert run.returncode == 2 and "regex (structured output) is not supported" in run.stderr


def chromium() -> str:
    found = [shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")]
    browser = next((b for b in found if b), None)
    if browser is None:
        pytest.skip(
            "no chromium on PATH: the browser page is not tested (apt-get install chromium)"
        )
    return browser


def open_page(root: Path, path: str, query: dict, profile: Path, flags: tuple[str, ...] = (),
              timeout: float = 240) -> dict:  # fmt: skip
    """Headless Chromium on a page served from `root`: the JSON the page POSTs to the `report`
    URL added to its query (the example page does once its work is done)."""
    import functools
    import http.server
    import queue
    import threading

    results: queue.Queue = queue.Queue()

    class Handler(http.server.SimpleHTTPRequestHandler):
        extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                          ".mjs": "text/javascript"}  # fmt: skip

        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            results.put(json.loads(body))
            self.send_response(204)
            self.end_headers()

    handler = functools.partial(Handler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    url = f"{base}/{path}?{urllib.parse.urlencode({**query, 'report': f'{base}/result'})}"
    args = ["--headless=new", "--no-sandbox", f"--user-data-dir={profile}", *flags, url]
    log = open(f"{profile}.log", "w")  # the browser's stderr (console with --enable-logging)
    browser = subprocess.Popen([chromium(), *args], stdout=subprocess.DEVNULL, stderr=log)
    try:
        return results.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError(f"the page reported nothing in {timeout} s") from None
    finally:
        browser.kill()
        browser.wait()
        log.close()
        server.shutdown()


def test_js_example_page_translates_in_a_browser(node, ed_package, tmp_path):
    """The example page (runtime/js/example/index.html, static HTML + the package) in headless
    Chromium: it loads index.mjs, onnxruntime-web and the package over HTTP (the weights
    fetched and passed as externalData) and translates with 4 beams as the Python runtime does.
    Skipped when no Chromium is installed (Debian: apt-get install chromium)."""
    chromium()
    root = tmp_path / "site"
    root.mkdir()
    (root / "js").symlink_to(JS)
    (root / "pkg").symlink_to(ed_package)
    query = {"package": "/pkg/", "text": "\n".join(TEXTS[:2]), "beams": 4, "max_new_tokens": 8,
             "auto": 1}  # fmt: skip
    result = open_page(root, "js/example/index.html", query, tmp_path / "p", ("--disable-gpu",))
    assert "error" not in result, result
    want = Translator(ed_package, variant="fp32").translate_batch(
        TEXTS[:2], max_new_tokens=8, num_beams=4
    )
    assert result["backend"] == "wasm"
    assert [line["text"] for line in result["lines"]] == want


def test_js_runs_the_converted_families(node, tmp_path_factory):
    """Packages of Hugging Face families whose graphs use what they add (Qwen3's q/k norm and
    own head_dim, Gemma 2's soft caps, sandwich norms and windows, Phi-3's LongRoPE and partial
    rotary): the JS runtime's greedy ids are the Python runtime's, on node and wasm; and a text
    prompt gets the special tokens its tokenizer adds (a Llama's <s>), as in Python."""
    from conftest import tiny_llama
    from test_chat import chat_tokenizer
    from test_hf_families import build_hf

    from edgeformer.export import export_package
    from edgeformer.models.hf import convert_hf

    cases, prompts = [], [list(range(5, 25)), list(range(40, 49))]
    for name in ("qwen3", "gemma2", "phi3"):
        root = tmp_path_factory.mktemp(name)
        build_hf(name, root / "hf")
        pkg = export_package(convert_hf(root / "hf", root / "ckpt"), root / "pkg", verbose=False)
        for backend in ("node", "wasm"):
            cases.append(dict(package=str(pkg), backend=backend, variant="fp32", cache="auto",
                              inputs=prompts, max_new_tokens=MAX_NEW))  # fmt: skip
    for case in run_js(node, cases):
        want = python_greedy(Path(case["package"]), "decoder-only", "fp32", prompts)
        assert case["ids"] == [tokens for tokens, _ in want], case["package"]
    root = tmp_path_factory.mktemp("llama-bos")
    tok = chat_tokenizer(root / "hf", None, bos_post_processor=True)
    tiny_llama(root / "hf", len(tok), bos=tok.bos_token_id, eos=tok.eos_token_id)
    pkg = export_package(convert_hf(root / "hf", root / "ckpt"), root / "pkg", verbose=False)
    run = cli(node, str(pkg), "--max-new-tokens", str(MAX_NEW), "hello there two")
    assert run.returncode == 0, run.stderr
    g = Generator(pkg, threads=1)
    prompt = g.prompt_ids("hello there two")
    assert prompt[0] == tok.bos_token_id
    opts = g.model.options(max_new_tokens=MAX_NEW)
    assert json.loads(run.stdout)["ids"] == g.generate_ids([prompt], opts)[0]


# ---------------------------------------------------------------- translators (issue 48)

TRANSLATOR_TEXTS = ["A man is riding a bike.", "Zwei Hunde spielen im Schnee.",
                    "A woman in a red dress is singing on a stage while people watch.",
                    "Two dogs."]  # fmt: skip
NLLB_PAIRS = [("eng_Latn", "deu_Latn"), ("deu_Latn", "fra_Latn"), ("fra_Latn", "eng_Latn")]


def translator_helpers():
    """tests/models/test_hf_translators.py (its family builders), imported from here."""
    models = str(Path(__file__).resolve().parents[1] / "models")
    if models not in sys.path:
        sys.path.insert(0, models)
    return importlib.import_module("test_hf_translators")


@pytest.fixture(scope="module")
def translators(tmp_path_factory) -> dict[str, tuple[Path, object]]:
    """{family: (fp32 package, its transformers tokenizer)}: an NLLB-shaped translator
    (M2M100ForConditionalGeneration + NllbTokenizer: a language token in the source frame, the
    target language forced after the decoder start </s>), BART (`<s> text </s>`, <s> forced
    first, </s> forced last, no repeated trigrams) and T5 (sources `text </s>`, decoding from
    padding) and M2M100 (its SentencePiece-only tokenizer converted: BPE over fairseq's ids),
    small random models built by tests/models/test_hf_translators.py's helpers and converted
    once for the module."""
    built = translator_helpers().built  # shared with tests/models' family tests (one export)
    out = {}
    for name in ("nllb", "bart", "t5", "m2m100"):
        _, _, tok, _, _, pkg = built(name, tmp_path_factory)
        out[name] = (pkg, tok)
    return out


def translator_cases(translators) -> list[dict]:
    """run() cases: every family greedy and beam-4 (NLLB in three language pairs, one source
    and one target language per text in a mixed batch), BART with a minimum length (its
    forced <s> counted as transformers counts it), on node and wasm."""
    langs = {"nllb": [*NLLB_PAIRS, (["eng_Latn", "deu_Latn", "fra_Latn", "eng_Latn"],
                                     ["deu_Latn", "fra_Latn", "deu_Latn", "eng_Latn"])],
             "bart": [(None, None)], "t5": [(None, None)],
             "m2m100": [("en", "de"), ("de", "fr")]}  # fmt: skip
    cases = []
    for name, (pkg, _) in translators.items():
        extra = [{"min_new_tokens": 9, "max_new_tokens": 10}] if name == "bart" else []
        for source, target in langs[name]:
            for options in [{"num_beams": 1}, {"num_beams": 4, "early_stopping": True}, *extra]:
                options = {"max_new_tokens": 12} | options
                if source is not None:
                    options |= {"source_lang": source, "target_lang": target}
                for backend in ("node", "wasm"):
                    cases.append(dict(package=str(pkg), name=name, backend=backend,
                                      variant="fp32", call="run", inputs=TRANSLATOR_TEXTS,
                                      options=options))  # fmt: skip
    return cases


def test_js_translators_match_python(node, translators):
    """NLLB-, BART- and T5-shaped packages: the JS runtime's ids (the forced target language or
    <s> first) and texts are the Python runtime's (itself equal to transformers' generate(),
    tests/test_hf_translators.py), greedy and beam-4, with source and target languages (one per
    text: a mixed batch), on onnxruntime-node and wasm."""
    refs: dict = {}
    for case in run_js(node, translator_cases(translators)):
        key = (case["name"], json.dumps(case["options"], sort_keys=True))
        if key not in refs:
            t = Translator(Path(case["package"]), variant="fp32", threads=1)
            refs[key] = t.translate_results(TRANSLATOR_TEXTS, **case["options"])
        want = refs[key]
        where = f"{case['name']} {case['options']} on {case['backend']}"
        assert [line["ids"] for line in case["lines"]] == [r.hypotheses[0].ids for r in want], where
        assert [line["text"] for line in case["lines"]] == [r.text for r in want], where
    assert refs[("bart", json.dumps({"max_new_tokens": 12, "num_beams": 1}, sort_keys=True))][0] \
        .hypotheses[0].ids[0] == 0  # fmt: skip


def test_js_source_ids_match_python_and_the_tokenizer(node, translators):
    """100 Multi30k sentences (and empty, spaced, non-ASCII and over-long ones) in every source
    language: the JS runtime's source ids (frame, language token, </s>; cut to max_len with
    truncate) are the Python runtime's and the transformers tokenizer's; model.languages lists
    the codes."""
    corpus = translator_helpers().corpus

    sentences = corpus(50) + ["", "  spaces  around ", "Ünïcödé — «quotes» 123",
                              " ".join(corpus(10))]  # fmt: skip
    cases, want = [], {}
    for name, (pkg, tok) in translators.items():
        t = Translator(pkg, threads=1)
        codes = {"nllb": ["eng_Latn", "deu_Latn", "fra_Latn"], "m2m100": ["en", "de", "fr"]}
        for lang in codes.get(name, [None]):
            if lang is not None:
                tok.src_lang = lang
            hf = [tok(x, truncation=True, max_length=64).input_ids if x.strip() else []
                  for x in sentences]  # fmt: skip
            py = [t.source_ids(x, truncate=True, source_lang=lang) for x in sentences]
            assert py == hf, (name, lang)
            want[name, lang] = (py, t.languages)
            options = {"truncate": True} | ({"sourceLang": lang} if lang else {})
            cases.append(dict(package=str(pkg), name=name, lang=lang, backend="node",
                              variant="fp32", call="sourceIds", inputs=sentences,
                              options=options))  # fmt: skip
    for case in run_js(node, cases):
        ids, languages = want[case["name"], case["lang"]]
        assert case["ids"] == ids, (case["name"], case["lang"])
        assert case["languages"] == languages
    assert want["nllb", "deu_Latn"][1] == ["eng_Latn", "deu_Latn", "fra_Latn"]


# requests a translator refuses: (family, texts, options); the JS runtime's message is Python's
LANGUAGE_ERRORS = [
    ("nllb", ["Hello"], {"target_lang": "deu_latn"}),
    ("nllb", ["Hello", "x"], {"source_lang": ["eng_Latn", "fra_Ltn"], "target_lang": "deu_Latn"}),
    ("nllb", ["Hello"], {}),
    ("nllb", ["Hello"], {"target_lang": "zzz"}),
    ("nllb", ["Hello"], {"target_lang": "Latn"}),
    ("nllb", ["Hello"], {"target_lang": "deu_Latn_" * 30}),
    ("nllb", ["Hello"], {"target_lang": 5}),
    ("nllb", TRANSLATOR_TEXTS, {"target_lang": ["deu_Latn", "fra_Latn"]}),
    ("bart", ["Hello"], {"source_lang": "eng_Latn"}),
    ("t5", ["Hello"], {"target_lang": "de"}),
]  # fmt: skip


def test_js_language_errors_are_pythons(node, translators):
    """An unknown code (close matches from difflib's rule, ported), a missing target language,
    a list of the wrong length, a language for a one-pair model: the same one-line message from
    both runtimes; the CLI's --source-lang / --target-lang translate as Python's and refuse an
    unknown code with exit status 2."""
    cases = []
    for name, texts, options in LANGUAGE_ERRORS:
        pkg = translators[name][0]
        with pytest.raises(ValueError) as caught:
            Translator(pkg, threads=1).translate_batch(texts, max_new_tokens=4, **options)
        cases.append(dict(package=str(pkg), backend="node", variant="fp32", call="run",
                          inputs=texts, max_new_tokens=4, options=options,
                          want=str(caught.value)))  # fmt: skip
    for case in run_js(node, cases, errors=True):
        assert case.get("kind") == "RangeError", case
        assert case["error"] == case["want"], case["options"]
    pkg = translators["nllb"][0]
    want = Translator(pkg, threads=1).translate_batch(
        TRANSLATOR_TEXTS[:2], source_lang="deu_Latn", target_lang="fra_Latn", max_new_tokens=6
    )  # fmt: skip
    run = cli(node, str(pkg), "--source-lang", "deu_Latn", "--target-lang", "fra_Latn",
              "--max-new-tokens", "6", *TRANSLATOR_TEXTS[:2])  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert [json.loads(line)["text"] for line in run.stdout.splitlines()] == want
    run = cli(node, str(pkg), "--target-lang", "xx_Yyyy", "Hello")
    assert run.returncode == 2 and "not one of this model's 3 language codes" in run.stderr


def node_map(node: str, module: str, expression: str, data: object) -> object:
    """`expression` (of `m`, the runtime/js module `module`, and `data`) evaluated by node on
    JSON `data`, its JSON result parsed: a port checked against Python on many inputs."""
    script = (
        "const m = await import(process.argv[1]);"
        "const data = JSON.parse(process.argv[2]);"
        f"console.log(JSON.stringify({expression}));"
    )
    cmd = [node, "--input-type=module", "-e", script, (JS / module).as_uri(), json.dumps(data)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_js_close_matches_are_difflibs(node):
    """The JS port of difflib.get_close_matches (SequenceMatcher's ratio, autojunk past 200
    characters, ties broken as heapq.nlargest breaks them) picks what Python's picks."""
    import difflib
    import random

    rng = random.Random(0)
    alphabet = "abcdeLatn_ÄЖ"
    codes = ["".join(rng.choices(alphabet, k=rng.randint(2, 9))) for _ in range(300)]
    codes += ["eng_Latn", "deu_Latn", "fra_Latn", "en_XX", "de_DE", "zho_Hans", "zho_Hant"]
    words = [rng.choice(codes)[: rng.randint(1, 8)] + rng.choice(["", "x", "_Latn"])
             for _ in range(150)]  # fmt: skip
    words += ["deu_latn", "Latn", "", "a" * 250, "eng_Latn" * 40, "zho_Han"]
    expression = "data[0].map((w) => m.closeMatches(w, data[1], 5, 0.5))"
    for word, got in zip(words, node_map(node, "languages.mjs", expression, [words, codes])):
        assert got == difflib.get_close_matches(word, codes, n=5, cutoff=0.5), word


def test_js_close_codes_are_pythons(node):
    """runtime/js's closeCodes is core/languages.close_codes: the same language table, names,
    misspellings and fallbacks, on NLLB's, M2M100's and mBART's spellings."""
    from edgeformer.core.languages import close_codes

    styles = [
        ["deu_Latn", "eng_Latn", "fra_Latn", "arb_Arab", "zho_Hans", "zho_Hant", "ell_Grek"],
        ["de", "en", "fr", "ar", "zh", "el", "mn", "ga", "ast"],
        ["de_DE", "en_XX", "fr_XX", "ar_AR", "zh_CN"],
    ]
    words = [
        "deu_Latn",
        "german",
        "Germna",
        "Deutsch",
        "ger",
        "de",
        "zh-CN",
        "arabic",
        "greek",
        "Modern Greek",
        "fra_Ltn",
        "xx_Yyyy",
        "klingon",
        "",
        " French ",
        "Español",
        "ast",
    ]
    data = [[w, codes] for w in words for codes in styles]
    expression = "data.map(([w, codes]) => m.closeCodes(w, codes))"
    for (word, codes), got in zip(data, node_map(node, "languages.mjs", expression, data)):
        assert got == close_codes(word, codes), (word, codes)


def test_js_auto_picks_pythons_variant(node):
    """runtime/js's pickVariant is core/variants.pick_variant: the same quality bounds and the
    same speed ties (within SPEED_MARGIN of the fastest, the more exact variant runs), on random
    measurements where ties, lossy variants and held-out scores occur."""
    import random

    from edgeformer.core.variants import pick_variant

    rng = random.Random(1)
    cases = []
    for _ in range(300):
        measured = {}
        for name in rng.sample(["fp32", "int8", "int8-dynamic", "int4"], rng.randint(1, 4)):
            m = {"ms_per_token": round(rng.uniform(1.0, 1.3), 3),
                 "agreement": rng.choice([1.0, 0.97, 0.9])}  # fmt: skip
            if rng.random() < 0.5:
                m["bleu"] = round(rng.uniform(30, 31), 2)
            measured[name] = m
        cases.append(measured)
    configs = [{"variants": {k: {"measured": m} for k, m in c.items()}} for c in cases]
    got = node_map(node, "index.mjs", "data.map((c) => m.pickVariant(c)[0])", configs)
    want = [pick_variant(_measured_config(c))[0] for c in cases]
    assert got == want
    assert len(set(want)) >= 3  # the cases reach several outcomes


def _measured_config(measured: dict):
    """A PackageConfig-like object whose variants carry `measured` (what pick_variant reads)."""
    from types import SimpleNamespace

    variants = {k: SimpleNamespace(measured=m) for k, m in measured.items()}
    return SimpleNamespace(variants=variants)


# ---------------------------------------------------------------- one contract (issue 51 item 2)


def test_the_js_contract_is_generated_from_core():
    """runtime/js/contract.mjs is what edgeformer.core.contract renders now: a change to the
    format, schema, variants or options that is not regenerated fails here."""
    from edgeformer.core import contract

    committed = (JS / "contract.mjs").read_text(encoding="utf-8")
    assert committed == contract.render(), (
        f"runtime/js/contract.mjs is stale: run `{contract.GENERATED_BY}`"
    )


def test_js_io_names_are_pythons(node):
    """The JS runtime expands the contract's IO templates to format.io_names' lists, for every
    family, readable format version and depth."""
    from edgeformer.core.config import FAMILIES
    from edgeformer.core.format import READABLE_VERSIONS, io_names

    cases = [(f, v, n) for f in FAMILIES for v in READABLE_VERSIONS for n in (1, 2, 3, 7)]
    expression = "data.map(([f, v, n]) => m.ioNames(f, n, v))"
    for (f, v, n), got in zip(cases, node_map(node, "package.mjs", expression, cases)):
        assert got == io_names(f, n, v), (f, v, n)


# ---------------------------------------------------------------- decoding as in Python (item 1)

# every decoding option of GenerationOptions the JS runtime runs (alternatives and the sliding
# window are the Python runtime's only); sampling draws from numpy's generator in both
OPTION_CASES = [
    {},
    {"num_beams": 4, "num_hypotheses": 3},
    {"num_beams": 3, "length_penalty": 0.5, "early_stopping": False, "num_hypotheses": 2},
    {"num_beams": 2, "length_penalty": -1.0, "min_new_tokens": 6},
    {"sampling": True, "seed": 7},
    {"sampling": True, "seed": 11, "temperature": 0.7, "top_k": 10, "top_p": 0.8,
     "num_hypotheses": 3},
    {"sampling": True, "seed": 5, "temperature": 2.0, "repetition_penalty": 1.3},
    {"min_new_tokens": 12},
    {"repetition_penalty": 1.5, "no_repeat_ngram_size": 2},
    {"no_repeat_ngram_size": 1, "num_beams": 2},
    {"forced_end_token": 2, "max_new_tokens": 5},
]  # fmt: skip


def python_nbest(pkg: Path, family: str, inputs, options: dict, prefixes=None) -> list:
    """edgeformer.runtime's hypotheses per input: [[tokens, score, log_probs], ...]."""
    if family == "encoder-decoder":
        t = Translator(pkg, variant="fp32", threads=1)
        opts = t.model.options(**({"max_new_tokens": MAX_NEW} | options))
        found = t.translate_ids_nbest(inputs, opts, target_prefix=prefixes)
    else:
        g = Generator(pkg, variant="fp32", threads=1)
        opts = g.model.options(**({"max_new_tokens": MAX_NEW} | options))
        found = g.generate_ids_nbest(inputs, opts)
    return [[(h.tokens, h.score, h.log_probs) for h in hyps] for hyps in found]


def option_cases(ed_package, lm_package) -> list[dict]:
    """Both families x OPTION_CASES x node and wasm, and suppressed sequences / end tokens /
    target prefixes (language tokens) built from the greedy output, so that they bite."""
    greedy_ed = python_nbest(ed_package, "encoder-decoder", SOURCES, {})
    greedy_lm = python_nbest(lm_package, "decoder-only", PROMPTS, {})
    t_ed, t_lm = greedy_ed[0][0][0], greedy_lm[0][0][0]
    extra = {
        "encoder-decoder": [
            {"suppress_sequences": [[t_ed[0]], t_ed[1:3]], "end_token": [t_ed[3]]},
            {"_prefix": [[t_ed[2], 9], [], [40]]},
            {"_prefix": [[7], [8, 9], []], "num_beams": 3, "num_hypotheses": 2},
            {"_prefix": [[7], [], [5]], "sampling": True, "seed": 3},
        ],
        "decoder-only": [
            {"suppress_sequences": [[t_lm[0]]], "end_token": [t_lm[1]]},
            {"end_token": [t_lm[0]], "num_beams": 3},
        ],
    }
    cases = []
    for family, pkg, inputs in (("encoder-decoder", ed_package, SOURCES),
                                ("decoder-only", lm_package, PROMPTS)):  # fmt: skip
        for options in OPTION_CASES + extra[family]:
            for backend in ("node", "wasm"):
                case = dict(package=str(pkg), family=family, backend=backend, variant="fp32",
                            inputs=inputs, max_new_tokens=MAX_NEW)  # fmt: skip
                opts = {k: v for k, v in options.items() if k != "_prefix"}
                if "_prefix" in options:
                    opts["targetPrefix"] = options["_prefix"]
                cases.append({**case, "options": opts, "py": options})
    return cases


def test_js_decoding_options_match_python(node, ed_package, lm_package):
    """Beam search (beams, length penalty, early stopping, n-best), sampling (seeded:
    temperature, top-k, top-p, several samples), min / max new tokens, repetition penalty,
    no-repeat n-grams, suppressed sequences, end tokens, a forced end token and target
    prefixes: the JS runtime's hypotheses are the Python runtime's (ids equal, scores and
    log-probs within 1e-4: JS computes beam log-softmaxes in float64, numpy in float32), on
    onnxruntime-node and on wasm, for a batch of 3 inputs of both families."""
    cases = option_cases(ed_package, lm_package)
    refs: dict = {}
    for case in run_js(node, cases):
        py = case["py"]
        key = (case["family"], json.dumps(py, sort_keys=True))
        if key not in refs:
            options = {k: v for k, v in py.items() if k != "_prefix"}
            refs[key] = python_nbest(Path(case["package"]), case["family"], case["inputs"],
                                     options, py.get("_prefix"))  # fmt: skip
        where = f"{case['family']} {py} on {case['backend']}"
        want = refs[key]
        got = [[h["tokens"] for h in hyps] for hyps in case["hypotheses"]]
        assert got == [[w[0] for w in hyps] for hyps in want], where
        for hyps_w, hyps_g in zip(want, case["hypotheses"]):
            for w, g in zip(hyps_w, hyps_g):
                np.testing.assert_allclose(g["score"], w[1], atol=1e-4, err_msg=where)
                if w[2] is not None:
                    np.testing.assert_allclose(g["logProbs"], w[2], atol=1e-4, err_msg=where)


def test_js_text_features_match_python(node, ed_package, lm_package):
    """The text API: stop strings (the text cut before them, as Python's), streaming (the
    pieces concatenate to the whole output), a batch with an empty source, and a target prefix
    given as text, on node and wasm."""
    g = Generator(lm_package, variant="fp32", threads=1)
    t = Translator(ed_package, variant="fp32", threads=1)
    prompts = ["two dogs", "a man rides", "zwei hunde"]
    plain = g.generate_batch(prompts, max_new_tokens=MAX_NEW)
    stops = [plain[0][3:9], plain[1][-4:]]  # texts that occur in the outputs
    want_stop = g.generate_batch(prompts, max_new_tokens=MAX_NEW, stop=stops)
    assert want_stop != plain
    want_prefix = t.translate_batch(TEXTS, max_new_tokens=8, target_prefix=["ein", None, None])
    want_sample = "".join(g.stream("two dogs", max_new_tokens=MAX_NEW, sampling=True, seed=4))
    cases = []
    for backend in ("node", "wasm"):
        common = dict(backend=backend, variant="fp32", max_new_tokens=MAX_NEW)
        cases += [
            {**common, "package": str(lm_package), "call": "run", "inputs": prompts,
             "options": {"stop": stops}, "want": want_stop},
            {**common, "package": str(lm_package), "call": "stream", "inputs": prompts[:1],
             "options": {"stop": stops}, "want": want_stop[:1]},
            {**common, "package": str(lm_package), "call": "stream", "inputs": ["two dogs"],
             "options": {"sampling": True, "seed": 4}, "want": [want_sample]},
            {**common, "package": str(ed_package), "call": "run", "inputs": TEXTS,
             "max_new_tokens": 8, "options": {"targetPrefix": ["ein", None, None]},
             "want": want_prefix},
        ]  # fmt: skip
    for case in run_js(node, cases):
        if case["call"] == "run":
            got = [line["text"] for line in case["lines"]]
        else:
            got = ["".join(case["pieces"])]
            if "stop" not in case["options"]:  # streamed: more than one piece
                assert len(case["pieces"]) > 1, case["pieces"]
        assert got == case["want"], (case["call"], case["options"], case["backend"])


# ---------------------------------------------------------------- the same verdicts (issue 50)


def _params(test) -> list:
    """The argument tuples of a test's @pytest.mark.parametrize (the Python cases, as written)."""
    marks = [m for m in getattr(test, "pytestmark", []) if m.name == "parametrize"]
    return list(marks[0].args[1])


def hostile_packages(ed_package, lm_package, root: Path) -> list[tuple[str, Path]]:
    """(name, package) for the Python runtime's hostile-package cases (test_robustness.py and
    test_hostile.py, read from their parametrize lists so that new cases join), issue 50's JS
    cases (generation_config.json, special ids, sizes below the graphs') and packages that must
    load (the untouched ones, an unknown extra key, an unapplied generation field)."""
    import test_hostile as th
    import test_robustness as tr

    out: list[tuple[str, Path]] = [("untouched ed", ed_package), ("untouched lm", lm_package)]
    n = iter(range(10**6))

    def tampered(src, edit, name):
        dst = root / f"p{next(n)}"
        tr._tamper(src, dst, edit)
        out.append((name, dst))
        return dst

    for edit, key in _params(tr.test_config_schema):
        tampered(ed_package, edit, f"config {key}")
    (root / tr.OUTSIDE).write_bytes(b"outside")
    for i, (edit,) in enumerate([(e,) for e in _params(tr.test_package_cannot_reach_outside)]):
        pkg = tampered(ed_package, edit, f"reach outside {i}")
        (pkg / "link.onnx").symlink_to(root / tr.OUTSIDE)
    for text in _params(tr.test_config_not_an_object):
        dst = root / f"p{next(n)}"
        shutil.copytree(ed_package, dst)
        (dst / "config.json").write_bytes(text.encode("utf-8", "surrogateescape"))
        out.append((f"config.json {text!r}", dst))
    tampered(ed_package, tr._set("min_onnxruntime", "99.0.0"), "min_onnxruntime 99")
    for edit, message in _params(th.test_hostile_tokenizers_are_package_errors):
        dst = root / f"p{next(n)}"
        out.append((f"tokenizer {message}", th.edited_tokenizer(ed_package, dst, edit)))
    split = {"type": "Split", "pattern": {"Regex": "(\\w+\\s?)+$"}, "behavior": "Isolated",
             "invert": False}  # fmt: skip
    catastrophic = th.edited_tokenizer(
        ed_package, root / "catastrophic", lambda t: t.update(pre_tokenizer=split)
    )
    out.append(("tokenizer catastrophic regex", catastrophic))
    for key, value, _ in _params(th.test_config_sizes_are_checked_against_the_graphs):
        tampered(lm_package, tr._set(f"model.{key}", value), f"lm model.{key} {value}")
    for name in ("config.json", "golden.json", "generation_config.json"):
        dst = root / f"p{next(n)}"
        shutil.copytree(ed_package, dst)
        if name == "config.json":
            (dst / name).write_text(th.nested(100_000, "1"))
        else:
            th.rewrite(dst, name, th.nested(100_000, "1"))
        out.append((f"nested {name}", dst))
    # issue 50's JS cases: special ids, sizes, missing keys, generation_config.json
    for path, value in [("special_tokens.bos_id", -1), ("special_tokens.eos_id", KeyError),
                        ("model.vocab_size", 100), ("model.max_position_embeddings", 16),
                        ("model.hidden_size", KeyError), ("model.num_attention_heads", KeyError),
                        ("variants.fp32.files", KeyError), ("graphs", KeyError),
                        ("model.activation", "swish"), ("model.unknown_key", 1),
                        ("extra_top_level_key", 1)]:  # fmt: skip
        tampered(lm_package, tr._set(path, value), f"lm {path} {value}")
    gen = json.loads((lm_package / "generation_config.json").read_text())
    for name, change in [("max_new_tokens 0", {"max_new_tokens": 0}),
                         ("100,000 eos ids", {"eos_token_id": list(range(100_000))}),
                         ("eos id beyond vocab", {"eos_token_id": [2, 10**6]}),
                         ("num_beams 10**6", {"num_beams": 10**6}),
                         ("top_p 2", {"do_sample": True, "top_p": 2.0}),
                         ("unapplied field", {"typical_p": 0.5}),
                         ("beams 3", {"num_beams": 3})]:  # fmt: skip
        dst = root / f"p{next(n)}"
        shutil.copytree(lm_package, dst)
        th.rewrite(dst, "generation_config.json", json.dumps(gen | change))
        out.append((f"generation_config {name}", dst))
    # the translators' model fields (issue 48): encoder-decoder only, each with its rule
    for pkg, path, value in [
        (lm_package, "model.layernorm_embedding", True),
        (lm_package, "model.positional", "relative"),
        (ed_package, "model.relative_attention_num_buckets", 8),
        (ed_package, "model.separate_positions", True),
        (ed_package, "model.head_scale", -1.0),
        (ed_package, "model.head_scale", "0.1"),
    ]:  # fmt: skip
        tampered(pkg, tr._set(path, value), f"{pkg.name} {path} {value}")
    # an encoder-decoder's forced first token and minimum length (issue 48): applied, or refused
    gen = json.loads((ed_package / "generation_config.json").read_text())
    for name, change in [("forced_bos_token_id 5", {"forced_bos_token_id": 5}),
                         ("forced_bos_token_id [7]", {"forced_bos_token_id": [7]}),
                         ("min_length 4", {"min_length": 4}),
                         ("forced bos and min_length", {"forced_bos_token_id": 9,
                                                         "min_length": 5}),
                         ("min_length 0", {"min_length": 0}),
                         ("forced_bos_token_id beyond vocab", {"forced_bos_token_id": 10**6}),
                         ("forced_bos_token_id text", {"forced_bos_token_id": "<s>"}),
                         ("forced_bos_token_id [1, 2]", {"forced_bos_token_id": [1, 2]}),
                         ("min_length -1", {"min_length": -1}),
                         ("min_length text", {"min_length": "4"}),
                         ("min_length past max", {"min_length": 7})]:  # fmt: skip
        dst = root / f"p{next(n)}"
        shutil.copytree(ed_package, dst)
        th.rewrite(dst, "generation_config.json", json.dumps(gen | change))
        out.append((f"ed generation_config {name}", dst))
    return out


def python_verdict(pkg: Path, texts: list[str]) -> tuple[str, list[str] | str]:
    """("ok", outputs) or ("refused", message): the Python runtime loads and decodes."""
    from edgeformer.runtime import PackageError

    try:
        config = json.loads((pkg / "config.json").read_text())
        lm = config.get("family") == "decoder-only"
    except Exception:
        lm = False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if lm:
                return "ok", Generator(pkg).generate_batch(texts, max_new_tokens=4)
            return "ok", Translator(pkg).translate_batch(texts, max_new_tokens=4)
    except (PackageError, ValueError) as e:
        return "refused", str(e)


def test_js_gives_the_python_runtimes_verdicts(node, ed_package, lm_package, tmp_path):
    """Every hostile package the Python runtime's tests build (and issue 50's JS cases): the
    JS runtime refuses it with a PackageError or RangeError (a clear one-line error, exit 2 in
    the CLI) exactly when the Python runtime refuses it, on onnxruntime-node and on wasm; and
    where both accept it, the outputs are equal. No case may end in another exception (a
    TypeError from a missing key) or hang (a catastrophic tokenizer regex)."""
    texts = ["two dogs play in the snow .", "a man"]
    cases = hostile_packages(ed_package, lm_package, tmp_path)
    want = {str(pkg): (name, *python_verdict(pkg, texts)) for name, pkg in cases}
    runs = [dict(package=str(pkg), backend=b, variant="fp32", call="run", inputs=texts,
                 max_new_tokens=4, options={"scores": False}) for _, pkg in cases
            for b in ("node", "wasm")]  # fmt: skip
    problems = []
    for case in run_js(node, runs, errors=True, timeout=600):
        name, verdict, detail = want[case["package"]]
        where = f"{name} on {case['backend']}"
        if "error" in case:
            if case["kind"] not in ("PackageError", "RangeError"):
                problems.append(f"{where}: JS crashed with {case['kind']}: {case['error']}")
            elif verdict == "ok":
                problems.append(f"{where}: JS refused ({case['error']}), Python accepted")
            elif "\n" in case["error"]:
                problems.append(f"{where}: not one line: {case['error']!r}")
        elif verdict == "refused":
            problems.append(f"{where}: JS accepted, Python refused ({detail})")
        elif [line["text"] for line in case["lines"]] != detail:
            problems.append(f"{where}: outputs differ")
    assert not problems, "\n".join(problems)
    assert sum(v[1] == "refused" for v in want.values()) >= 40  # the cases did hit


REGEX_CASES = [
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    " {2,}", "\\s+", "[{}]", "a{b", "(?<name>x)y", "(?#c)a", "(?i)a+", "[[a]b]+", "\\x{263a}+",
    "(a+)+$", "(a|a)*b", "(\\w+\\s?)+$", "((ab)*)+", "(x)\\1", "a{1,100000}", "(?:a|b|ab)+c",
    "(a*)*", "((a)?b?)+", "a*a*a*a*b", "a*a*a*b", "x*x*$", "(?:x*x*)y",
    "\\s*[\\r\\n]+", "(?(1)a|b)", "(?~ab)", "\\k<n>", "\\g<1>",
    "(a", "[ab", "a)", "\\", "*a", "a{2}{3}", "(" * 40 + ")" * 40, "x" * 5000,
    "(?:a?){60}", "(a?b?)+$", "a?" * 30 + "a" * 30, "(?:x|y|z)?" * 6, "(?:x|y|z)?" * 5,
]  # fmt: skip


# REGEX_CASES the rule accepts (real tokenizers' patterns; optional items up to MAX_WAYS ways);
# every other case is refused (three repetitions in a row: rule 5; a repeated optional item
# such as ((a)?b?)+ or (?:a?){60}: rule 4; 2^30 ways: rule 6)
REGEX_ACCEPTED = {*REGEX_CASES[:11], "\\s*[\\r\\n]+", "(?:x|y|z)?" * 5}


def test_js_refuses_the_regexes_python_refuses(node):
    """The tokenizer regex rule (issue 50) in the JS runtime (runtime/js/regex.mjs): real
    tokenizers' patterns pass, catastrophic ones are refused; and its verdicts are those of the
    Python rule (edgeformer.core.patterns, when this checkout has it)."""
    script = (
        "const { patternProblem } = await import(process.argv[1]);"
        "console.log(JSON.stringify(JSON.parse(process.argv[2]).map(patternProblem)));"
    )
    cmd = [node, "--input-type=module", "-e", script, (JS / "regex.mjs").as_uri(),
           json.dumps(REGEX_CASES)]  # fmt: skip
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    got = dict(zip(REGEX_CASES, json.loads(run.stdout)))
    assert {p for p, why in got.items() if why is None} == REGEX_ACCEPTED
    try:
        patterns = importlib.import_module("edgeformer.core.patterns")
    except ImportError:
        pytest.skip("edgeformer.core.patterns (issue 50's Python rule) is not in this checkout")
    for pattern, why in got.items():
        assert (why is None) == (patterns.pattern_problem(pattern) is None), pattern[:60]


def test_js_checks_external_data_in_any_field_order(node, ed_package, tmp_path):
    """A graph whose external_data entries name an unlisted file with the protobuf fields in the
    other order (value before key: what a byte search for one encoding misses) is refused on
    node, where onnxruntime would open the file itself; and the CLI's bounds (threads,
    max_new_tokens 0) are one-line errors with exit status 2."""
    from edgeformer.core.files import sha256

    pkg = tmp_path / "pkg"
    shutil.copytree(ed_package, pkg)
    shutil.copyfile(pkg / "weights.data", pkg / "weights.dat2")
    graph = (pkg / "decoder.onnx").read_bytes()
    entry = b"\x0a\x08location\x12\x0cweights.data"
    assert entry in graph
    swapped = b"\x12\x0cweights.dat2\x0a\x08location"
    (pkg / "decoder.onnx").write_bytes(graph.replace(entry, swapped))
    config = json.loads((pkg / "config.json").read_text())
    config["files"]["decoder.onnx"] = sha256(pkg / "decoder.onnx")
    (pkg / "config.json").write_text(json.dumps(config))
    run = cli(node, str(pkg), "--ids", "5,2")
    assert run.returncode == 2, run.stderr
    assert 'decoder.onnx reads the weights file "weights.dat2"' in run.stderr, run.stderr
    for args in (["--threads", "100000"], ["--max-new-tokens", "0"], ["--beam", "1000000"],
                 ["--top-p", "2"], ["--temperature", "nan"]):  # fmt: skip
        run = cli(node, str(ed_package), "--ids", "5,2", *args)
        assert run.returncode == 2 and len(run.stderr.splitlines()) == 1, (args, run.stderr)


# ---------------------------------------------------------------- the npm package (item 5)

APP = """
import { loadPackage, PackageError } from "edgeformer-runtime";
import CONTRACT from "edgeformer-runtime/contract";
const model = await loadPackage(process.argv[2], { variant: "fp32", threads: 1 });
const lines = await model.run(JSON.parse(process.argv[3]), { numBeams: 2, maxNewTokens: 8 });
console.log(JSON.stringify({ texts: lines.map((l) => l.text), version: CONTRACT.format_version,
                             error: typeof PackageError }));
"""


PKG = "edgeformer-runtime"


def app_lock(tgz: str) -> dict:
    """A fresh project's package-lock.json: the tarball, and the versions runtime/js's lock
    pins for its dependencies (what a project that installed it online would hold)."""
    lock = json.loads((JS / "package-lock.json").read_text())
    meta = json.loads((JS / "package.json").read_text())
    packages = {
        "": {"name": "app", "dependencies": {PKG: tgz}},
        f"node_modules/{PKG}": {
            "version": meta["version"], "resolved": tgz, "dependencies": meta["dependencies"],
            "bin": meta["bin"], "engines": meta["engines"],
        },
    }  # fmt: skip
    packages |= {k: v for k, v in lock["packages"].items() if k}
    return {"name": "app", "lockfileVersion": 3, "requires": True, "packages": packages}


def test_npm_pack_installs_offline_in_a_fresh_project(node, ed_package, tmp_path):
    """`npm pack` gives a tarball that a fresh Node project installs without the network (its
    dependencies at the versions of runtime/js's lock, from npm's cache) and runs: it
    translates with beams as the Python runtime does; the tarball holds the types (index.d.ts)
    and they declare every export."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not on PATH")
    pack = subprocess.run([npm, "pack", "--json", "--pack-destination", str(tmp_path)], cwd=JS,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert pack.returncode == 0, pack.stderr
    info = json.loads(pack.stdout)[0]
    packed = {f["path"] for f in info["files"]}
    assert {"index.mjs", "index.d.ts", "contract.mjs", "example/index.html"} <= packed, packed
    app = tmp_path / "app"
    app.mkdir()
    tgz = f"file:../{info['filename']}"
    (app / "package.json").write_text(json.dumps(
        {"name": "app", "private": True, "type": "module", "dependencies": {PKG: tgz}}
    ))  # fmt: skip
    (app / "package-lock.json").write_text(json.dumps(app_lock(tgz)))
    # npm ci from the lock: the dependencies' tarballs come from npm's cache (make js filled it)
    install = [npm, "ci", "--offline", "--ignore-scripts", "--no-audit", "--no-fund"]
    run = subprocess.run(install, cwd=app, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    (app / "app.mjs").write_text(APP)
    cmd = [node, "app.mjs", str(ed_package), json.dumps(TEXTS[:2])]
    run = subprocess.run(cmd, cwd=app, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout)
    want = Translator(ed_package, variant="fp32").translate_batch(
        TEXTS[:2], max_new_tokens=8, num_beams=2
    )
    assert got == {"texts": want, "version": FORMAT_VERSION, "error": "function"}
    types = (app / "node_modules/edgeformer-runtime/index.d.ts").read_text()
    script = "import('edgeformer-runtime').then((m) => console.log(JSON.stringify(Object.keys(m))))"
    run = subprocess.run([node, "-e", script], cwd=app, capture_output=True, text=True, timeout=60)
    for name in json.loads(run.stdout):
        assert re.search(rf"export (declare )?(function|class|const) {name}\b", types), name


# ---------------------------------------------------------------- chat templates (item 1)


def test_js_chat_templates_render_and_reply_as_python(node, tmp_path):
    """A converted instruct model's chat template (tokenizer_config.json), rendered by
    @huggingface/jinja: the prompt of a conversation is the Python runtime's (transformers'
    apply_chat_template) for each family's template, and the reply's ids too (greedy, and
    sampled with a seed), on node and wasm."""
    from chat_templates import TEMPLATES, UNBOUNDED_RENDERS
    from conftest import tiny_llama
    from test_chat import chat_tokenizer
    from test_hostile import rewrite

    from edgeformer.export import export_package
    from edgeformer.models.hf import convert_hf

    tok = chat_tokenizer(tmp_path / "hf", TEMPLATES["chatml"])
    tiny_llama(tmp_path / "hf", len(tok), bos=tok.bos_token_id, eos=tok.eos_token_id)
    base = export_package(convert_hf(tmp_path / "hf", tmp_path / "ck"), tmp_path / "pkg",
                          verbose=False)  # fmt: skip
    conversation = [
        {"role": "system", "content": "you translate"},
        {"role": "user", "content": "hello there"},
        {"role": "assistant", "content": "two plus two"},
        {"role": "user", "content": "what is three"},
    ]
    cases, want = [], {}
    for name in ("chatml", "gemma", "mistral", "phi3", "qwen3"):
        pkg = tmp_path / name
        shutil.copytree(base, pkg)
        config = json.loads((pkg / "tokenizer_config.json").read_text())
        config["chat_template"] = TEMPLATES[name]
        rewrite(pkg, "tokenizer_config.json", json.dumps(config))
        messages = conversation[1:] if name in ("mistral", "gemma") else conversation
        g = Generator(pkg, threads=1)
        want[name, "prompt"] = g.chat_prompt(messages)
        want[name, "chat"] = g.chat(messages, max_new_tokens=8)
        want[name, "sample"] = g.chat(messages, max_new_tokens=8, sampling=True, seed=2)
        for backend in ("node", "wasm"):
            common = dict(package=str(pkg), backend=backend, variant="fp32", inputs=messages,
                          max_new_tokens=8, name=name)  # fmt: skip
            cases += [{**common, "call": "prompt"}, {**common, "call": "chat", "kind_": "chat"},
                      {**common, "call": "chat", "kind_": "sample",
                       "options": {"sampling": True, "seed": 2}}]  # fmt: skip
    for case in run_js(node, cases):
        where = f"{case['name']} {case['call']} on {case['backend']}"
        if case["call"] == "prompt":
            assert case["prompt"] == want[case["name"], "prompt"], where
        else:
            assert case["text"] == want[case["name"], case["kind_"]], where
    # hostile templates (issue 50 item 5): refused in both runtimes, in bounded time and memory
    hostile = {
        "huge range": "{% for i in range(100000000) %}x{% endfor %}",
        "huge string": "{{ 'x' * 100000000 }}",
        "js internals": "{{ ''.constructor.constructor('return process')() }}",
        "raise": "{{ raise_exception('no system role') }}",
        **UNBOUNDED_RENDERS,  # issue 63: work and value sizes bounded in one line too
    }
    cases = []
    for name, template in hostile.items():
        pkg = tmp_path / f"hostile-{len(cases)}"
        shutil.copytree(base, pkg)
        config = json.loads((pkg / "tokenizer_config.json").read_text())
        config["chat_template"] = template
        rewrite(pkg, "tokenizer_config.json", json.dumps(config))
        with pytest.raises(ValueError):
            Generator(pkg, threads=1).chat_prompt(conversation)
        cases.append(dict(package=str(pkg), backend="node", variant="fp32", inputs=conversation,
                          call="prompt", name=name))  # fmt: skip
    for case in run_js(node, cases, errors=True):
        assert case.get("kind") == "PackageError", (case["name"], case.get("prompt", "")[:80])


def test_js_seeds_above_2_53_draw_as_pythons(node, lm_package):
    """Seeds are exact: above 2^53 the CLI keeps --seed as a BigInt (2^64 + 1 and 2^64 + 2
    drew alike, both rounded to 2^64), and the API refuses a Number there (already rounded:
    not the seed written) and takes a BigInt."""
    g = Generator(lm_package, threads=1)
    prompt, texts = "ROMEO:", []
    for seed in (2**64 + 1, 2**64 + 2, 2**53 + 1):
        want = g.generate_batch([prompt], max_new_tokens=12, sampling=True, seed=seed)[0]
        run = cli(node, str(lm_package), "--sample", "--seed", str(seed), "--max-new-tokens",
                  "12", prompt)  # fmt: skip
        assert run.returncode == 0, run.stderr
        texts.append(json.loads(run.stdout)["text"])
        assert texts[-1] == want, seed
    assert texts[0] != texts[1]  # not one rounded seed
    options = {"sampling": True, "seed": 2**60}
    case = dict(package=str(lm_package), backend="node", variant="fp32", call="run",
                inputs=[prompt], max_new_tokens=4, options=options)  # fmt: skip
    (out,) = run_js(node, [case], errors=True)
    assert out.get("kind") == "RangeError" and "above 2^53" in out["error"], out


def test_a_chat_template_that_renders_nothing_is_refused_in_both_runtimes(
    node, lm_package, tmp_path, monkeypatch, capsys
):
    """A template whose render is empty for a conversation (here: it writes no message): the
    model would answer from BOS alone, the user's message dropped. Refused in both runtimes
    and the chat CLI with one message (the CLI said "longer than the model's context")."""
    from test_hostile import rewrite

    from edgeformer.cli import main
    from edgeformer.runtime.chat import EMPTY_CHAT_PROMPT

    pkg = tmp_path / "pkg"
    shutil.copytree(lm_package, pkg)
    rewrite(pkg, "tokenizer_config.json",
            json.dumps({"chat_template": "{% for m in messages %}{% endfor %}"}))  # fmt: skip
    conversation = [{"role": "user", "content": "hello there"}]
    with pytest.raises(ValueError, match=re.escape(EMPTY_CHAT_PROMPT)):
        Generator(pkg, threads=1).chat(conversation, max_new_tokens=4)
    monkeypatch.setattr("sys.stdin", io.StringIO("hello there\n"))
    assert main(["chat", str(pkg), "--max-new-tokens", "4"]) == 2
    err = capsys.readouterr().err
    assert EMPTY_CHAT_PROMPT in err and "longer than" not in err, err
    case = dict(package=str(pkg), backend="node", variant="fp32", inputs=conversation,
                call="chat", max_new_tokens=4)  # fmt: skip
    (out,) = run_js(node, [case], errors=True)
    assert out.get("kind") == "PackageError" and EMPTY_CHAT_PROMPT in out["error"], out


# ---------------------------------------------------------------- WebGPU (item 4)


def test_js_webgpu_in_headless_chromium(node, ed_package, lm_package, tmp_path, record_property):
    """backend "webgpu" (onnxruntime-web's WebGPU provider) in headless Chromium on its
    software adapter (SwiftShader, --enable-unsafe-webgpu): both families translate / continue
    as the Python runtime does. onnxruntime's verbose log says where each node ran: the decoder
    graphs run on WebGpuExecutionProvider (the LM's mask-length ops and one ArgMax on the CPU);
    the encoder runs on wasm (the provider has no key_padding_mask for MultiHeadAttention)."""
    chromium()
    root = tmp_path / "site"
    root.mkdir()
    (root / "js").symlink_to(JS)
    placed = {}
    for name, pkg in (("ed", ed_package), ("lm", lm_package)):
        (root / name).symlink_to(pkg)
        query = {"package": f"/{name}/", "text": TEXTS[0], "beams": 1, "max_new_tokens": 4,
                 "auto": 1, "backend": "webgpu", "log": 0}  # fmt: skip
        flags = ("--enable-unsafe-webgpu", "--enable-logging=stderr", "--v=0")
        result = open_page(root, "js/example/index.html", query, tmp_path / name, flags)
        if "WebGPU" in result.get("error", "") and "navigator.gpu" in result["error"]:
            pytest.skip(f"no WebGPU adapter in this Chromium: {result['error'][:200]}")
        assert "error" not in result, result["error"][:2000]
        assert result["backend"] == "webgpu"
        if name == "ed":
            want = Translator(pkg, variant="fp32").translate_batch(TEXTS[:1], max_new_tokens=4)
        else:
            want = Generator(pkg, variant="fp32").generate_batch(TEXTS[:1], max_new_tokens=4)
        assert [line["text"] for line in result["lines"]] == want, name
        log = Path(f"{tmp_path / name}.log").read_text(errors="replace")
        placed[name] = re.findall(r"placed on \[(\w+)\]\. Number of nodes: (\d+)", log)
        assert any(p == "WebGpuExecutionProvider" for p, _ in placed[name]), placed[name]
    record_property("webgpu_placement", placed)
    print(placed)
