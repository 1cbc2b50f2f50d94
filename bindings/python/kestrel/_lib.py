"""Finding ``libkestrel.so`` and declaring the C functions' prototypes.

Search order: the ``KESTREL_LIBRARY`` environment variable (a path to the library), the file
``libkestrel.so`` next to this package's modules, the system's library path
(``ctypes.util.find_library("kestrel")``), then plain ``"libkestrel.so"`` (``LD_LIBRARY_PATH``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import threading
from ctypes import POINTER, c_bool, c_char, c_char_p, c_float, c_int32, c_size_t, c_uint32, c_uint64, c_void_p
from typing import Any, Optional

from . import _structs as S

_LIB_NAME = "libkestrel.dylib" if sys.platform == "darwin" else "libkestrel.so"


class LibraryNotFoundError(OSError):
    """Raised when no usable libkestrel shared library can be loaded."""


def _candidates() -> list[tuple[str, str]]:
    """(how it was found, path or name) for each place searched, in order."""
    out: list[tuple[str, str]] = []
    env = os.environ.get("KESTREL_LIBRARY")
    if env:
        out.append(("KESTREL_LIBRARY", env))
    out.append(("next to the package", os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIB_NAME)))
    found = ctypes.util.find_library("kestrel")
    if found:
        out.append(("ctypes.util.find_library", found))
    out.append(("the dynamic loader's path", _LIB_NAME))
    return out


def _load() -> ctypes.CDLL:
    tried: list[str] = []
    for how, where in _candidates():
        if how == "KESTREL_LIBRARY":
            # An explicit path must work: falling through to another library would hide a mistake.
            try:
                return ctypes.CDLL(where)
            except OSError as e:
                raise LibraryNotFoundError(f"KESTREL_LIBRARY={where!r} could not be loaded: {e}") from e
        if how == "next to the package" and not os.path.exists(where):
            tried.append(f"{how}: {where} (absent)")
            continue
        try:
            return ctypes.CDLL(where)
        except OSError as e:
            tried.append(f"{how}: {where} ({e})")
    raise LibraryNotFoundError(
        "libkestrel was not found; set KESTREL_LIBRARY to the path of libkestrel.so. Tried:\n  " + "\n  ".join(tried)
    )


_P = POINTER
_model = c_void_p
_ctx = c_void_p
_tok_p = _P(S.c_token)

# name -> (restype, argtypes)
_PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "kestrel_status_name": (c_char_p, [S.c_enum]),
    "kestrel_last_error": (c_char_p, []),
    "kestrel_api_version": (c_uint32, []),
    "kestrel_log_set": (None, [S.LogFn, c_void_p, S.c_enum]),
    # model
    "kestrel_model_options_init": (None, [_P(S.ModelOptions)]),
    "kestrel_model_load": (S.c_enum, [c_char_p, _P(S.ModelOptions), _P(c_void_p)]),
    "kestrel_model_free": (None, [_model]),
    "kestrel_model_describe": (S.c_enum, [_model, _P(c_char), c_size_t, _P(c_size_t)]),
    "kestrel_model_n_vocab": (c_int32, [_model]),
    "kestrel_model_n_ctx_train": (c_int32, [_model]),
    "kestrel_model_token_bos": (S.c_token, [_model]),
    "kestrel_model_token_eos": (S.c_token, [_model]),
    "kestrel_model_token_is_eog": (c_bool, [_model, S.c_token]),
    # tokenizer
    "kestrel_tokenize": (S.c_enum, [_model, _P(c_char), c_size_t, c_bool, c_bool, _tok_p, c_size_t, _P(c_size_t)]),
    "kestrel_detokenize": (S.c_enum, [_model, _tok_p, c_size_t, c_bool, _P(c_char), c_size_t, _P(c_size_t)]),
    "kestrel_token_to_piece": (S.c_enum, [_model, S.c_token, c_bool, _P(c_char), c_size_t, _P(c_size_t)]),
    "kestrel_detokenizer_new": (S.c_enum, [_model, c_bool, _P(c_void_p)]),
    "kestrel_detokenizer_free": (None, [c_void_p]),
    "kestrel_detokenizer_push": (S.c_enum, [c_void_p, S.c_token, _P(c_char), c_size_t, _P(c_size_t)]),
    "kestrel_detokenizer_flush": (S.c_enum, [c_void_p, _P(c_char), c_size_t, _P(c_size_t)]),
    # chat
    "kestrel_chat_options_init": (None, [_P(S.ChatOptions)]),
    "kestrel_chat_format": (S.c_enum, [_model, c_char_p, _P(S.ChatOptions), _P(c_char), c_size_t, _P(c_size_t)]),
    "kestrel_chat_tokenize": (S.c_enum, [_model, _P(c_char), c_size_t, _tok_p, c_size_t, _P(c_size_t)]),
    "kestrel_reply_parser_new": (S.c_enum, [_model, _P(S.ChatOptions), c_char_p, c_char_p, c_uint32, _P(c_void_p)]),
    "kestrel_reply_parser_grammar": (S.c_enum, [c_void_p, _P(c_char), c_size_t, _P(c_size_t)]),
    "kestrel_reply_parser_push": (S.c_enum, [c_void_p, _P(c_char), c_size_t, c_bool, _P(c_char), c_size_t, _P(c_size_t)]),
    "kestrel_reply_parser_free": (None, [c_void_p]),
    "kestrel_reply_parser_show_markers": (S.c_enum, [c_void_p, c_void_p]),
    # context
    "kestrel_context_options_init": (None, [_P(S.ContextOptions)]),
    "kestrel_context_new": (S.c_enum, [_model, _P(S.ContextOptions), _P(c_void_p)]),
    "kestrel_context_free": (None, [_ctx]),
    "kestrel_context_n_ctx": (c_uint32, [_ctx]),
    "kestrel_context_backend": (c_char_p, [_ctx]),
    "kestrel_context_set_profiling": (S.c_enum, [_ctx, c_bool]),
    "kestrel_context_profile": (S.c_enum, [_ctx, c_bool, _P(c_char), c_size_t, _P(c_size_t)]),
    "kestrel_decode": (S.c_enum, [_ctx, _P(S.CBatch)]),
    "kestrel_get_logits": (S.c_enum, [_ctx, c_int32, _P(_P(c_float)), _P(c_int32)]),
    "kestrel_kv_seq_remove": (S.c_enum, [_ctx, c_int32, c_int32, c_int32]),
    "kestrel_kv_seq_copy": (S.c_enum, [_ctx, c_int32, c_int32, c_int32, c_int32]),
    "kestrel_kv_seq_keep": (S.c_enum, [_ctx, c_int32]),
    "kestrel_kv_seq_pos_max": (c_int32, [_ctx, c_int32]),
    "kestrel_kv_clear": (None, [_ctx]),
    "kestrel_embed": (S.c_enum, [_ctx, _tok_p, _P(c_int32), c_int32, S.c_enum, c_bool, _P(c_float), c_size_t, _P(c_size_t)]),
    "kestrel_logprobs": (S.c_enum, [_P(c_float), c_int32, S.c_token, _P(c_float), _P(S.TokenLogprob), c_int32]),
    # sampling
    "kestrel_sampler_options_init": (None, [_P(S.SamplerOptions)]),
    "kestrel_sampler_new": (S.c_enum, [_P(S.SamplerOptions), _P(c_void_p)]),
    "kestrel_sampler_free": (None, [c_void_p]),
    "kestrel_sampler_sample": (S.c_enum, [c_void_p, _P(c_float), c_int32, _P(S.c_token)]),
    "kestrel_sampler_accept": (None, [c_void_p, S.c_token]),
    "kestrel_sampler_reset": (None, [c_void_p]),
    "kestrel_sampler_set_grammar": (S.c_enum, [c_void_p, _model, c_char_p, c_char_p, c_void_p]),
    # speculative decoding, generate
    "kestrel_spec_options_init": (None, [_P(S.SpecOptions)]),
    "kestrel_generate_options_init": (None, [_P(S.GenerateOptions)]),
    "kestrel_generate": (S.c_enum, [_ctx, c_char_p, _P(S.GenerateOptions), _P(c_int32)]),
    # engine
    "kestrel_engine_options_init": (None, [_P(S.EngineOptions)]),
    "kestrel_engine_new": (S.c_enum, [_model, _P(S.EngineOptions), _P(c_void_p)]),
    "kestrel_engine_free": (None, [c_void_p]),
    "kestrel_request_init": (None, [_P(S.Request)]),
    "kestrel_submit": (S.c_enum, [c_void_p, _P(S.Request), _P(c_uint64)]),
    "kestrel_cancel": (S.c_enum, [c_void_p, c_uint64]),
    "kestrel_wait": (S.c_enum, [c_void_p, c_uint64, _P(S.RequestResult)]),
    "kestrel_engine_generate": (S.c_enum, [c_void_p, _P(S.Request), _P(S.RequestResult)]),
    "kestrel_engine_stats": (S.c_enum, [c_void_p, _P(c_char), c_size_t, _P(c_size_t)]),
}

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None


def lib() -> ctypes.CDLL:
    """The loaded library with every prototype declared (loaded on first use)."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            dll = _load()
            for name, (restype, argtypes) in _PROTOTYPES.items():
                fn = getattr(dll, name)
                fn.restype = restype
                fn.argtypes = argtypes
            _lib = dll
    return _lib


def library_path() -> str:
    """The file name the library was loaded from."""
    return lib()._name


def api_version() -> int:
    """``kestrel_api_version()`` of the loaded library."""
    return int(lib().kestrel_api_version())


_INIT = {
    S.ModelOptions: "kestrel_model_options_init",
    S.ChatOptions: "kestrel_chat_options_init",
    S.ContextOptions: "kestrel_context_options_init",
    S.SamplerOptions: "kestrel_sampler_options_init",
    S.SpecOptions: "kestrel_spec_options_init",
    S.GenerateOptions: "kestrel_generate_options_init",
    S.EngineOptions: "kestrel_engine_options_init",
    S.Request: "kestrel_request_init",
}


def new_options(cls: type[ctypes.Structure]) -> Any:
    """A struct of type ``cls`` filled by its ``kestrel_*_init()`` (struct_size and defaults)."""
    obj = cls()
    getattr(lib(), _INIT[cls])(ctypes.byref(obj))
    return obj
