"""`edgeformer serve PKG [PKG ...]`: the packages behind an OpenAI-compatible HTTP server.

    edgeformer serve shakespeare m30k-en-de --port 8000
    curl localhost:8000/v1/completions -d '{"model": "shakespeare", "prompt": "ROMEO:"}'

A model's name is its folder's (or NAME=PKG's NAME). docs/serve.md has the routes.
"""

from __future__ import annotations

import argparse
import logging
import os

from ..commands import PACKAGE_HELP, add_runtime_arguments, runtime_of
from .app import ServeConfig
from .scheduler import BatchSettings

log = logging.getLogger("edgeformer")
API_KEY_ENV = "EDGEFORMER_API_KEY"


def add_arguments(p: argparse.ArgumentParser, command: str = "serve") -> None:
    p.add_argument("packages", nargs="+", metavar="PKG",
                   help=f"{PACKAGE_HELP}; NAME=PKG serves it as NAME")  # fmt: skip
    h = p.add_argument_group("server")
    h.add_argument("--host", default="127.0.0.1", help="address to listen on (default: "
                   "127.0.0.1, this machine only; 0.0.0.0: every interface)")  # fmt: skip
    h.add_argument("--port", type=int, default=8000,
                   help="the port to listen on; 0: a free one (default: 8000)")  # fmt: skip
    h.add_argument("--replicas", type=int, default=0, metavar="N",
                   help="serve N copies on a local Ray Serve instance (the ray extra), each its "
                   "own process with its own batch (default: 0, one process, no Ray)")  # fmt: skip
    h.add_argument("--api-key", default=None, metavar="KEY",
                   help=f"requests to /v1/ need 'Authorization: Bearer KEY' (default: "
                   f"${API_KEY_ENV}, else none)")  # fmt: skip
    add_serving_arguments(p)


def add_serving_arguments(p: argparse.ArgumentParser) -> None:
    """How the packages run and batch: serve's and serve-bench's flags (the runtime's are
    every command's: runtime/commands.py add_runtime_arguments)."""
    b = p.add_argument_group("continuous batching (language models; translators: a row per text)")
    b.add_argument("--context", type=int, default=0, metavar="N",
                   help="cache positions per request: prompt + new tokens (default: the "
                   "model's max_len, at most 4096)")  # fmt: skip
    b.add_argument("--prefix-cache-mb", type=float, default=256.0, metavar="MB",
                   help="K/V memory kept for prefix caching, least recently used evicted "
                   "(0: off) (default: 256)")  # fmt: skip
    b.add_argument(
        "--max-waiting",
        type=int,
        default=256,
        metavar="N",
        help="requests that may wait for a row; more get HTTP 503 (default: 256)",
    )
    add_runtime_arguments(p.add_argument_group("runtime"), "serve")


def config_of(args: argparse.Namespace, packages: list[str]) -> ServeConfig:
    """The ServeConfig the flags of add_serving_arguments say."""
    batch = BatchSettings(
        max_batch=args.batch_size, context=args.context, prefix_cache_mb=args.prefix_cache_mb,
        max_waiting=args.max_waiting,
    )  # fmt: skip
    return ServeConfig(
        tuple(packages), batch, runtime_of(args), args.truncate,
        getattr(args, "api_key", None) or os.environ.get(API_KEY_ENV) or None,
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from .app import create_app

    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port {args.port} must be in [0, 65535]")
    config = config_of(args, args.packages)
    if args.replicas:
        from . import ray_app

        log.info("serving %s with %d Ray Serve replicas on http://%s:%d",
                 ", ".join(args.packages), args.replicas, args.host, args.port)  # fmt: skip
        ray_app.run(config, args.host, args.port, args.replicas)
        return 0
    app = create_app(config)
    log.info("serving %s on http://%s:%d", ", ".join(args.packages), args.host, args.port)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
