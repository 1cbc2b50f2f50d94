"""The C engine (``kestrel_engine_*``) behind ``Model.generate/stream/chat``.

Requests run on the engine's worker thread; their callbacks put events into a ``queue.Queue``
that the submitting thread reads. The two ctypes callbacks are module-level objects that live as
long as the module, and ``user`` is a key into ``_pending``, which holds every buffer a request
points to until its ``on_done`` has run: no callback object or buffer can be freed while C may
still use it.
"""

from __future__ import annotations

import codecs
import ctypes
import itertools
import json
import queue
import threading
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence

from . import _structs as S
from ._lib import lib, new_options
from .errors import KestrelError, check, error_from_status, read_text


@dataclass(frozen=True)
class RequestResult:
    """How an engine request ended (``kestrel_request_result``)."""

    finish: S.FinishReason
    status: int
    n_prompt: int
    n_cached: int
    n_generated: int
    n_drafted: int
    n_accepted: int
    message: str = ""


class _Pending:
    """One submitted request: its event queue and everything C points into."""

    __slots__ = ("queue", "keep", "cancelled")

    def __init__(self, keep: list[Any]) -> None:
        self.queue: "queue.Queue[Any]" = queue.Queue()
        self.keep = keep
        self.cancelled = False


_pending: dict[int, _Pending] = {}
_pending_lock = threading.Lock()
_keys = itertools.count(1)


def _on_token_py(token: int, piece: Any, n: int, user: Optional[int]) -> bool:
    try:
        p = _pending.get(user or 0)
        if p is None or p.cancelled:
            return False
        p.queue.put((token, ctypes.string_at(piece, n) if n else b""))
        return True
    except BaseException:  # never let an exception cross into C
        return False


def _on_done_py(result: Any, user: Optional[int]) -> None:
    try:
        with _pending_lock:
            p = _pending.pop(user or 0, None)
        if p is None:
            return
        r = result.contents
        finish = S.FinishReason(r.finish)
        message = ""
        if finish == S.FinishReason.ERROR:
            raw = lib().kestrel_last_error()  # the worker's message, if it left one
            message = raw.decode("utf-8", errors="replace") if raw else ""
        p.queue.put(
            RequestResult(finish, int(r.status), r.n_prompt, r.n_cached, r.n_generated, r.n_drafted, r.n_accepted, message)
        )
    except BaseException:
        pass


_ON_TOKEN = S.TokenFn(_on_token_py)
_ON_DONE = S.DoneFn(_on_done_py)


class RequestStream:
    """The events of one request: iterate for text pieces; ``result`` is set at the end.

    Iterating yields ``str`` pieces (UTF-8 decoded incrementally, so a character split across
    pieces is never broken); ``tokens`` collects the generated token ids as they arrive. A
    request stopped by closing its model raises ``KestrelError`` (ERR_CANCELLED) at the end. Closing it early (or ``cancel()``) cancels the request and waits for
    the engine to let go of it.
    """

    def __init__(self, engine: "Engine", request_id: int, pending: _Pending) -> None:
        self._engine = engine
        self.id = request_id
        self._pending = pending
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.result: Optional[RequestResult] = None
        self.tokens: list[int] = []

    def text(self) -> str:
        """Waits for the end and returns the whole text (what iterating has not yet consumed)."""
        return "".join(self)

    def __iter__(self) -> Iterator[str]:
        while self.result is None:
            item = self._pending.queue.get()
            if isinstance(item, RequestResult):
                self.result = item
                tail = self._decoder.decode(b"", final=True)
                if tail:
                    yield tail
                break
            token, data = item
            if token >= 0:
                self.tokens.append(token)
            text = self._decoder.decode(data)
            if text:
                yield text
        if self.result.finish == S.FinishReason.ERROR:
            msg = self.result.message or "the engine request failed"
            raise KestrelError(self.result.status or S.Status.ERR_INTERNAL, msg)
        if self.result.finish == S.FinishReason.CANCELLED and not self._pending.cancelled:
            raise KestrelError(S.Status.ERR_CANCELLED, "the request was cancelled: its model was closed")

    def cancel(self) -> None:
        """Cancels the request (if still running) and waits until the engine is done with it."""
        if self.result is not None:
            return
        self._pending.cancelled = True
        self._engine.cancel(self.id)
        while self.result is None:
            item = self._pending.queue.get()
            if isinstance(item, RequestResult):
                self.result = item


class Engine:
    """A ``kestrel_engine``: continuous batching of many requests over one model.

    Every method may be called from any thread. The model must outlive the engine.
    """

    def __init__(
        self,
        model_ptr: int,
        n_ctx: int = 0,
        n_parallel: int = 0,
        n_batch: int = 0,
        n_threads: int = 0,
        kv_type: str = "f16",
        kv_type_v: Optional[str] = None,
    ) -> None:
        opts = new_options(S.EngineOptions)
        opts.kv_type = S.kv_type_value(kv_type)
        if kv_type_v is not None:
            opts.kv_type_v = S.kv_type_value(kv_type_v, "kv_type_v")
        if n_ctx:
            opts.n_ctx = n_ctx
        if n_parallel:
            opts.n_parallel = n_parallel
        if n_batch:
            opts.n_batch = n_batch
        if n_threads:
            opts.n_threads = n_threads
        out = ctypes.c_void_p()
        check(lib().kestrel_engine_new(model_ptr, ctypes.byref(opts), ctypes.byref(out)))
        self._ptr: Optional[int] = out.value
        # Held around every call that uses the pointer, so free cannot race submit/cancel.
        self._lock = threading.Lock()

    def submit(
        self,
        prompt: Sequence[int],
        sampling: S.SamplerOptions,
        keep: list[Any],
        max_tokens: int = 128,
        stop: Sequence[str] = (),
        stop_tokens: Sequence[int] = (),
        stop_at_eog: bool = True,
        grammar: Optional[str] = None,
        json_schema: Optional[str] = None,
        reply: Optional[int] = None,
    ) -> RequestStream:
        """Queues a request for ``prompt`` (token ids) and returns its event stream."""
        req = new_options(S.Request)
        n = len(prompt)
        toks = (S.c_token * n)(*prompt)
        req.prompt = ctypes.cast(toks, ctypes.POINTER(S.c_token))
        req.n_prompt = n
        req.max_tokens = max_tokens
        req.sampling = ctypes.pointer(sampling)
        req.stop_at_eog = stop_at_eog
        keep = keep + [req, toks, sampling]
        if stop_tokens:
            st = (S.c_token * len(stop_tokens))(*stop_tokens)
            req.stop_tokens = ctypes.cast(st, ctypes.POINTER(S.c_token))
            req.n_stop_tokens = len(stop_tokens)
            keep.append(st)
        if stop:
            strs = (ctypes.c_char_p * len(stop))(*[s.encode("utf-8") for s in stop])
            req.stop_strings = ctypes.cast(strs, ctypes.POINTER(ctypes.c_char_p))
            req.n_stop_strings = len(stop)
            keep.append(strs)
        if grammar is not None:
            g = grammar.encode("utf-8")
            req.grammar = g
            keep.append(g)
        if json_schema is not None:
            js = json_schema.encode("utf-8")
            req.json_schema = js
            keep.append(js)
        if reply is not None:  # a kestrel_reply_parser: marker tokens shown, a forced call's grammar
            req.reply = reply
        req.on_token = _ON_TOKEN
        req.on_done = _ON_DONE
        key = next(_keys)
        req.user = key
        pending = _Pending(keep)
        with _pending_lock:
            _pending[key] = pending  # before submit: callbacks may run before it returns
        rid = ctypes.c_uint64()
        with self._lock:
            if not self._ptr:
                st = S.Status.ERR_INVALID_ARGUMENT
                err: Optional[KestrelError] = KestrelError(st, "the engine (or its model) is closed")
            else:
                st = lib().kestrel_submit(self._ptr, ctypes.byref(req), ctypes.byref(rid))
                err = error_from_status(st) if st != S.Status.OK else None
        if err is not None:
            with _pending_lock:
                _pending.pop(key, None)
            raise err
        return RequestStream(self, int(rid.value), pending)

    def cancel(self, request_id: int) -> None:
        """Cancels a request; nothing happens if it has already finished."""
        with self._lock:
            if self._ptr:
                lib().kestrel_cancel(self._ptr, request_id)  # ERR_OUT_OF_RANGE: already finished

    def stats(self) -> dict[str, Any]:
        """``kestrel_engine_stats`` as a dict."""
        with self._lock:
            if not self._ptr:
                raise KestrelError(S.Status.ERR_INVALID_ARGUMENT, "the engine is closed")
            ptr = self._ptr
            text = read_text(lambda b, c, n: lib().kestrel_engine_stats(ptr, b, c, ctypes.byref(n)))
        return json.loads(text)

    def close(self) -> None:
        """Cancels every request, waits for the worker and frees the engine (idempotent)."""
        with self._lock:
            ptr, self._ptr = self._ptr, None
            if ptr:
                lib().kestrel_engine_free(ptr)
