"""`edgeformer serve` as a user starts it, asked with curl: one completion, one stream."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

if shutil.which("curl") is None:
    pytest.skip("needs curl", allow_module_level=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def curl(*args: str) -> str:
    out = subprocess.run(["curl", "-sS", "--max-time", "30", *args], capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def cli_server():
    port = free_port()
    edgeformer = Path(sys.executable).with_name("edgeformer")
    cmd = [str(edgeformer), "serve", "shakespeare", "--port", str(port), "--threads", "1",
           "--api-key", "k1"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "EDGEFORMER_API_KEY": ""})  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(
                f"edgeformer serve did not start: {proc.stdout.read() if proc.stdout else ''}"
            )
        time.sleep(0.1)
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_curl_completion_and_stream(cli_server):
    from edgeformer.runtime import Generator

    want = Generator("shakespeare", threads=1).generate("ROMEO:", max_new_tokens=10)
    body = json.dumps({"model": "shakespeare", "prompt": "ROMEO:", "max_tokens": 10,
                       "temperature": 0})  # fmt: skip
    auth = ["-H", "Authorization: Bearer k1", "-H", "Content-Type: application/json"]
    whole = json.loads(curl(*auth, "-d", body, f"{cli_server}/v1/completions"))
    assert whole["choices"][0]["text"] == want
    stream = json.dumps({**json.loads(body), "stream": True})
    lines = curl("-N", *auth, "-d", stream, f"{cli_server}/v1/completions").splitlines()
    events = [line[len("data: ") :] for line in lines if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1]) == want
    denied = json.loads(curl("-d", body, f"{cli_server}/v1/completions"))
    assert denied["error"]["code"] == "invalid_api_key"


def test_serve_bench_writes_its_table_and_json(tmp_path):
    out = tmp_path / "bench.json"
    edgeformer = Path(sys.executable).with_name("edgeformer")
    cmd = [str(edgeformer), "serve-bench", "shakespeare", "--clients", "1,2", "--requests", "4",
           "--max-tokens", "4", "--threads", "1", "--rounds", "1", "--turns", "3",
           "--out", str(out)]  # fmt: skip
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "| clients | requests/s |" in run.stdout
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert [r["clients"] for r in rows] == [1, 2]
    assert all(r["requests"] == 4 and r["tokens_per_s"] > 0 for r in rows)
    assert rows[0]["speedup"] == 1.0
    turns = result["turns"]  # each turn's prompt starts with the previous turn's: cached
    assert [t["turn"] for t in turns] == [1, 2, 3] and turns[0]["cached_tokens"] == 0
    for before, turn in zip(turns, turns[1:]):  # the previous prompt, and any reply token
        cached = turn["cached_tokens"]  # that matched the next message's
        assert before["prompt_tokens"] <= cached < turn["prompt_tokens"]


def test_serve_bench_against_another_server(tmp_path):
    """--against NAME=URL: the same requests to another OpenAI-compatible server (here a
    second one of ours, serving the model as NAME), its own rows and speedups."""
    from edgeformer.runtime import RuntimeSettings
    from edgeformer.runtime.serve import bench
    from edgeformer.runtime.serve.app import ServeConfig, create_app, running

    out = tmp_path / "bench.json"
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    with running(create_app(ServeConfig(("peer=shakespeare",),
                                        runtime=RuntimeSettings(threads=1)))) as peer:  # fmt: skip
        args = parser.parse_args(["shakespeare", "--clients", "1,2", "--requests", "3",
                                  "--max-tokens", "4", "--threads", "1", "--rounds", "1",
                                  "--turns", "0", "--against", f"peer={peer}",
                                  "--out", str(out)])  # fmt: skip
        assert bench.run(args) == 0
    result = json.loads(out.read_text())
    rows = result["against"]["peer"]["rows"]
    assert [r["clients"] for r in rows] == [1, 2] and rows[0]["speedup"] == 1.0
    assert all(r["requests"] == 3 and r["tokens_per_s"] > 0 for r in rows + result["rows"])
    with pytest.raises(ValueError, match="NAME=http"):
        bench.peers_of(parser.parse_args(["shakespeare", "--against", "localhost:8000"]))
