"""Our server beside llama.cpp's (llama-cpp-python's `llama_cpp.server`) on the same model.

    python -m edgeformer.benchmarks.serve_peers [--llama-python PY] [--work DIR] \
        [--clients 1,4,16] [--requests 32] [--max-tokens 32] [--rounds 3] [--threads 2] \
        [--turns 5] [--quick] [--out benchmarks/results/serve-DATE.json]

The model is the bench's `lm` shape as a random-weight LlamaForCausalLM (artifacts.llama_dir:
the Llama the edgeformer-llama-* and llamacpp-* stacks run): ours is its converted checkpoint
exported fp32 (artifacts.llama_package_for's package), llama.cpp's is its f32 GGUF made by
llama.cpp's own converter (artifacts.gguf_f32). Both are word-level over the same "t<i>"
vocabulary (llama.cpp's whitespace tokenizer), so the prompts, texts of vocabulary words, are
the same tokens for both. llama.cpp's server is started in llama.cpp's environment
(llama_env.resolve: --llama-python, $EDGEFORMER_LLAMA_PYTHON or runs/llama-env; it needs the
`server` extra's packages: fastapi, sse-starlette, starlette-context, pydantic-settings) with
--n_threads / --n_threads_batch = --threads, a context of the model's positions and
--interrupt_requests False (by default a new request cuts the one streaming: concurrent clients
would get cut answers); ours with the same threads, 16 rows, no prefix cache. Every request
streams `--max-tokens` greedy tokens (min_tokens: no end before them), the servers' rounds
interleaved (runtime/serve/bench.py `measure`). What llama-cpp-python's server does with
concurrent requests: one at a time (a lock around its one llama context), so its 16 clients
give about its one-by-one tokens/s and wait in turn, which its TTFT shows.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from ..core.files import atomic_text
from . import artifacts, llama_env
from .shapes import get_shape

NAME, PEER = "edgeformer", "llama.cpp"
SERVER_MODULES = ("llama_cpp", "llama_cpp.server", "fastapi", "sse_starlette", "starlette_context",
                  "pydantic_settings")  # fmt: skip
START_TIMEOUT_S = 180


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_problem(python: str | None) -> str | None:
    """Why llama.cpp's server cannot start with `python` (None: it can)."""
    if python is None:
        return "no llama.cpp environment (--llama-python; benchmarks/README.md)"
    info = llama_env.probe(python, SERVER_MODULES, ("llama_cpp_python",))
    if "error" in info:
        return f"llama.cpp's environment unusable: {info['error']}"
    if info["missing"]:
        return (
            f"{python} lacks {', '.join(info['missing'])}: pip install fastapi sse-starlette "
            "'starlette-context>=0.3.6,<0.4' pydantic-settings uvicorn PyYAML there (the "
            "llama-cpp-python[server] extra's packages)"
        )
    return None


def prompts(vocab: list[str], n: int = 6, length: int = 16) -> list[str]:
    """n texts of `length` vocabulary words (none of the special tokens), of different words."""
    words = [w for w in vocab if w.startswith("t")]
    return [" ".join(words[(97 * i + 31 * j) % len(words)] for j in range(length - 2 * i))
            for i in range(n)]  # fmt: skip


@contextlib.contextmanager
def llama_server(python: str, gguf: Path, threads: int, context: int, log: Path) -> Iterator[str]:
    """llama_cpp.server on 127.0.0.1 serving `gguf` as model PEER: yields its base URL."""
    port = free_port()
    cmd = [python, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", PEER,
           "--host", "127.0.0.1", "--port", str(port), "--n_threads", str(threads),
           "--n_threads_batch", str(threads), "--n_ctx", str(context),
           "--interrupt_requests", "False"]  # fmt: skip
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                tail = log.read_text().strip().splitlines()[-3:]
                raise RuntimeError(f"llama_cpp.server exit {proc.returncode}: {' | '.join(tail)}")
            try:
                with urllib.request.urlopen(f"{url}/v1/models", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama_cpp.server did not answer in {START_TIMEOUT_S} s")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def bench_args(package: Path, args: argparse.Namespace, out: Path | None) -> argparse.Namespace:
    """serve-bench's arguments for our package, as its command line would make them."""
    from edgeformer.runtime.serve import bench

    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    argv = [f"{NAME}={package}", "--clients", args.clients, "--requests", str(args.requests),
            "--max-tokens", str(args.max_tokens), "--rounds", str(args.rounds), "--threads",
            str(args.threads), "--turns", str(args.turns)]  # fmt: skip
    return p.parse_args(argv + (["--out", str(out)] if out is not None else []))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m edgeformer.benchmarks.serve_peers",
                                description=__doc__.split("\n")[0])  # fmt: skip
    p.add_argument("--llama-python", default=None, metavar="PY",
                   help="llama.cpp's environment's interpreter (default: "
                   f"${llama_env.ENV_VAR}, else {llama_env.DEFAULT_ENV})")  # fmt: skip
    p.add_argument(
        "--work",
        type=Path,
        default=Path("runs/serve-peers"),
        help="where the models are built, cached (default: runs/serve-peers)",
    )
    p.add_argument("--clients", default="1,4,16", help="(default: 1,4,16)")
    p.add_argument("--requests", type=int, default=32, help="per run (default: 32)")
    p.add_argument("--max-tokens", type=int, default=32, help="per request (default: 32)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved (default: 3)")
    p.add_argument("--turns", type=int, default=5,
                   help="our prefix cache's conversation (0: none) (default: 5)")  # fmt: skip
    p.add_argument("--threads", type=int, default=2, help="each server's (default: 2)")
    p.add_argument("--out", type=Path, default=None, help="the JSON (default: print only)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="the lm shape's quick size (tests) (default: the full one)",
    )
    args = p.parse_args(argv)
    python = llama_env.resolve(args.llama_python)
    problem = server_problem(python)
    if problem:
        raise SystemExit(f"serve_peers: {problem}")
    assert python is not None
    from edgeformer.runtime.serve import bench

    shape = get_shape("lm", args.quick)
    work = args.work.resolve()
    ckpt = artifacts.llama_checkpoint(shape, work)
    key = {"cfg": artifacts.shape_key(shape)}
    package = artifacts.exported_package(ckpt, work / f"{shape.name}-llama-package", key,
                                         ("fp32",))  # fmt: skip
    gguf = artifacts.gguf_f32(shape, work, llama_env.vendor_dir(python)) / "model.gguf"
    texts = prompts(artifacts.llama_vocab(shape))
    log = work / "llama-server.log"
    with llama_server(python, gguf, args.threads, shape.cfg.max_len, log) as url:
        bench.run(bench_args(package, args, args.out), {PEER: url}, texts)
    if args.out is not None:  # what ran, beside the numbers
        result = json.loads(args.out.read_text())
        result["model"] = (f"the bench's lm shape as a random-weight LlamaForCausalLM "
                           f"({shape.describe()}): ours fp32, llama.cpp's f32 GGUF")  # fmt: skip
        result["package"] = f"{NAME}=<work>/{package.name}"
        result["against"][PEER]["url"] = "python -m llama_cpp.server (llama-cpp-python)"
        result["llama_cpp"] = llama_env.describe(python) | {"interpreter": None}
        result["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        with atomic_text(args.out) as f:
            f.write(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
