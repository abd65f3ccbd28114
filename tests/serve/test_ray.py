"""The same routes on Ray Serve with 2 replicas on a local Ray instance: both answer, and the
answers are the Generator's. One Ray start for the module (~15 s on 2 cores)."""

from __future__ import annotations

import socket

import httpx
import pytest

ray = pytest.importorskip("ray", reason="needs Ray Serve (the ray extra)")
serve = pytest.importorskip("ray.serve", reason="needs Ray Serve (the ray extra)")
openai = pytest.importorskip("openai", reason="needs the openai package (the test extra)")

from edgeformer.runtime import Generator, RuntimeSettings
from edgeformer.runtime.serve.app import ServeConfig
from edgeformer.runtime.serve.ray_app import deployment

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False,
             log_to_driver=False)  # fmt: skip
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        config = ServeConfig(("shakespeare",), runtime=RuntimeSettings(threads=1))
        serve.run(deployment(config, replicas=2, cpus_per_replica=0.5), route_prefix="/")
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


def test_two_replicas_serve_the_same_routes(ray_url):
    pids = {httpx.get(f"{ray_url}/health", timeout=10).json()["pid"] for _ in range(24)}
    assert len(pids) == 2, pids  # both replicas answered
    client = openai.OpenAI(base_url=f"{ray_url}/v1", api_key="none", timeout=30, max_retries=0)
    want = Generator("shakespeare", threads=1).generate("ROMEO:", max_new_tokens=12)
    whole = client.completions.create(model="shakespeare", prompt="ROMEO:", max_tokens=12,
                                      temperature=0)  # fmt: skip
    assert whole.choices[0].text == want
    chunks = client.completions.create(model="shakespeare", prompt="ROMEO:", max_tokens=12,
                                       temperature=0, stream=True)  # fmt: skip
    assert "".join(c.choices[0].text for c in chunks) == want
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nobody", prompt="x")
