"""Owned C pointers and the model's tree of dependents, freed in a safe order.

Every C call on a handle runs inside ``use()``, and ``release()`` first refuses new users, then
waits for the running ones, then frees: closing an object while another thread is using it
raises ``KestrelError`` ("... is closed") in that thread instead of crashing the process.

A model must outlive its contexts, detokenizers and engine. ``ModelHandles.release`` frees the
dependents first, then the model; it is what ``Model.close()`` and the model's
``weakref.finalize`` (which also runs at interpreter exit, before modules are torn down) call.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

from ._lib import lib
from ._structs import Status


def closed_error(what: str) -> Exception:
    from .errors import KestrelError

    return KestrelError(Status.ERR_INVALID_ARGUMENT, f"the {what} is closed")


class Owned:
    """A C pointer freed once by the named ``kestrel_*_free`` function."""

    def __init__(self, ptr: int, free_name: str, what: str) -> None:
        self.ptr: Optional[int] = ptr
        self.what = what
        self._free_name = free_name
        self._cond = threading.Condition()
        self._users = 0
        self._closing = False

    @property
    def closed(self) -> bool:
        return self._closing or not self.ptr

    @contextmanager
    def use(self) -> Iterator[int]:
        """Yields the pointer, which stays valid until the block ends; raises when closed."""
        with self._cond:
            if self._closing or not self.ptr:
                raise closed_error(self.what)
            self._users += 1
            ptr = self.ptr
        try:
            yield ptr
        finally:
            self._leave()

    def _leave(self) -> None:
        with self._cond:
            self._users -= 1
            if self._users == 0:
                self._cond.notify_all()

    def release(self) -> None:
        """Frees the pointer once no call is using it (idempotent, thread-safe)."""
        with self._cond:
            if self._closing:
                return
            self._closing = True
            while self._users:
                self._cond.wait()
            ptr, self.ptr = self.ptr, None
        if ptr:
            getattr(lib(), self._free_name)(ptr)


class ModelHandles(Owned):
    """The model pointer plus what depends on it: an engine and child objects (contexts, ...)."""

    def __init__(self, ptr: int) -> None:
        super().__init__(ptr, "kestrel_model_free", "model")
        self.engine: Any = None  # an _engine.Engine, created lazily
        self.children: set[Owned] = set()
        self.tree_lock = threading.Lock()
        self.tree_closed = False

    @property
    def closed(self) -> bool:
        return self.tree_closed or super().closed

    def adopt(self, child: Owned) -> None:
        """Registers a dependent; frees it and raises if the model is being closed."""
        with self.tree_lock:
            if not self.tree_closed:
                self.children.add(child)
                return
        child.release()
        raise closed_error(self.what)

    def engine_or_create(self, create: Callable[[], Any]) -> Any:
        """The engine, made by ``create()`` on first use (under the tree lock)."""
        with self.tree_lock:
            if self.tree_closed:
                raise closed_error(self.what)
            if self.engine is None:
                self.engine = create()
            return self.engine

    def disown(self, child: Owned) -> None:
        """Frees ``child`` and forgets it.

        Once out of ``children``, a concurrent ``release()`` no longer frees the child first, so
        the child holds the model (as a user) until its own free is done: the model is never
        freed before a dependent (``kestrel_context_free`` on a freed model crashed).
        """
        with self.tree_lock:
            self.children.discard(child)
            with self._cond:
                self._users += 1
        try:
            child.release()
        finally:
            self._leave()

    def release(self) -> None:
        with self.tree_lock:
            self.tree_closed = True
            children, self.children = list(self.children), set()
            engine, self.engine = self.engine, None
        if engine is not None:
            engine.close()
        for child in children:
            child.release()
        super().release()


def release_child(parent: ModelHandles, child: Owned) -> None:
    """Finalizer of a model's dependent object."""
    parent.disown(child)
