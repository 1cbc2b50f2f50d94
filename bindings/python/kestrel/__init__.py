"""Python bindings of Kestrel, an LLM inference runtime (ctypes over ``libkestrel.so``).

    import kestrel

    with kestrel.Model("stories260K-f32.gguf") as model:
        print(model.generate("Once upon a time", max_tokens=32, temperature=0))

High level: ``Model.generate/stream/chat/chat_stream`` (run on the C engine: thread-safe,
concurrent calls are batched together). Low level: ``Context`` (decode + logits + KV cache),
``Sampler``, ``Detokenizer``. Every failure raises ``KestrelError``. The library is found through
``KESTREL_LIBRARY``, next to this package, or the system's library path.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ._engine import Engine, RequestResult, RequestStream
from ._lib import LibraryNotFoundError, api_version, library_path
from ._structs import API_VERSION, FinishReason, LogLevel, Pooling, SpecMode, Status
from .context import Batch, Context
from .detokenizer import Detokenizer
from .errors import KestrelError
from .model import Model, chat_format
from .reply import ChatReply, ReplyParser, ToolCall
from .sampler import Sampler, sampler_options

__version__ = "0.1.0"

try:  # written into the wheel by the build (_kestrel_build.py): where its libkestrel came from
    from . import _build_info
except ImportError:  # the source tree (PYTHONPATH)
    _build_info = None  # type: ignore[assignment]

__all__ = [
    "API_VERSION",
    "Batch",
    "ChatReply",
    "Context",
    "Detokenizer",
    "Engine",
    "FinishReason",
    "KestrelError",
    "LibraryNotFoundError",
    "LogLevel",
    "Model",
    "Pooling",
    "RequestResult",
    "ReplyParser",
    "RequestStream",
    "Sampler",
    "SpecMode",
    "Status",
    "ToolCall",
    "api_version",
    "library_path",
    "render_chat_template",
    "sampler_options",
    "set_log_level",
]


def render_chat_template(
    messages: Sequence[Mapping[str, Any]],
    template: str,
    add_generation_prompt: bool = True,
    *,
    tools: Optional[Sequence[Mapping[str, Any]]] = None,
    bos_token: Optional[str] = None,
    eos_token: Optional[str] = None,
    **extra_context: Any,
) -> str:
    """Renders a chat template without a model (``bos_token``/``eos_token`` undefined unless given)."""
    return chat_format(
        None, messages, add_generation_prompt, template=template, tools=tools,
        bos_token=bos_token, eos_token=eos_token, extra_context=extra_context,
    )


def set_log_level(level: LogLevel | int) -> None:
    """Library log lines below ``level`` are dropped; the rest go to stderr (process-wide)."""
    from ._lib import lib
    from ._structs import LogFn

    lib().kestrel_log_set(LogFn(), None, int(level))
