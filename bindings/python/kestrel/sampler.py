"""Sampling options and the ``Sampler`` wrapper (``kestrel_sampler_*``) for hand-written loops."""

from __future__ import annotations

import ctypes
import random
import weakref
from array import array
from typing import Any, Mapping, Optional, Sequence, Union

from . import _structs as S
from ._handles import Owned
from ._lib import lib, new_options
from .errors import check

Logits = Union["array[float]", Sequence[float]]


def sampler_options(
    temperature: Optional[float] = None,
    top_k: Optional[int] = None,
    top_p: Optional[float] = None,
    min_p: Optional[float] = None,
    repeat_penalty: Optional[float] = None,
    presence_penalty: Optional[float] = None,
    frequency_penalty: Optional[float] = None,
    penalty_last_n: Optional[int] = None,
    seed: Optional[int] = None,
    logit_bias: Optional[Mapping[int, float]] = None,
) -> tuple[S.SamplerOptions, list[Any]]:
    """A filled ``kestrel_sampler_options`` and the buffers it points into (keep them alive).

    ``None`` keeps the library default (temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, no
    penalties), except ``seed``: ``None`` draws a random seed, like ``kestrel run`` without
    ``--seed``. ``temperature <= 0`` is greedy.
    """
    so = new_options(S.SamplerOptions)
    for name, value in (
        ("temperature", temperature),
        ("top_k", top_k),
        ("top_p", top_p),
        ("min_p", min_p),
        ("repeat_penalty", repeat_penalty),
        ("presence_penalty", presence_penalty),
        ("frequency_penalty", frequency_penalty),
        ("penalty_last_n", penalty_last_n),
    ):
        if value is not None:
            setattr(so, name, value)
    so.seed = random.getrandbits(64) if seed is None else int(seed) & 0xFFFFFFFFFFFFFFFF
    keep: list[Any] = []
    if logit_bias:
        n = len(logit_bias)
        toks = (S.c_token * n)(*[int(t) for t in logit_bias])
        vals = (ctypes.c_float * n)(*[float(v) for v in logit_bias.values()])
        so.logit_bias_tokens = ctypes.cast(toks, ctypes.POINTER(S.c_token))
        so.logit_bias_values = ctypes.cast(vals, ctypes.POINTER(ctypes.c_float))
        so.n_logit_bias = n
        keep += [toks, vals]
    return so, keep


def float_buffer(logits: Logits) -> tuple[Any, int]:
    """A ``float*`` view of ``logits`` (no copy for a writable ``array('f')``) and its length."""
    if isinstance(logits, array) and logits.typecode == "f":
        n = len(logits)
        return (ctypes.c_float * n).from_buffer(logits), n
    n = len(logits)
    return (ctypes.c_float * n)(*logits), n


class Sampler:
    """A sampler chain with its own RNG (``kestrel_sampler``); one thread at a time.

    Takes the keyword arguments of :func:`sampler_options`.
    """

    def __init__(self, **options: Any) -> None:
        so, keep = sampler_options(**options)
        out = ctypes.c_void_p()
        check(lib().kestrel_sampler_new(ctypes.byref(so), ctypes.byref(out)))
        del keep  # the options (logit bias included) are copied by kestrel_sampler_new
        self._owned = Owned(out.value or 0, "kestrel_sampler_free", "sampler")
        self._finalizer = weakref.finalize(self, self._owned.release)

    def sample(self, logits: Logits) -> int:
        """Picks a token from ``logits`` (an ``array('f')`` or a sequence of floats) and records it."""
        buf, n = float_buffer(logits)
        tok = S.c_token()
        with self._owned.use() as p:
            check(lib().kestrel_sampler_sample(p, buf, n, ctypes.byref(tok)))
        return int(tok.value)

    def sample_context(self, context: Any, i: int = -1) -> int:
        """Samples from row ``i`` of ``context``'s last decode without copying the logits."""
        tok = S.c_token()
        with context._use() as cp, self._owned.use() as p:
            ptr, n = context._logits_at(cp, i)
            check(lib().kestrel_sampler_sample(p, ptr, n, ctypes.byref(tok)))
        return int(tok.value)

    def accept(self, token: int) -> None:
        """Records ``token`` (e.g. of the prompt) for the penalties without sampling."""
        with self._owned.use() as p:
            lib().kestrel_sampler_accept(p, int(token))

    def reset(self) -> None:
        """Forgets the recorded tokens (a grammar keeps its state)."""
        with self._owned.use() as p:
            lib().kestrel_sampler_reset(p)

    def set_grammar(
        self, model: Any, grammar: Optional[str] = None, json_schema: Optional[str] = None, reply: Any = None
    ) -> None:
        """From the next sample on, only tokens of ``model``'s vocabulary that a GBNF ``grammar``
        or a ``json_schema`` (text) allows, or ``reply``'s forced tool call (a ``ReplyParser``);
        nothing given: unconstrained again (``kestrel_sampler_set_grammar``)."""
        enc = lambda s: None if s is None else s.encode("utf-8")  # noqa: E731
        with model._use() as mp, self._owned.use() as p:
            check(lib().kestrel_sampler_set_grammar(p, mp, enc(grammar), enc(json_schema), reply.ptr if reply else None))

    def close(self) -> None:
        """Frees the sampler (idempotent)."""
        self._finalizer()

    def __enter__(self) -> "Sampler":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
