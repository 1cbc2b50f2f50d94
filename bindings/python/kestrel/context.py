"""``Context`` (``kestrel_context``: a KV cache for hand-written decode loops) and ``Batch``."""

from __future__ import annotations

import ctypes
import json
import weakref
from array import array
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ContextManager, Optional, Sequence, Union

from . import _structs as S
from ._handles import Owned, release_child
from ._lib import lib, new_options
from .errors import check, read_text

if TYPE_CHECKING:
    from .model import Model


@dataclass
class Batch:
    """Tokens to decode, possibly of several sequences (``kestrel_batch``).

    ``positions`` None continues each sequence from its last position, ``seq_ids`` None puts every
    token in sequence 0, ``logits`` None asks for the last token's logits only.
    """

    tokens: Sequence[int]
    positions: Optional[Sequence[int]] = None
    seq_ids: Optional[Sequence[int]] = None
    logits: Optional[Sequence[bool]] = None

    def _to_c(self) -> tuple[S.CBatch, list[Any]]:
        n = len(self.tokens)
        b = S.CBatch()
        b.n_tokens = n
        keep: list[Any] = []

        def arr(ctype: Any, values: Optional[Sequence[Any]], name: str) -> Any:
            if values is None:
                return None
            if len(values) != n:
                raise ValueError(f"Batch.{name} has {len(values)} entries for {n} tokens")
            a = (ctype * n)(*values)
            keep.append(a)
            return ctypes.cast(a, ctypes.POINTER(ctype))

        b.tokens = arr(S.c_token, self.tokens, "tokens")
        b.positions = arr(ctypes.c_int32, self.positions, "positions")
        b.seq_ids = arr(ctypes.c_int32, self.seq_ids, "seq_ids")
        b.logits = arr(ctypes.c_bool, self.logits, "logits")
        return b, keep


class Context:
    """A session over a model: KV cache and scratch (``kestrel_context``).

    Use it from one thread at a time (one Context per thread; they may share a Model). The Model
    must stay open: closing it closes its contexts.

    Args:
        model: the model to run.
        n_ctx: KV cache size in tokens (0: the model's training context).
        n_batch: most tokens per ``decode`` call (0: the library default, 512).
        n_seq_max: most distinct sequence ids (0: the default, 1).
        n_threads: CPU threads (0: the model's setting).
        kv_type: the KV cache's K type, and V's unless kv_type_v says: "f16" (default), "q8_0"
            (53% of f16's memory), "q4_0" (28%), "f8_e4m3" (50%) or "f32".
        kv_type_v: V's type (None: kv_type's).
    """

    def __init__(
        self,
        model: "Model",
        n_ctx: int = 0,
        n_batch: int = 0,
        n_seq_max: int = 0,
        n_threads: int = 0,
        kv_type: str = "f16",
        kv_type_v: Optional[str] = None,
    ) -> None:
        opts = new_options(S.ContextOptions)
        opts.kv_type = S.kv_type_value(kv_type)
        if kv_type_v is not None:
            opts.kv_type_v = S.kv_type_value(kv_type_v, "kv_type_v")
        for name, value in (("n_ctx", n_ctx), ("n_batch", n_batch), ("n_seq_max", n_seq_max), ("n_threads", n_threads)):
            if value:
                setattr(opts, name, value)
        out = ctypes.c_void_p()
        with model._use() as mp:
            check(lib().kestrel_context_new(mp, ctypes.byref(opts), ctypes.byref(out)))
            self._owned = Owned(out.value or 0, "kestrel_context_free", "context")
            model._handles.adopt(self._owned)
        self.model = model
        self._finalizer = weakref.finalize(self, release_child, model._handles, self._owned)

    def _use(self) -> ContextManager[int]:
        """The context pointer, valid inside the ``with`` block (raises when closed)."""
        return self._owned.use()

    def close(self) -> None:
        """Frees the context (idempotent)."""
        self._finalizer()

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def n_ctx(self) -> int:
        """The KV cache size in tokens."""
        with self._use() as p:
            return int(lib().kestrel_context_n_ctx(p))

    @property
    def backend(self) -> str:
        """The backend it runs on: "cpu", "cuda" or "ref"."""
        with self._use() as p:
            raw = lib().kestrel_context_backend(p)
        return raw.decode() if raw else ""

    def decode(self, batch: Union[Batch, Sequence[int]]) -> None:
        """Runs the model over ``batch`` (a ``Batch`` or a list of token ids of sequence 0)."""
        if not isinstance(batch, Batch):
            batch = Batch(list(batch))
        cb, keep = batch._to_c()
        with self._use() as p:
            check(lib().kestrel_decode(p, ctypes.byref(cb)))
        del keep

    @staticmethod
    def _logits_at(ctx_ptr: int, i: int) -> tuple[Any, int]:
        """(float*, n_vocab) of row ``i``; valid while ``ctx_ptr`` is in use and not decoded again."""
        ptr = ctypes.POINTER(ctypes.c_float)()
        n = ctypes.c_int32()
        check(lib().kestrel_get_logits(ctx_ptr, i, ctypes.byref(ptr), ctypes.byref(n)))
        return ptr, int(n.value)

    def logits(self, i: int = -1) -> "array[float]":
        """A copy of the logits of batch row ``i`` of the last decode (negative: from the end)."""
        out = array("f")
        with self._use() as p:
            ptr, n = self._logits_at(p, i)
            out.frombytes(ctypes.string_at(ptr, n * ctypes.sizeof(ctypes.c_float)))
        return out

    def argmax(self, i: int = -1) -> int:
        """The token with the highest logit in row ``i`` (the first one on ties)."""
        row = self.logits(i)
        return max(range(len(row)), key=row.__getitem__)

    def embed(
        self, inputs: Sequence[Sequence[int]], pooling: "S.Pooling | int" = 0, normalize: bool = True
    ) -> list["array[float]"]:
        """One vector per input (token ids): the final states after the output norm, pooled
        (``Pooling.MODEL``: the GGUF's pooling type, else the last token) and, with ``normalize``,
        of unit length. Inputs share decodes, one sequence each; the KV cache is cleared."""
        flat = [t for seq in inputs for t in seq]
        tokens = (S.c_token * max(len(flat), 1))(*flat)
        lengths = (ctypes.c_int32 * max(len(inputs), 1))(*[len(seq) for seq in inputs])
        need = ctypes.c_size_t()
        with self._use() as p:
            st = lib().kestrel_embed(p, tokens, lengths, len(inputs), int(pooling), normalize, None, 0, ctypes.byref(need))
            if st != S.Status.ERR_BUFFER_TOO_SMALL:
                check(st)
            out = (ctypes.c_float * max(need.value, 1))()
            check(lib().kestrel_embed(p, tokens, lengths, len(inputs), int(pooling), normalize, out, need.value,
                                      ctypes.byref(need)))
        width = need.value // max(len(inputs), 1)
        return [array("f", out[i * width:(i + 1) * width]) for i in range(len(inputs))]

    def kv_clear(self) -> None:
        """Empties the KV cache (and its prefix cache)."""
        with self._use() as p:
            lib().kestrel_kv_clear(p)

    def kv_seq_remove(self, seq: int, p0: int = 0, p1: int = -1) -> None:
        """Removes positions [p0, p1) of ``seq`` (p1 < 0: to the end)."""
        with self._use() as p:
            check(lib().kestrel_kv_seq_remove(p, seq, p0, p1))

    def kv_seq_copy(self, src: int, dst: int, p0: int = 0, p1: int = -1) -> None:
        """Makes positions [p0, p1) of ``src`` part of ``dst`` too (blocks are shared)."""
        with self._use() as p:
            check(lib().kestrel_kv_seq_copy(p, src, dst, p0, p1))

    def kv_seq_keep(self, seq: int) -> None:
        """Removes every sequence but ``seq``."""
        with self._use() as p:
            check(lib().kestrel_kv_seq_keep(p, seq))

    def kv_seq_pos_max(self, seq: int = 0) -> int:
        """The largest position cached for ``seq``; -1 if none."""
        with self._use() as p:
            return int(lib().kestrel_kv_seq_pos_max(p, seq))

    def set_profiling(self, on: bool) -> None:
        """Turns per-op profiling on or off."""
        with self._use() as p:
            check(lib().kestrel_context_set_profiling(p, on))

    def profile(self, reset: bool = False) -> list[dict[str, Any]]:
        """Per-op totals since profiling started (slowest first); ``reset`` starts them over."""
        with self._use() as ptr:
            text = read_text(lambda b, c, n: lib().kestrel_context_profile(ptr, reset, b, c, ctypes.byref(n)), 1 << 16)
        return json.loads(text)
