"""``Detokenizer``: streaming token -> text that only ever emits complete UTF-8 characters."""

from __future__ import annotations

import ctypes
import weakref
from typing import TYPE_CHECKING

from ._handles import Owned, release_child
from ._lib import lib
from ._structs import Status
from .errors import check

if TYPE_CHECKING:
    from .model import Model
    from .reply import ReplyParser


class Detokenizer:
    """Push tokens one at a time and get back the text that became complete.

    One thread at a time; closed with its model.
    """

    def __init__(self, model: "Model", render_special: bool = False) -> None:
        out = ctypes.c_void_p()
        with model._use() as mp:
            check(lib().kestrel_detokenizer_new(mp, render_special, ctypes.byref(out)))
            self._owned = Owned(out.value or 0, "kestrel_detokenizer_free", "detokenizer")
            model._handles.adopt(self._owned)
        self._finalizer = weakref.finalize(self, release_child, model._handles, self._owned)
        self._buf = ctypes.create_string_buffer(1 << 14)

    def _call(self, fn_name: str, *args: int) -> str:
        n = ctypes.c_size_t()
        with self._owned.use() as ptr:
            st = getattr(lib(), fn_name)(ptr, *args, self._buf, len(self._buf), ctypes.byref(n))
        if st == Status.ERR_BUFFER_TOO_SMALL:
            # The text stays pending in C and comes first from the next push/flush: a retry with
            # the same token would push it twice. Grow the buffer and fetch the pending text with
            # token -1 (pushes nothing); a library without that keeps it for the next call.
            self._buf = ctypes.create_string_buffer(n.value + 1)
            with self._owned.use() as ptr:
                st = lib().kestrel_detokenizer_push(ptr, -1, self._buf, len(self._buf), ctypes.byref(n))
            if st != Status.OK:
                return ""
        check(st)
        return self._buf.raw[: n.value].decode("utf-8", errors="replace")

    def push(self, token: int) -> str:
        """Adds ``token``; returns the text completed by it (possibly "")."""
        return self._call("kestrel_detokenizer_push", int(token))

    def show_markers(self, reply: "ReplyParser") -> None:
        """Shows the chat family's marker tokens of ``reply`` (a ``ReplyParser``) in the text, as a
        request carrying that parser does (``kestrel_reply_parser_show_markers``)."""
        with self._owned.use() as ptr:
            check(lib().kestrel_reply_parser_show_markers(reply.ptr, ptr))

    def flush(self) -> str:
        """Returns what is left (an incomplete UTF-8 tail as U+FFFD) and resets."""
        return self._call("kestrel_detokenizer_flush")

    def close(self) -> None:
        """Frees it (idempotent)."""
        self._finalizer()
