"""`edgeformer serve-bench PKG`: the server under 1 / 4 / 16 concurrent clients on loopback.

The same requests (prompts cut from a text, `--max-tokens` new tokens each, ignore_eos so that
every request makes as many) are sent by N clients at once, each streaming its answer; for each
N: requests/s, tokens/s, latency and time to first token (p50 / p99), and tokens/s over the
one-client run (the same requests one by one). Then a conversation of --turns turns (each
prompt the previous one, its reply and a new message: token ids), with and without the prefix
cache: each turn's TTFT and the prompt tokens the cache held. Prints tables and writes JSON
(--out). The clients are threads of this process on http.client (stdlib), the server uvicorn
on a thread.

`--against NAME=URL`: another OpenAI-compatible server (llama.cpp's `python -m
llama_cpp.server`, say) gets the same requests, its rounds interleaved with ours, and its own
rows, its speedup over its own one-by-one run. `python -m edgeformer.benchmarks.serve_peers`
runs it against llama.cpp's server on the same model (benchmarks/serve_peers.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import json
import logging
import os
import statistics
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlparse

from ...core.files import atomic_text
from ..commands import PACKAGE_HELP
from .app import ServeConfig, create_app, named, running
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
    cached: int = 0  # prompt tokens the prefix cache held


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
    ttft, usage, chunks, cached = None, None, 0, 0
    for raw in response:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        data = json.loads(line[6:])
        if "error" in data:
            raise RuntimeError(data["error"]["message"])
        if data.get("usage"):
            usage = data["usage"]["completion_tokens"]
            cached = (data["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        elif data.get("choices") and data["choices"][0].get("text"):
            chunks += 1
            if ttft is None:
                ttft = time.perf_counter() - start
    latency = time.perf_counter() - start
    conn.close()
    # a server that sends no usage (llama.cpp's): its chunks, one per token
    tokens = usage if usage is not None else chunks
    return Sample(latency, ttft if ttft is not None else latency, tokens, cached)


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


def summary(clients: int, rounds: list[tuple[list[Sample], float]], base: float | None) -> Row:
    """A client count's rounds: the median round's requests/s and tokens/s (the host is
    noisy), latency and TTFT percentiles over every request of every round."""
    tps = statistics.median(sum(s.tokens for s in r) / sec for r, sec in rounds)
    rps = statistics.median(len(r) / sec for r, sec in rounds)
    samples = [s for r, _ in rounds for s in r]
    lat, ttft = [s.latency for s in samples], [s.ttft for s in samples]
    return Row(clients, len(samples), sum(sec for _, sec in rounds), rps, tps,
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


@dataclass
class Turn:
    turn: int
    prompt_tokens: int
    ttft_cached: float  # with the prefix cache
    cached_tokens: int
    ttft_uncached: float  # without


def conversation(
    url: str, body: dict, turns: int, vocab: int, room: int, seed: int = 0
) -> list[Sample]:
    """A conversation's turns one after the other: each prompt (token ids) is the previous
    prompt, its reply and a new message; the replies are ids chosen here (the tokens a reply
    had may differ: the shared prefix is the previous prompt at least)."""
    step = max(2, min(32, (room - 16) // max(turns, 1)))
    ids = [(7 * i + 3 + seed) % vocab for i in range(16)]
    out = []
    for t in range(turns):
        out.append(one_request(url, {**body, "prompt": ids}))
        ids = ids + [(11 * (t + 1) * j + 5) % vocab for j in range(step)]
    return out


def turns_table(rows: list[Turn]) -> str:
    lines = ["| turn | prompt tokens | TTFT s, prefix cache | its cached tokens | TTFT s, none |",
             "|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        lines.append(f"| {r.turn} | {r.prompt_tokens} | {r.ttft_cached:.4f} | "
                     f"{r.cached_tokens} | {r.ttft_uncached:.4f} |")  # fmt: skip
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
    p.add_argument("--rounds", type=int, default=3, metavar="N",
                   help="rounds of every client count, interleaved; the median round's "
                   "throughput is reported (default: 3)")  # fmt: skip
    p.add_argument("--turns", type=int, default=5, metavar="N",
                   help="turns of the conversation measured with and without the prefix cache "
                   "(0: none) (default: 5)")  # fmt: skip
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="FILE",
        help="write the results as JSON there (default: print only)",
    )
    p.add_argument(
        "--against", action="append", default=[], metavar="NAME=URL",
        help="also send the same requests to the OpenAI-compatible server at URL, as model "
        "NAME (llama.cpp's python -m llama_cpp.server, say), its rounds interleaved with ours "
        "(repeatable) (default: none)",
    )  # fmt: skip
    add_serving_arguments(p)
    for action in p._actions:  # the runs repeat their prompts: no prefix cache unless asked
        if action.dest == "prefix_cache_mb":
            action.default = 0.0
            action.help = "K/V memory kept for prefix caching (default: 0, off: every run "
            action.help += "sends the same prompts)"


def peers_of(args: argparse.Namespace) -> dict[str, str]:
    """--against NAME=URL -> {NAME: URL}."""
    peers = {}
    for spec in args.against:
        name, sep, url = spec.partition("=")
        if not sep or not name or not url.startswith(("http://", "https://")):
            raise ValueError(f"--against {spec!r}: give NAME=http://HOST:PORT")
        peers[name] = url.rstrip("/")
    return peers


def measure(
    servers: dict[str, str], bodies: list[dict], levels: list[int], rounds: int
) -> dict[str, dict[int, list[tuple[list[Sample], float]]]]:
    """Every server ({model name: base URL}) under each client count, `rounds` times,
    interleaved (each round: every server at every level), after a warm-up; the bodies are
    sent with each server's model name."""
    out: dict[str, dict[int, list[tuple[list[Sample], float]]]] = {
        name: {c: [] for c in levels} for name in servers
    }
    sent = {name: [{**b, "model": name} for b in bodies] for name in servers}
    for name, url in servers.items():
        run_clients(url, sent[name][:2], 1)  # warm-up
    for _ in range(rounds):  # interleaved: each level and server sees the same host load
        for name, url in servers.items():
            for c in levels:
                out[name][c].append(run_clients(url, sent[name], c))
    return out


def rows_of(rounds: dict[int, list[tuple[list[Sample], float]]], counts: list[int]) -> list[Row]:
    """The summary rows of one server's rounds, speedups over its one-client run."""
    rows, base = [], None
    for c in rounds:  # the one-client level first (measure's levels)
        row = summary(c, rounds[c], base)
        base = base or row.tokens_per_s
        if c in counts:
            rows.append(row)
    return rows


def run(
    args: argparse.Namespace, peers: dict[str, str] | None = None,
    prompts: list[str] | None = None,
) -> int:  # fmt: skip
    """The bench; `peers` (besides --against's) and `prompts` (default: PROMPTS) are
    benchmarks/serve_peers.py's."""
    counts = [int(c) for c in args.clients.split(",")]
    if not counts or min(counts) < 1 or min(args.requests, args.max_tokens, args.rounds) < 1:
        raise ValueError("--clients, --requests, --max-tokens and --rounds must be >= 1")
    peers = {**peers_of(args), **(peers or {})}
    name, _ = named(args.package)
    if name in peers:
        raise ValueError(f"--against {name}=...: {name} is the package's name")
    config = config_of(args, [args.package])
    app = create_app(config)
    n = args.max_tokens  # min_tokens: the peers' way to make every request as long
    body = {"model": name, "max_tokens": n, "min_tokens": n, "temperature": 0,
            "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    texts = prompts or PROMPTS
    bodies = [{**body, "prompt": texts[i % len(texts)]} for i in range(args.requests)]
    levels = [1, *[c for c in counts if c != 1]]
    with running(app) as url:
        measured = measure({name: url, **peers}, bodies, levels, args.rounds)
    rows = rows_of(measured[name], counts)
    against = {peer: rows_of(measured[peer], counts) for peer in peers}
    print(table(rows))
    for peer, peer_rows in against.items():
        print(f"\n{peer} ({peers[peer]}), the same requests:")
        print(table(peer_rows))
    turns = measure_turns(args, config, body) if args.turns > 0 else []
    if turns:
        print()
        print(turns_table(turns))
    if args.out is not None:
        result = {"package": args.package, "requests": args.requests, "rounds": args.rounds,
                  "load_average": os.getloadavg()[0], "cpus": os.cpu_count(),
                  "threads": config.runtime.threads, "max_tokens": args.max_tokens,
                  "prompts": texts, "rows": [asdict(r) for r in rows],
                  "against": {p: {"url": peers[p], "rows": [asdict(r) for r in r_]}
                              for p, r_ in against.items()},
                  "turns": [asdict(t) for t in turns]}  # fmt: skip
        with atomic_text(args.out) as f:
            f.write(json.dumps(result, indent=1) + "\n")
    return 0


def measure_turns(args: argparse.Namespace, config: ServeConfig, body: dict) -> list[Turn]:
    """The conversation on a server with a prefix cache and on one without."""
    from ..package import load_package

    m = load_package(named(args.package)[1]).config.model
    room = min(m.max_len, config.batch.context or m.max_len) - args.max_tokens
    body = {**body, "ignore_eos": True}
    kept = dataclasses.replace(config.batch, prefix_cache_mb=config.batch.prefix_cache_mb or 64)
    runs = []  # per server: rounds of conversations, each new (other ids: nothing cached)
    for batch in (kept, dataclasses.replace(config.batch, prefix_cache_mb=0)):
        with running(create_app(dataclasses.replace(config, batch=batch))) as url:
            conversation(url, body, 2, m.vocab_size, room, seed=100)  # warm-up
            runs.append([conversation(url, body, args.turns, m.vocab_size, room, seed=r + 1)
                         for r in range(args.rounds)])  # fmt: skip
    step = max(2, min(32, (room - 16) // args.turns))

    def ttft(rounds: list[list[Sample]], t: int) -> float:
        return statistics.median(r[t].ttft for r in rounds)

    return [Turn(t + 1, 16 + t * step, ttft(runs[0], t), runs[0][0][t].cached, ttft(runs[1], t))
            for t in range(args.turns)]  # fmt: skip
