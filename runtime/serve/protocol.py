"""The OpenAI API's request bodies -> the project's decoding options, and its error objects.

A request's sampling fields map onto core.options.GenerationOptions (max_tokens ->
max_new_tokens, temperature 0 -> greedy, ...); GenerationOptions validates them, and
Model.prepare checks them against the model, once per request, as for every other caller.
What is the API's own (its ranges of temperature, n, logprobs; the fields it has and this
server does not support) is checked here, each with one message naming the field.
response_format (json_object, json_schema) is GenerationOptions' own option: the output follows
it by runtime/structured.py's token masks. tools / tool_choice / parallel_tool_calls are checked
by runtime/tools.py's tool_use, as Generator.chat_message checks them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from ...core.options import GenerationOptions

MAX_N = 16  # choices per request (each is a row of the batch)
MAX_STOPS = 4  # stop strings (the OpenAI API's limit)
MAX_LOGPROBS = {"completion": 5, "chat": 20}  # top alternatives per token

# the API's name -> GenerationOptions' (vLLM's extra names too: top_k, min_tokens, ...)
RENAMED = {
    "max_tokens": "max_new_tokens",
    "max_completion_tokens": "max_new_tokens",
    "min_tokens": "min_new_tokens",
    "seed": "seed",
    "top_p": "top_p",
    "top_k": "top_k",
    "repetition_penalty": "repetition_penalty",
    "ignore_eos": "ignore_eos",
    "stop": "stop",
}
OPTION_FIELD = {v: k for k, v in RENAMED.items() if k != "max_completion_tokens"}
# fields a client may send that change nothing here
IGNORED = {"user", "metadata", "store", "service_tier", "stream_options", "prompt_cache_key",
           "safety_identifier"}  # fmt: skip
# fields of the API this server does not implement: refused unless they ask for nothing
UNSUPPORTED_UNLESS = {
    "presence_penalty": 0, "frequency_penalty": 0, "logit_bias": None, "best_of": 1,
    "echo": False, "suffix": None, "functions": None, "function_call": None, "modalities": None,
    "audio": None, "prediction": None, "reasoning_effort": None, "web_search_options": None,
}  # fmt: skip
COMMON = {"model", "stream", "n", "temperature", "response_format", *RENAMED}
FIELDS = {
    "completion": COMMON | {"prompt", "logprobs"},
    "chat": COMMON | {"messages", "logprobs", "top_logprobs", "chat_template_kwargs", "tools",
                      "tool_choice", "parallel_tool_calls"},
    "translation": {"model", "input", "source_lang", "target_lang", "temperature", "top_p",
                    "top_k", "seed", "max_tokens", "num_beams", "n"},
}  # fmt: skip


class APIError(Exception):
    """An error the client gets as the OpenAI API's error object, with its HTTP status."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, kind: str = "invalid_request_error"):  # fmt: skip
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = (
            status, message, param, code, kind
        )  # fmt: skip

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param,
                          "code": self.code}}  # fmt: skip


def bad(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param, code)


def parse_body(raw: bytes) -> dict:
    """The request's JSON object (400 for anything else)."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise bad(f"the request body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise bad(f"the request body must be a JSON object (got {type(body).__name__})")
    return body


def check_fields(body: Mapping, kind: str) -> None:
    """Unknown fields and unsupported ones that ask for something: 400 naming the field."""
    for key, value in body.items():
        if key in UNSUPPORTED_UNLESS:
            if value not in (UNSUPPORTED_UNLESS[key], None):
                raise bad(f"{key} is not supported by this server", key)
        elif key not in FIELDS[kind] and key not in IGNORED:
            raise bad(f"unrecognized request argument: {key}", key)


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def choices_asked(body: Mapping) -> int:
    n = body.get("n", 1)
    if n is None:
        return 1
    if not _is_int(n) or not 1 <= n <= MAX_N:
        raise bad(f"n={n!r} must be an integer in [1, {MAX_N}]", "n")
    return n


def top_logprobs_asked(body: Mapping, kind: str) -> int | None:
    """How many alternatives per token to return (None: no logprobs)."""
    limit = MAX_LOGPROBS[kind]
    if kind == "completion":
        k = body.get("logprobs")
        if k is None:
            return None
        if not _is_int(k) or not 0 <= k <= limit:
            raise bad(f"logprobs={k!r} must be an integer in [0, {limit}]", "logprobs")
        return k
    on, k = body.get("logprobs"), body.get("top_logprobs")
    if on is not None and not isinstance(on, bool):
        raise bad(f"logprobs={on!r} must be true or false", "logprobs")
    if k is not None and (not _is_int(k) or not 0 <= k <= limit):
        raise bad(f"top_logprobs={k!r} must be an integer in [0, {limit}]", "top_logprobs")
    if k is not None and not on:
        raise bad("top_logprobs needs logprobs=true", "top_logprobs")
    return (k or 0) if on else None


def decoding_fields(body: Mapping, defaults: GenerationOptions) -> dict[str, Any]:
    """GenerationOptions keyword options from the request's fields (not yet validated: that
    is GenerationOptions', through Model.options). temperature 0 is greedy decoding; a
    temperature above 0 or a top_p or top_k samples. Without any of them, the package's
    generation_config.json decides, as vLLM's server does."""
    out: dict[str, Any] = {}
    for name, option in RENAMED.items():
        value = body.get(name)
        if value is not None:
            out[option] = list(value) if name == "stop" and isinstance(value, list) else value
    stop = out.get("stop")
    if isinstance(stop, list) and len(stop) > MAX_STOPS:
        raise bad(f"stop has {len(stop)} strings: at most {MAX_STOPS}", "stop")
    temperature = body.get("temperature")
    if temperature is not None:
        if not _is_number(temperature) or not 0 <= temperature <= 2:
            raise bad(f"temperature={temperature!r} must be a number in [0, 2]", "temperature")
        if temperature == 0:
            out["sampling"] = False
        else:
            out["sampling"], out["temperature"] = True, float(temperature)
    elif "top_p" in out or "top_k" in out:
        out["sampling"] = True
    if out.get("sampling") is False:  # greedy: the sampling filters do not apply
        out.pop("top_p", None)
        out.pop("top_k", None)
    if body.get("num_beams") is not None:
        out["num_beams"] = body["num_beams"]
    fmt = body.get("response_format")
    if fmt is not None:  # json_object / json_schema: GenerationOptions checks it
        out["response_format"] = fmt
    return out


def options_error(e: ValueError) -> APIError:
    """GenerationOptions' ValueError, with the request's name of the option it names."""
    message = str(e)
    if "response_format" in message or "JSON schema" in message:  # the structured output's
        return bad(message, "response_format")
    for option, field in OPTION_FIELD.items():
        if f"{option}=" in message or message.startswith(f"{option}:"):
            return bad(f"{message} (the request's {field})", field)
    for f in dataclasses.fields(GenerationOptions):
        if f"{f.name}=" in message:
            return bad(message, f.name)
    return bad(message)
