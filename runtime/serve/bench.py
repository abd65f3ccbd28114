"""`edgeformer serve-bench PKG`: the server under 1 / 4 / 16 concurrent clients on loopback.

The same requests (prompts cut from a text, `--max-tokens` new tokens each, ignore_eos so that
every request makes as many) are sent by N clients at once, each streaming its answer; for each
N: requests/s, tokens/s, latency and time to first token (p50 / p99), and tokens/s over the
one-client run (the same requests one by one). Prints a table and writes JSON (--out). The
clients are threads of this process on http.client (stdlib), the server uvicorn on a thread.
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import statistics
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlparse

from ...core.files import atomic_text
from ..commands import PACKAGE_HELP
from .app import create_app, named, running
from .cli import add_serving_arguments, config_of

log = logging.getLogger("edgeformer")
# short (a char LM of 64 positions takes them with 32 new tokens), of different lengths
PROMPTS = ["ROMEO: But soft", "JULIET: O Romeo", "KING: Now is", "HAMLET: To be, or not",
           "First Citizen:", "MENENIUS: There was"]  # fmt: skip


@dataclass
class Sample:
    latency: float  # request sent -> answer complete
    ttft: float  # request sent -> first text chunk
    tokens: int


@dataclass
class Row:
    clients: int
    requests: int
    seconds: float
    requests_per_s: float
    tokens_per_s: float
    latency_p50: float
    latency_p99: float
    ttft_p50: float
    ttft_p99: float
    speedup: float  # tokens/s over the one-client run's


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def one_request(url: str, body: dict) -> Sample:
    """One streamed completion over http.client: its latency, TTFT and tokens."""
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port, timeout=120)
    start = time.perf_counter()
    conn.request("POST", "/v1/completions", json.dumps(body),
                 {"Content-Type": "application/json"})  # fmt: skip
    response = conn.getresponse()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {response.read()[:300]!r}")
    ttft, tokens = None, 0
    for raw in response:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        data = json.loads(line[6:])
        if "error" in data:
            raise RuntimeError(data["error"]["message"])
        if data.get("usage"):
            tokens = data["usage"]["completion_tokens"]
        elif ttft is None and data["choices"] and data["choices"][0]["text"]:
            ttft = time.perf_counter() - start
    latency = time.perf_counter() - start
    conn.close()
    return Sample(latency, ttft if ttft is not None else latency, tokens)


def run_clients(url: str, bodies: list[dict], clients: int) -> tuple[list[Sample], float]:
    """Every body sent once, by `clients` threads each taking the next one: (samples, wall s)."""
    samples: list[Sample] = []
    lock, next_i = threading.Lock(), [0]
    errors: list[BaseException] = []

    def client() -> None:
        while True:
            with lock:
                i = next_i[0]
                next_i[0] += 1
            if i >= len(bodies) or errors:
                return
            try:
                s = one_request(url, bodies[i])
            except BaseException as e:  # noqa: BLE001 - reported after the run
                errors.append(e)
                return
            with lock:
                samples.append(s)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return samples, time.perf_counter() - start


def summary(clients: int, samples: list[Sample], seconds: float, base: float | None) -> Row:
    tokens = sum(s.tokens for s in samples)
    tps = tokens / seconds
    lat, ttft = [s.latency for s in samples], [s.ttft for s in samples]
    return Row(clients, len(samples), seconds, len(samples) / seconds, tps,
               statistics.median(lat), percentile(lat, 99), statistics.median(ttft),
               percentile(ttft, 99), tps / base if base else 1.0)  # fmt: skip


def table(rows: list[Row]) -> str:
    lines = ["| clients | requests/s | tokens/s | x one by one | latency p50 / p99 s | "
             "TTFT p50 / p99 s |", "|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        lines.append(f"| {r.clients} | {r.requests_per_s:.2f} | {r.tokens_per_s:.0f} | "
                     f"{r.speedup:.2f}x | {r.latency_p50:.3f} / {r.latency_p99:.3f} | "
                     f"{r.ttft_p50:.3f} / {r.ttft_p99:.3f} |")  # fmt: skip
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser, command: str = "serve-bench") -> None:
    p.add_argument("package", help=f"{PACKAGE_HELP} (a decoder-only one)")
    p.add_argument(
        "--clients",
        default="1,4,16",
        help="concurrent clients of each run, comma-separated (default: 1,4,16)",
    )
    p.add_argument("--requests", type=int, default=32, metavar="N",
                   help="requests per run (default: 32)")  # fmt: skip
    p.add_argument(
        "--max-tokens",
        type=int,
        default=32,
        metavar="N",
        help="new tokens per request (ignore_eos: all of them) (default: 32)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="FILE",
        help="write the results as JSON there (default: print only)",
    )
    add_serving_arguments(p)
    for action in p._actions:  # the runs repeat their prompts: no prefix cache unless asked
        if action.dest == "prefix_cache_mb":
            action.default = 0.0
            action.help = "K/V memory kept for prefix caching (default: 0, off: every run "
            action.help += "sends the same prompts)"


def run(args: argparse.Namespace) -> int:
    counts = [int(c) for c in args.clients.split(",")]
    if not counts or min(counts) < 1 or args.requests < 1 or args.max_tokens < 1:
        raise ValueError("--clients, --requests and --max-tokens must be >= 1")
    name, _ = named(args.package)
    app = create_app(config_of(args, [args.package]))
    body = {"model": name, "max_tokens": args.max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    bodies = [{**body, "prompt": PROMPTS[i % len(PROMPTS)]} for i in range(args.requests)]
    rows: list[Row] = []
    with running(app) as url:
        run_clients(url, bodies[:2], 1)  # warm-up
        base = None
        for c in [1, *[c for c in counts if c != 1]]:
            samples, seconds = run_clients(url, bodies, c)
            row = summary(c, samples, seconds, base)
            base = base or row.tokens_per_s
            if c in counts:
                rows.append(row)
    print(table(rows))
    if args.out is not None:
        result = {"package": args.package, "requests": args.requests,
                  "max_tokens": args.max_tokens, "rows": [asdict(r) for r in rows]}  # fmt: skip
        with atomic_text(args.out) as f:
            f.write(json.dumps(result, indent=1) + "\n")
    return 0
