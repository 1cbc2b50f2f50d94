"""Chat replies split into content, reasoning and tool calls (``kestrel_reply_parser``): the
chat template's family decides the syntax (docs/TOOLS.md)."""

from __future__ import annotations

import ctypes
import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from . import _structs as S
from ._lib import lib, new_options
from .errors import check, read_text


@dataclass
class ToolCall:
    """One call the model made: ``arguments`` parsed from the JSON it wrote."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class ChatReply:
    """What ``Model.chat(..., tools=...)`` returns."""

    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str = ""  # "stop", "length", "tool_calls", "cancelled"


class ReplyParser:
    """A ``kestrel_reply_parser`` (owned; ``close()`` or use as a context manager)."""

    def __init__(
        self,
        model_ptr: int,
        prompt: str,
        tools: Optional[Sequence[Mapping[str, Any]]],
        tool_choice: Any = "auto",
        parallel_tool_calls: bool = True,
        reasoning_inline: bool = False,
        template: Optional[str] = None,
    ) -> None:
        co = new_options(S.ChatOptions)
        self._keep = [
            None if template is None else template.encode("utf-8"),
            None if tools is None else json.dumps(list(tools), ensure_ascii=False).encode("utf-8"),
        ]
        co.template_source, co.tools_json = self._keep
        if isinstance(tool_choice, Mapping):  # {"type": "function", "function": {"name": ...}}
            tool_choice = tool_choice["function"]["name"]
        flags = (1 if parallel_tool_calls else 0) | (2 if reasoning_inline else 0)
        p = ctypes.c_void_p()
        check(lib().kestrel_reply_parser_new(model_ptr, ctypes.byref(co), prompt.encode("utf-8"),
                                             str(tool_choice).encode("utf-8"), flags, ctypes.byref(p)))
        self.ptr: Optional[int] = p.value

    def grammar(self) -> str:
        """The GBNF a forced tool_choice needs ("" when none)."""
        return read_text(lambda b, c, n: lib().kestrel_reply_parser_grammar(self.ptr, b, c, ctypes.byref(n)))

    def push(self, text: str, final: bool = False) -> dict[str, Any]:
        """What ``text`` adds: {"content", "reasoning_content", "tool_calls"} where they changed."""
        raw = text.encode("utf-8")
        buf = (ctypes.c_char * len(raw)).from_buffer_copy(raw) if raw else None
        n = ctypes.c_size_t()
        cap = 4096 + 2 * len(raw)
        out = ctypes.create_string_buffer(cap)
        st = lib().kestrel_reply_parser_push(self.ptr, buf, len(raw), final, out, cap, ctypes.byref(n))
        if st == S.Status.ERR_BUFFER_TOO_SMALL:  # the delta waits: take it
            out = ctypes.create_string_buffer(n.value + 1)
            st = lib().kestrel_reply_parser_push(self.ptr, None, 0, False, out, n.value + 1, ctypes.byref(n))
        check(st)
        return json.loads(out.raw[: n.value].decode("utf-8"))

    def close(self) -> None:
        if getattr(self, "ptr", None):  # (absent when __init__ failed)
            lib().kestrel_reply_parser_free(self.ptr)
            self.ptr = None

    def __enter__(self) -> "ReplyParser":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


def reply_of(delta: Mapping[str, Any], finish_reason: str) -> ChatReply:
    """A whole reply (one delta with everything) as a ChatReply."""
    calls = [
        ToolCall(c.get("id", ""), c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in delta.get("tool_calls", [])
    ]
    return ChatReply(delta.get("content", ""), delta.get("reasoning_content", ""), calls,
                     "tool_calls" if calls else finish_reason)
