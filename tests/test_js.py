"""The JavaScript runtime (runtime/js, docs/ship-node.md) decodes packages as the Python one does.

Both families, every variant, on onnxruntime-node (cache in place and re-fed) and onnxruntime-web's
wasm backend running in Node: the greedy ids of the JS runtime against edgeformer.runtime's, and
the log-probability of every chosen token. Skipped, with the reason, when `node` is not on PATH or
runtime/js/node_modules is missing and npm's cache cannot install it offline (`make js` installs
it; the test never goes to the network).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from edgeformer.runtime import Generator, Translator

ROOT = Path(__file__).resolve().parents[1]
JS = ROOT / "runtime" / "js"
VARIANTS = ("fp32", "int8-dynamic", "int8", "int4")
MAX_NEW = 24
SOURCES = [[73, 78, 114, 143, 8, 24, 124, 143, 39, 2], [49, 131, 65, 43, 2], [15, 7, 2]]
PROMPTS = [[5, 9, 14, 3, 22, 8], [40, 41], [100, 7, 120, 33, 60, 61, 62, 63, 64]]
TEXTS = ["A man is riding a bike.", "Two dogs play in the snow.", ""]
# runs cases {package, backend, variant, cache, inputs} in one node process: ids and log-probs
DRIVER = """
const { loadPackage } = await import(process.argv[1]);
const out = [];
for (const c of JSON.parse(process.argv[2])) {
  const m = await loadPackage(c.package, { backend: c.backend, variant: c.variant, cache: c.cache,
                                           threads: 1 });
  const r = await m.decodeIds(c.inputs, { maxNewTokens: c.max_new_tokens, scores: true });
  out.push({ ...c, ids: r.ids, log_probs: r.logProbs, ms_per_token: r.msPerToken });
  await m.release();
}
console.log(JSON.stringify(out));
"""


@pytest.fixture(scope="module")
def node() -> str:
    """The node executable, with runtime/js's dependencies installed (else the test skips)."""
    exe = shutil.which("node")
    if exe is None:
        pytest.skip("node is not on PATH: the JavaScript runtime (runtime/js) is not tested")
    modules = JS / "node_modules"
    needed = ("onnxruntime-node", "onnxruntime-web", "@huggingface/tokenizers")
    if not all((modules / name).is_dir() for name in needed):
        npm = shutil.which("npm")
        # the lock file's packages from npm's cache only: a test never goes to the network
        cmd = [npm or "npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--offline"]
        done = npm is not None and subprocess.run(cmd, cwd=JS, capture_output=True, timeout=120)
        if not done or done.returncode != 0:
            pytest.skip(
                "runtime/js/node_modules is missing and npm's cache cannot install it offline: "
                "run `make js` (it needs the npm registry once)"
            )
    return exe


def run_js(node: str, cases: list[dict]) -> list[dict]:
    index = (JS / "index.mjs").as_uri()
    cmd = [node, "--input-type=module", "-e", DRIVER, index, json.dumps(cases)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout)


def cli(node: str, *args: str) -> subprocess.CompletedProcess:
    cmd = [node, str(JS / "cli.mjs"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


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
    packages = {
        "encoder-decoder": (export_package(ed_checkpoint, tmp_path / "ed", web, verbose=False),
                            SOURCES),
        "decoder-only": (export_package(lm_checkpoint, tmp_path / "lm", web, verbose=False),
                         PROMPTS),
    }  # fmt: skip
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


def test_js_refuses_what_it_cannot_run(node, lm_package, tmp_path):
    """An unknown format version asks for a re-export; the in-place cache on wasm (which
    onnxruntime-web 1.30 leaves at zeros without an error) is refused, not run."""
    pkg = tmp_path / "future"
    shutil.copytree(lm_package, pkg)
    config = json.loads((pkg / "config.json").read_text())
    config["format_version"] = 99
    (pkg / "config.json").write_text(json.dumps(config))
    run = cli(node, str(pkg), "--ids", "5,9")
    assert run.returncode == 1 and "re-export" in run.stderr, run.stderr
    run = cli(node, str(lm_package), "--backend", "wasm", "--cache", "inplace", "--ids", "5,9")
    assert run.returncode == 1 and "refeed" in run.stderr, run.stderr


PAGE = """<!doctype html>
<meta charset="utf-8" />
<script type="importmap">
  {"imports": {
    "onnxruntime-web": "/js/node_modules/onnxruntime-web/dist/ort.min.mjs",
    "@huggingface/tokenizers": "/js/node_modules/@huggingface/tokenizers/dist/tokenizers.min.mjs"
  }}
</script>
<pre id="out">loading</pre>
<script type="module">
  const out = document.getElementById("out");
  try {
    const { loadPackage } = await import("/js/index.mjs");
    const model = await loadPackage(new URL("/pkg/", location.href), { variant: "fp32" });
    const lines = await model.run(TEXTS, { maxNewTokens: 8 });
    out.textContent = "RESULT" + JSON.stringify({ backend: model.backend, lines }) + "END";
  } catch (e) {
    out.textContent = "ERROR" + String(e && e.stack || e) + "END";
  }
</script>
"""


def test_js_in_a_browser_page(node, ed_package, tmp_path):
    """The runtime in a real page: headless Chromium loads index.mjs, onnxruntime-web and the
    package over HTTP (the weights fetched and passed as externalData) and translates as the
    Python runtime does. Skipped when no Chromium is installed (Debian: apt-get install
    chromium)."""
    import functools
    import html
    import http.server
    import threading

    found = [shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")]
    browser = next((b for b in found if b), None)
    if browser is None:
        pytest.skip("no chromium on PATH: the browser page is not tested")
    root = tmp_path / "site"
    root.mkdir()
    (root / "js").symlink_to(JS)
    (root / "pkg").symlink_to(ed_package)
    (root / "index.html").write_text(PAGE.replace("TEXTS", json.dumps(TEXTS)))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/index.html"
        args = ["--headless=new", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=60000"]
        cmd = [browser, *args, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", url]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    finally:
        server.shutdown()
    dom = run.stdout
    assert "RESULT" in dom, (dom[-2000:], run.stderr[-2000:])
    result = json.loads(html.unescape(dom.split("RESULT", 1)[1].split("END", 1)[0]))
    want = Translator(ed_package, variant="fp32").translate_batch(TEXTS, max_new_tokens=8)
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
