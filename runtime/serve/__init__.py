"""`edgeformer serve`: model packages behind an OpenAI-compatible HTTP server (docs/serve.md).

Language models decode in one continuous batch each (scheduler.py), with prefix caching
(prefix_cache.py); the HTTP side is a Starlette app (app.py) run by uvicorn. Its dependencies
are the `serve` extra: pip install 'edgeformer[cpu,serve]'.
"""

from __future__ import annotations

from .prefix_cache import PrefixCache
from .scheduler import BatchScheduler, BatchSettings

__all__ = ["BatchScheduler", "BatchSettings", "PrefixCache"]
