"""``KestrelError`` and the helpers that turn C status codes into exceptions."""

from __future__ import annotations

import ctypes
from typing import Callable

from ._lib import lib
from ._structs import Status


class KestrelError(Exception):
    """A Kestrel C API call failed.

    Attributes:
        status: the status name without prefix, e.g. ``"ERR_IO"`` (``kestrel_status_name``).
        code: the numeric ``kestrel_status``.
        message: ``kestrel_last_error()`` read on the failing thread right after the call.
    """

    def __init__(self, code: int, message: str, status: str | None = None) -> None:
        self.code: int = int(code)
        if status is None:
            try:
                status = Status(self.code).name
            except ValueError:
                status = "ERR_UNKNOWN"
        self.status: str = status
        self.message: str = message
        super().__init__(f"{self.status}: {message}" if message else self.status)


def last_error() -> str:
    """``kestrel_last_error()`` of the calling thread, decoded."""
    raw = lib().kestrel_last_error()
    return raw.decode("utf-8", errors="replace") if raw else ""


def error_from_status(code: int, context: str = "") -> KestrelError:
    """Builds the exception for ``code``; call on the failing thread before any other C call."""
    message = last_error()
    name_raw = lib().kestrel_status_name(code)
    name = name_raw.decode("ascii", errors="replace") if name_raw else None
    if context and not message:
        message = context
    return KestrelError(code, message, name)


def check(code: int, context: str = "") -> None:
    """Raises ``KestrelError`` unless ``code`` is ``KESTREL_OK``."""
    if code != Status.OK:
        raise error_from_status(code, context)


def read_text(call: Callable[[ctypes.Array | None, int, ctypes.c_size_t], int], initial: int = 4096) -> str:
    """Runs a ``(buf, cap, *len)`` call, growing the buffer once if needed, and decodes UTF-8.

    ``call(buf, cap, len_ref)`` must return the status.
    """
    return read_bytes(call, initial).decode("utf-8", errors="replace")


def read_bytes(call: Callable[[ctypes.Array | None, int, ctypes.c_size_t], int], initial: int = 4096) -> bytes:
    """Like ``read_text`` but returns the raw bytes."""
    n = ctypes.c_size_t(0)
    cap = initial
    for _ in range(4):  # the size may change between calls only for live stats; retry a little
        buf = ctypes.create_string_buffer(cap)
        st = call(buf, cap, n)
        if st == Status.OK:
            return buf.raw[: n.value]
        if st != Status.ERR_BUFFER_TOO_SMALL:
            raise error_from_status(st)
        cap = n.value + 1
    raise KestrelError(Status.ERR_BUFFER_TOO_SMALL, "the text kept growing while being read")
