"""Servers for the serve tests: the bundled packages (and a copy of the char LM with a chat
template), loaded once per session, served by uvicorn on 127.0.0.1 on a free port."""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("starlette", reason="needs the serve extra (starlette, uvicorn)")
pytest.importorskip("uvicorn", reason="needs the serve extra (starlette, uvicorn)")

from edgeformer.core.files import sha256
from edgeformer.runtime.package import PRETRAINED_DIR

# a plain template over the char LM's characters: "<role>: content" lines, then the reply's
# header (the model's own special tokens are not characters it was trained on)
TEMPLATE = (
    "{% for m in messages %}{{ m['role'] | upper }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}ROMEO:{% endif %}"
)


@pytest.fixture(scope="session")
def chat_package(tmp_path_factory):
    """The bundled shakespeare package with a chat template in its tokenizer_config.json."""
    path = tmp_path_factory.mktemp("serve") / "bard"
    shutil.copytree(PRETRAINED_DIR / "shakespeare", path)
    tokenizer_config = path / "tokenizer_config.json"
    config = json.loads(tokenizer_config.read_text())
    tokenizer_config.write_text(json.dumps({**config, "chat_template": TEMPLATE}))
    package = json.loads((path / "config.json").read_text())
    package["files"]["tokenizer_config.json"] = sha256(tokenizer_config)  # its new checksum
    (path / "config.json").write_text(json.dumps(package))
    return path


@pytest.fixture(scope="session")
def served(chat_package):
    """(base URL, the Server) of one server for the session: shakespeare, bard (chat) and
    the translator m30k-en-de, 4 rows per batch."""
    from edgeformer.runtime.serve.app import ServeConfig, Server, app_of, load_models, running
    from edgeformer.runtime.serve.scheduler import BatchSettings

    config = ServeConfig(("shakespeare", f"bard={chat_package}", "m30k-en-de"),
                         BatchSettings(max_batch=4, prefix_cache_mb=8), threads=1)  # fmt: skip
    server = Server(load_models(config))
    with running(app_of(server)) as url:
        yield url, server


@pytest.fixture(scope="session")
def url(served):
    return served[0]
