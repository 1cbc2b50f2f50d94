"""llama-cpp-python-shaped conveniences: ``Model.create_completion`` and
``Model.create_chat_completion`` return OpenAI's dicts (``text_completion``, ``chat.completion``)
or, with ``stream=True``, iterators of their chunks (``text_completion``,
``chat.completion.chunk``), built over ``Model.submit`` (the engine behind ``generate``/``chat``).

Keywords are those of llama-cpp-python that Kestrel implements; any other raises ``TypeError``
naming it. Defaults follow llama-cpp-python: completions ``max_tokens=16``, chat
``temperature=0.2`` and ``max_tokens=None`` (until the end of generation or a full context).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional, Union

from ._engine import RequestStream
from ._structs import FinishReason
from .reply import ReplyParser

if TYPE_CHECKING:  # pragma: no cover
    from .model import Messages, Model, Prompt

# Sampling and request keywords shared by both calls, and how they reach Model.submit.
_SAMPLING = ("temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty", "frequency_penalty",
             "repeat_penalty", "logit_bias")
_COMMON = _SAMPLING + ("max_tokens", "stop", "stream", "stream_options", "grammar", "response_format", "model")
COMPLETION_KEYWORDS = frozenset(_COMMON)
CHAT_KEYWORDS = frozenset(_COMMON + ("tools", "tool_choice", "parallel_tool_calls", "template", "chat_context"))
_UNLIMITED = 2**31 - 1  # max_tokens=None: until end of generation or a full context


def check_keywords(fn: str, given: Mapping[str, Any], allowed: frozenset[str]) -> None:
    unknown = sorted(set(given) - allowed)
    if unknown:
        names = ", ".join(repr(k) for k in unknown)
        raise TypeError(f"{fn}() got unsupported keyword argument{'s' if len(unknown) > 1 else ''} {names} "
                        f"(supported: {', '.join(sorted(allowed))})")


def _options(kw: Mapping[str, Any]) -> dict[str, Any]:
    """Model.submit options from the OpenAI/llama-cpp-python keywords."""
    out: dict[str, Any] = {k: kw[k] for k in _SAMPLING if kw.get(k) is not None}
    if "logit_bias" in out:  # OpenAI's keys are token ids as strings
        out["logit_bias"] = {int(t): float(b) for t, b in out["logit_bias"].items()}
    stop = kw.get("stop")
    if stop:
        out["stop"] = [stop] if isinstance(stop, str) else list(stop)
    if kw.get("grammar") is not None:
        out["grammar"] = kw["grammar"]
    fmt = kw.get("response_format")
    if fmt:
        kind = fmt.get("type", "text")
        if kind == "json_object":  # llama-cpp-python's {"type": "json_object", "schema": {...}} too
            out["json_schema"] = fmt.get("schema") or {"type": "object"}
        elif kind == "json_schema":
            out["json_schema"] = (fmt.get("json_schema") or {}).get("schema", True)
        elif kind != "text":
            raise ValueError(f"response_format: unknown type {kind!r} (text, json_object, json_schema)")
    return out


def _max_tokens(value: Optional[int]) -> int:
    return _UNLIMITED if value is None or value <= 0 else int(value)


def _finish(req: RequestStream) -> str:
    r = req.result
    if r is None or r.finish == FinishReason.STOP:
        return "stop"
    return {FinishReason.LENGTH: "length", FinishReason.CANCELLED: "cancelled"}.get(r.finish, "stop")


def _usage(req: RequestStream) -> dict[str, int]:
    r = req.result
    n_prompt = r.n_prompt if r else 0
    n_gen = r.n_generated if r else len(req.tokens)
    return {"prompt_tokens": n_prompt, "completion_tokens": n_gen, "total_tokens": n_prompt + n_gen}


def _head(kind: str, prefix: str, model: "Model", kw: Mapping[str, Any]) -> dict[str, Any]:
    return {"id": f"{prefix}-{uuid.uuid4().hex}", "object": kind, "created": int(time.time()),
            "model": kw.get("model") or model.path}


def _include_usage(kw: Mapping[str, Any]) -> bool:
    return bool((kw.get("stream_options") or {}).get("include_usage"))


# ---- completions ------------------------------------------------------------------------------
def create_completion(model: "Model", prompt: "Prompt", kw: Mapping[str, Any]) -> Any:
    check_keywords("create_completion", kw, COMPLETION_KEYWORDS)
    req = model.submit(prompt, _max_tokens(kw.get("max_tokens", 16)), **_options(kw))
    head = _head("text_completion", "cmpl", model, kw)
    if kw.get("stream"):
        return _completion_chunks(req, head, _include_usage(kw))
    try:
        text = "".join(req)
    finally:
        req.cancel()  # only does something if interrupted
    choice = {"text": text, "index": 0, "logprobs": None, "finish_reason": _finish(req)}
    return {**head, "choices": [choice], "usage": _usage(req)}


def _completion_chunks(req: RequestStream, head: dict[str, Any], usage: bool) -> Iterator[dict[str, Any]]:
    try:
        for piece in req:
            yield {**head, "choices": [{"text": piece, "index": 0, "logprobs": None, "finish_reason": None}]}
        yield {**head, "choices": [{"text": "", "index": 0, "logprobs": None, "finish_reason": _finish(req)}]}
        if usage:
            yield {**head, "choices": [], "usage": _usage(req)}
    finally:
        req.cancel()


# ---- chat completions -------------------------------------------------------------------------
def create_chat_completion(model: "Model", messages: "Messages", kw: Mapping[str, Any]) -> Any:
    check_keywords("create_chat_completion", kw, CHAT_KEYWORDS)
    template, tools = kw.get("template"), kw.get("tools")
    prompt = model.chat_template(messages, True, template=template, tools=tools, **(kw.get("chat_context") or {}))
    ids = model.chat_tokenize(prompt)
    head = _head("chat.completion", "chatcmpl", model, kw)
    parser: Optional[ReplyParser] = None
    options = _options(kw)
    if tools:
        with model._use() as ptr:
            parser = ReplyParser(ptr, prompt, tools, kw.get("tool_choice") or "auto",
                                 kw.get("parallel_tool_calls", True), template=template)
        options["reply"] = parser.ptr
    try:
        req = model.submit(ids, _max_tokens(kw.get("max_tokens")), **options)
    except BaseException:
        if parser is not None:
            parser.close()
        raise
    if kw.get("stream"):
        head["object"] = "chat.completion.chunk"
        return _chat_chunks(req, parser, head, _include_usage(kw))
    try:
        text = "".join(req)
    finally:
        req.cancel()
    message: dict[str, Any] = {"role": "assistant", "content": text}
    finish = _finish(req)
    if parser is not None:
        with parser:
            delta = parser.push(text, final=True)
        message = _message(delta)
        if message.get("tool_calls"):
            finish = "tool_calls"
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
    return {**head, "choices": [choice], "usage": _usage(req)}


def _message(delta: Mapping[str, Any]) -> dict[str, Any]:
    """A whole reply's delta as an assistant message (content None when it only calls tools)."""
    calls = [{"id": c.get("id", ""), "type": "function", "function": dict(c["function"])}
             for c in delta.get("tool_calls", [])]
    msg: dict[str, Any] = {"role": "assistant", "content": delta.get("content") or (None if calls else "")}
    if delta.get("reasoning_content"):
        msg["reasoning_content"] = delta["reasoning_content"]
    if calls:
        msg["tool_calls"] = calls
    return msg


def _chat_chunks(req: RequestStream, parser: Optional[ReplyParser], head: dict[str, Any],
                 usage: bool) -> Iterator[dict[str, Any]]:
    def chunk(delta: Mapping[str, Any], finish: Union[str, None] = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": dict(delta), "logprobs": None, "finish_reason": finish}]}

    called = False
    try:
        yield chunk({"role": "assistant", "content": ""})
        for piece in req:
            delta = parser.push(piece) if parser is not None else {"content": piece}
            called = called or bool(delta.get("tool_calls"))
            if delta:
                yield chunk(delta)
        if parser is not None:
            delta = parser.push("", final=True)
            called = called or bool(delta.get("tool_calls"))
            if delta:
                yield chunk(delta)
        yield chunk({}, "tool_calls" if called else _finish(req))
        if usage:
            yield {**head, "choices": [], "usage": _usage(req)}
    finally:
        req.cancel()
        if parser is not None:
            parser.close()
