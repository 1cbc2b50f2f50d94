"""``Model``: a loaded GGUF model with tokenizer, chat templates and text generation."""

from __future__ import annotations

import ctypes
import json
import os
import weakref
from typing import Any, Callable, ContextManager, Iterator, Mapping, Optional, Sequence, Union

from . import _structs as S
from . import completions
from ._engine import Engine, RequestStream
from ._handles import ModelHandles
from ._lib import lib, new_options
from .context import Context
from .detokenizer import Detokenizer
from .errors import KestrelError, check, read_bytes, read_text
from .reply import ChatReply, ReplyParser, reply_of
from .sampler import sampler_options

Prompt = Union[str, Sequence[int]]
Messages = Sequence[Mapping[str, Any]]


class Model:
    """A model loaded from a GGUF file (``kestrel_model``); immutable and shareable by threads.

    Args:
        path: the GGUF file.
        backend: "auto" (default), "cpu" or "cuda".
        n_threads: CPU threads (0: all physical cores).
        use_mmap: map the file (default True) instead of reading it.
        vocab_only: load only the vocabulary (tokenize/detokenize, no generation).
        progress: optional ``callable(fraction) -> bool`` called during the load; False cancels.
        n_ctx, n_parallel, n_batch, kv_type, kv_type_v: options of the engine that ``generate``/
            ``stream``/``chat`` run on (created on first use): KV cells shared by all requests (0:
            min(training context, 4096)), requests decoded at once (default 4), tokens per step
            (default 256), the KV cache's K type ("f16" default, "q8_0", "q4_0", "f8_e4m3",
            "f32") and V's (None: K's).

    Raises:
        KestrelError: the file is missing (ERR_IO), malformed (ERR_FORMAT), unsupported, ...

    Use it as a context manager or call ``close()``; an unclosed model is freed when collected
    or at interpreter exit. Closing it closes its contexts and stops its running requests.
    """

    def __init__(
        self,
        path: Union[str, "os.PathLike[str]"],
        *,
        backend: Optional[str] = None,
        n_threads: int = 0,
        use_mmap: bool = True,
        vocab_only: bool = False,
        progress: Optional[Callable[[float], Any]] = None,
        n_ctx: int = 0,
        n_parallel: int = 0,
        n_batch: int = 0,
        kv_type: str = "f16",
        kv_type_v: Optional[str] = None,
    ) -> None:
        S.kv_type_value(kv_type)  # a bad name fails here, not at the first generate
        if kv_type_v is not None:
            S.kv_type_value(kv_type_v, "kv_type_v")
        mo = new_options(S.ModelOptions)
        if backend:
            mo.backend = backend.encode()
        mo.n_threads = int(n_threads)
        mo.use_mmap = bool(use_mmap)
        mo.vocab_only = bool(vocab_only)
        progress_cb: Any = None
        if progress is not None:
            fn = progress

            def _progress(fraction: float, _user: Any) -> bool:
                try:
                    return fn(fraction) is not False
                except BaseException:
                    return False

            progress_cb = S.ProgressFn(_progress)  # alive for the (synchronous) load
            mo.progress = progress_cb
        out = ctypes.c_void_p()
        st = lib().kestrel_model_load(os.fsencode(path), ctypes.byref(mo), ctypes.byref(out))
        check(st)
        del progress_cb
        self.path = os.fspath(path)
        self._engine_opts = {
            "n_ctx": n_ctx, "n_parallel": n_parallel, "n_batch": n_batch, "n_threads": n_threads, "kv_type": kv_type,
            "kv_type_v": kv_type_v,
        }
        self._handles = ModelHandles(out.value or 0)
        # Runs on close(), on collection, or at interpreter exit before module teardown.
        self._finalizer = weakref.finalize(self, self._handles.release)

    # ---- lifetime ------------------------------------------------------------------------
    def close(self) -> None:
        """Stops the engine, closes contexts and detokenizers, then frees the model (idempotent)."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        """True after ``close()``."""
        return self._handles.closed

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<kestrel.Model {self.path!r}{' closed' if self.closed else ''}>"

    def _use(self) -> ContextManager[int]:
        """The model pointer, valid inside the ``with`` block (raises ``KestrelError`` when closed)."""
        return self._handles.use()

    # ---- properties ----------------------------------------------------------------------
    @property
    def n_vocab(self) -> int:
        """Vocabulary size."""
        with self._use() as p:
            return int(lib().kestrel_model_n_vocab(p))

    @property
    def n_ctx_train(self) -> int:
        """The context length the model was trained with."""
        with self._use() as p:
            return int(lib().kestrel_model_n_ctx_train(p))

    @property
    def bos(self) -> Optional[int]:
        """The BOS token id, or None when the vocabulary has none."""
        with self._use() as p:
            t = int(lib().kestrel_model_token_bos(p))
        return None if t < 0 else t

    @property
    def eos(self) -> Optional[int]:
        """The EOS token id, or None when the vocabulary has none."""
        with self._use() as p:
            t = int(lib().kestrel_model_token_eos(p))
        return None if t < 0 else t

    def is_eog(self, token: int) -> bool:
        """True for end-of-generation tokens (EOS, EOT, ...)."""
        with self._use() as p:
            return bool(lib().kestrel_model_token_is_eog(p, int(token)))

    def describe(self) -> dict[str, Any]:
        """Architecture, hyper-parameters, vocabulary, tensors and memory (``kestrel_model_describe``)."""
        with self._use() as ptr:
            text = read_text(lambda b, c, n: lib().kestrel_model_describe(ptr, b, c, ctypes.byref(n)), 1 << 16)
        return json.loads(text)

    # ---- tokenizer -----------------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Token ids of ``text``.

        Args:
            add_special: add BOS/EOS as the vocabulary asks.
            parse_special: match control-token text such as ``<s>`` (else it is plain text).
        """
        raw = text.encode("utf-8")
        return self._read_tokens(
            "kestrel_tokenize", len(raw) + 8,
            lambda ptr, b, c, n: lib().kestrel_tokenize(ptr, raw, len(raw), add_special, parse_special, b, c, n))

    def chat_tokenize(self, text: str) -> list[int]:
        """Token ids of a rendered chat prompt (``chat_template``'s text): control-token text
        parsed, BOS added as the vocabulary asks, and one BOS kept when the template wrote its
        own too (``kestrel_chat_tokenize``, as ``kestrel chat`` and the server do)."""
        raw = text.encode("utf-8")
        return self._read_tokens(
            "kestrel_chat_tokenize", len(raw) + 8,
            lambda ptr, b, c, n: lib().kestrel_chat_tokenize(ptr, raw, len(raw), b, c, n))

    def _read_tokens(self, fn: str, cap: int, call: Callable[..., int]) -> list[int]:
        """Calls ``call(model, buf, cap, byref(n))`` (a (tokens, cap, *n) function), again with
        the size it asked for if the first buffer was too small."""
        n = ctypes.c_size_t()
        for _ in range(2):
            buf = (S.c_token * cap)()
            with self._use() as ptr:
                st = call(ptr, buf, cap, ctypes.byref(n))
            if st == S.Status.ERR_BUFFER_TOO_SMALL:
                cap = n.value
                continue
            check(st)
            return list(buf[: n.value])
        raise KestrelError(S.Status.ERR_BUFFER_TOO_SMALL, f"{fn}: the token count changed")

    def detokenize(self, tokens: Sequence[int], render_special: bool = False) -> str:
        """The text of ``tokens`` (invalid UTF-8 becomes U+FFFD)."""
        return self.detokenize_bytes(tokens, render_special).decode("utf-8", errors="replace")

    def detokenize_bytes(self, tokens: Sequence[int], render_special: bool = False) -> bytes:
        """The raw bytes of ``tokens``."""
        arr = (S.c_token * len(tokens))(*tokens)
        with self._use() as ptr:
            return read_bytes(
                lambda b, c, n: lib().kestrel_detokenize(ptr, arr, len(tokens), render_special, b, c, ctypes.byref(n)))

    def token_to_piece(self, token: int, render_special: bool = False) -> bytes:
        """The bytes of one token as the vocabulary stores them."""
        with self._use() as ptr:
            return read_bytes(
                lambda b, c, n: lib().kestrel_token_to_piece(ptr, int(token), render_special, b, c, ctypes.byref(n)), 256)

    def detokenizer(self, render_special: bool = False) -> Detokenizer:
        """A streaming detokenizer for this model."""
        return Detokenizer(self, render_special)

    # ---- chat templates ------------------------------------------------------------------
    def chat_template(
        self,
        messages: Messages,
        add_generation_prompt: bool = True,
        *,
        template: Optional[str] = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        bos_token: Optional[str] = None,
        eos_token: Optional[str] = None,
        **extra_context: Any,
    ) -> str:
        """Renders ``messages`` into a prompt like HF ``apply_chat_template(tokenize=False)``.

        Args:
            messages: ``[{"role": ..., "content": ...}, ...]`` (anything JSON can hold).
            add_generation_prompt: end with the assistant's header.
            template: Jinja source; None uses the model's ``tokenizer.chat_template`` (or the
                fallback ``<|role|>\\ncontent\\n`` format when it has none).
            tools: the ``tools`` variable (a list of tool descriptions).
            bos_token, eos_token: override the model's BOS/EOS text.
            extra_context: further template variables (``enable_thinking=False``, ...).
        """
        with self._use() as ptr:
            return chat_format(
                ptr, messages, add_generation_prompt, template=template, tools=tools,
                bos_token=bos_token, eos_token=eos_token, extra_context=extra_context,
            )

    # ---- low level ------------------------------------------------------------------------
    def context(
        self,
        n_ctx: int = 0,
        n_batch: int = 0,
        n_seq_max: int = 0,
        n_threads: int = 0,
        kv_type: str = "f16",
        kv_type_v: Optional[str] = None,
    ) -> Context:
        """A new ``Context`` (KV cache) on this model; see ``kestrel.Context``."""
        return Context(
            self, n_ctx=n_ctx, n_batch=n_batch, n_seq_max=n_seq_max, n_threads=n_threads, kv_type=kv_type,
            kv_type_v=kv_type_v,
        )

    def engine(self) -> Engine:
        """The engine behind ``generate``/``stream``/``chat``, created on first use."""
        with self._use() as ptr:
            return self._handles.engine_or_create(lambda: Engine(ptr, **self._engine_opts))

    def engine_stats(self) -> dict[str, Any]:
        """``kestrel_engine_stats`` of the engine (requests, tokens, KV blocks)."""
        return self.engine().stats()

    # ---- generation ------------------------------------------------------------------------
    def _submit(
        self,
        prompt: Prompt,
        max_tokens: int = 128,
        stop: Union[str, Sequence[str], None] = None,
        stop_tokens: Sequence[int] = (),
        stop_at_eog: bool = True,
        add_special: bool = True,
        parse_special: bool = False,
        grammar: Optional[str] = None,
        json_schema: Union[str, dict[str, Any], bool, None] = None,
        reply: Optional[int] = None,
        **sampling: Any,
    ) -> RequestStream:
        tokens = self.tokenize(prompt, add_special, parse_special) if isinstance(prompt, str) else list(prompt)
        so, keep = sampler_options(**sampling)  # temperature, top_k, ..., seed, logit_bias
        stops = [stop] if isinstance(stop, str) else list(stop or ())
        schema = json_schema if json_schema is None or isinstance(json_schema, str) else json.dumps(json_schema)
        return self.engine().submit(
            tokens,
            so,
            keep,
            max_tokens=max_tokens,
            stop=stops,
            stop_tokens=list(stop_tokens),
            stop_at_eog=stop_at_eog,
            grammar=grammar,
            json_schema=schema,
            reply=reply,
        )

    def submit(self, prompt: Prompt, max_tokens: int = 128, **options: Any) -> RequestStream:
        """Starts generating and returns the request: iterate it for text pieces, read ``tokens``
        (ids generated so far) and, at the end, ``result`` (finish reason, counts); ``cancel()``
        stops it. Takes the options of ``generate``.
        """
        return self._submit(prompt, max_tokens, **options)

    def generate(self, prompt: Prompt, max_tokens: int = 128, **options: Any) -> str:
        """Generates a continuation of ``prompt`` and returns it (the new text only).

        ``prompt`` is text (tokenized with ``add_special=True, parse_special=False``, as
        ``kestrel run`` does) or a list of token ids.

        Keyword options: ``temperature`` (<= 0: greedy), ``top_k``, ``top_p``, ``min_p``,
        ``repeat_penalty``, ``presence_penalty``, ``frequency_penalty``, ``penalty_last_n``,
        ``seed`` (None: random), ``logit_bias`` ({token: bias}), ``stop`` (strings: the text
        ends before the first match), ``stop_tokens``, ``stop_at_eog`` (default True),
        ``add_special``, ``parse_special``, ``grammar`` (GBNF text) or ``json_schema`` (a dict
        or its JSON text): only text the grammar or schema allows is generated (docs/GRAMMAR.md;
        a keyword that cannot be enforced raises). Greedy output equals ``kestrel run --temp 0``.

        Safe to call from several threads at once: their requests are batched together.
        """
        req = self._submit(prompt, max_tokens, **options)
        try:
            text = "".join(req)
        finally:
            req.cancel()  # only does something if interrupted (KeyboardInterrupt, ...)
        return text

    def stream(self, prompt: Prompt, max_tokens: int = 128, **options: Any) -> Iterator[str]:
        """Like ``generate`` but yields the text piece by piece as it is generated.

        Leaving the loop early (``break``) or closing the generator cancels the request.
        """
        req = self._submit(prompt, max_tokens, **options)
        return _stream(req)

    def _chat_prompt(self, messages: Messages, template: Optional[str], tools: Any, extra: Mapping[str, Any]) -> list[int]:
        return self.chat_tokenize(self.chat_template(messages, True, template=template, tools=tools, **extra))

    def chat(
        self,
        messages: Messages,
        max_tokens: int = 128,
        *,
        template: Optional[str] = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        tool_choice: Union[str, Mapping[str, Any]] = "auto",
        parallel_tool_calls: bool = True,
        chat_context: Optional[Mapping[str, Any]] = None,
        **options: Any,
    ) -> Union[str, ChatReply]:
        """The assistant's reply to ``messages``, rendered with the chat template.

        ``template``/``tools``/``chat_context`` (extra template variables) go to
        ``chat_template``; the other options are those of ``generate``.

        With ``tools`` (OpenAI's tool list) the reply is a ``ChatReply``: ``content``,
        ``reasoning`` and ``tool_calls`` (each with ``id``, ``name`` and parsed ``arguments``)
        as the template's family writes them (docs/TOOLS.md), and ``finish_reason``.
        ``tool_choice`` "required" or ``{"type": "function", "function": {"name": ...}}``
        forces a call (a grammar from the tools' schemas), "none" leaves calls unparsed.
        """
        if tools is None:
            ids = self._chat_prompt(messages, template, tools, chat_context or {})
            return self.generate(ids, max_tokens, **options)
        prompt = self.chat_template(messages, True, template=template, tools=tools, **(chat_context or {}))
        ids = self.chat_tokenize(prompt)
        with self._use() as ptr, ReplyParser(ptr, prompt, tools, tool_choice, parallel_tool_calls, template=template) as rp:
            req = self._submit(ids, max_tokens, reply=rp.ptr, **options)
            try:
                text = "".join(req)
            finally:
                req.cancel()
            delta = rp.push(text, final=True)
        finish = req.result.finish.name.lower() if req.result is not None else "stop"
        return reply_of(delta, finish)

    def chat_stream(
        self,
        messages: Messages,
        max_tokens: int = 128,
        *,
        template: Optional[str] = None,
        tools: Optional[Sequence[Mapping[str, Any]]] = None,
        chat_context: Optional[Mapping[str, Any]] = None,
        **options: Any,
    ) -> Iterator[str]:
        """Like ``chat`` but yields the reply piece by piece (see ``stream``)."""
        ids = self._chat_prompt(messages, template, tools, chat_context or {})
        return self.stream(ids, max_tokens, **options)

    # ---- llama-cpp-python-shaped conveniences (OpenAI dicts; kestrel/completions.py) -------------
    def create_completion(self, prompt: Prompt, **kwargs: Any) -> Any:
        """A completion as OpenAI's ``text_completion`` dict (``choices[0].text``,
        ``finish_reason``, ``usage``), or with ``stream=True`` an iterator of its chunks.

        Keywords (as llama-cpp-python's): ``max_tokens`` (default 16; None: unlimited),
        ``temperature``, ``top_p``, ``top_k``, ``min_p``, ``seed``, ``presence_penalty``,
        ``frequency_penalty``, ``repeat_penalty``, ``logit_bias``, ``stop``, ``stream``,
        ``stream_options`` (``{"include_usage": True}``), ``grammar``, ``response_format``,
        ``model`` (the name echoed back). Any other keyword raises ``TypeError``.
        """
        return completions.create_completion(self, prompt, kwargs)

    def create_chat_completion(self, messages: Messages, **kwargs: Any) -> Any:
        """The reply to ``messages`` as OpenAI's ``chat.completion`` dict
        (``choices[0].message`` with ``role``/``content``, ``tool_calls`` when ``tools`` are
        given, ``finish_reason``, ``usage``), or with ``stream=True`` an iterator of
        ``chat.completion.chunk`` dicts (``delta``s, then one with the finish reason).

        Keywords: those of ``create_completion`` (``temperature`` default 0.2, ``max_tokens``
        default None: unlimited) plus ``tools``, ``tool_choice``, ``parallel_tool_calls``,
        ``template`` and ``chat_context`` (as ``chat``). Any other keyword raises ``TypeError``.
        """
        kwargs.setdefault("temperature", 0.2)
        return completions.create_chat_completion(self, messages, kwargs)


def _stream(req: RequestStream) -> Iterator[str]:
    try:
        yield from req
    finally:
        req.cancel()


def chat_format(
    model_ptr: Optional[int],
    messages: Messages,
    add_generation_prompt: bool = True,
    *,
    template: Optional[str] = None,
    tools: Optional[Sequence[Mapping[str, Any]]] = None,
    bos_token: Optional[str] = None,
    eos_token: Optional[str] = None,
    extra_context: Optional[Mapping[str, Any]] = None,
) -> str:
    """``kestrel_chat_format``; ``model_ptr`` may be None when ``template`` is given."""
    co = new_options(S.ChatOptions)
    enc = lambda s: None if s is None else s.encode("utf-8")  # noqa: E731
    co.template_source = enc(template)
    co.tools_json = enc(None if tools is None else json.dumps(tools, ensure_ascii=False))
    co.extra_context_json = enc(json.dumps(dict(extra_context), ensure_ascii=False) if extra_context else None)
    co.bos_token = enc(bos_token)
    co.eos_token = enc(eos_token)
    co.add_generation_prompt = add_generation_prompt
    msgs = json.dumps(list(messages), ensure_ascii=False).encode("utf-8")
    return read_text(lambda b, c, n: lib().kestrel_chat_format(model_ptr, msgs, ctypes.byref(co), b, c, ctypes.byref(n)))
