"""ctypes mirrors of the public structs, enums and callback types of ``kestrel.h``.

Every struct here has the same field names, in the same order, as the header; the tests compare
sizes, alignments and offsets against the C compiler's answer (``bindings/abi/abi_layout.c``).
Options structs must be filled by the matching ``kestrel_*_init()`` (see ``_lib.new_options``)
so ``struct_size`` and the library's defaults are set.
"""

from __future__ import annotations

import ctypes
import enum
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_bool,
    c_char_p,
    c_float,
    c_int,
    c_int32,
    c_size_t,
    c_uint32,
    c_uint64,
    c_void_p,
)

#: The API version these mirrors were written for (``KESTREL_API_VERSION``).
API_VERSION = 9

c_token = c_int32
c_enum = c_int  # C enums with values in int range are int-sized on every ABI we target


class Status(enum.IntEnum):
    """``kestrel_status``; the member name is ``kestrel_status_name()`` of the value."""

    OK = 0
    ERR_INVALID_ARGUMENT = 1
    ERR_IO = 2
    ERR_FORMAT = 3
    ERR_UNSUPPORTED = 4
    ERR_OUT_OF_MEMORY = 5
    ERR_OUT_OF_RANGE = 6
    ERR_CONTEXT_FULL = 7
    ERR_BUFFER_TOO_SMALL = 8
    ERR_CANCELLED = 9
    ERR_BACKEND = 10
    ERR_INTERNAL = 11


class LogLevel(enum.IntEnum):
    """``kestrel_log_level``."""

    DEBUG = 0
    INFO = 1
    WARN = 2
    ERROR = 3
    NONE = 4


class SpecMode(enum.IntEnum):
    """``kestrel_spec_mode``: how speculative decoding drafts tokens."""

    NONE = 0
    DRAFT = 1
    NGRAM = 2


class KvType(enum.IntEnum):
    """``kestrel_kv_type``: the KV cache's element type (F8_E4M3: one E4M3 byte, no scale; Q8_0,
    Q4_0: each token's row in blocks of 32 values with an F16 scale)."""

    F16 = 0
    F32 = 1
    F8_E4M3 = 2
    Q8_0 = 3
    Q4_0 = 4


def kv_type_value(name: str, field: str = "kv_type") -> int:
    """``kestrel_kv_type`` of "f16", "q8_0", "q4_0", "f8_e4m3" or "f32" (ValueError otherwise)."""
    try:
        return int(KvType[name.upper()])
    except KeyError:
        raise ValueError(f"{field}: expected 'f16', 'q8_0', 'q4_0', 'f8_e4m3' or 'f32', got {name!r}") from None


class Pooling(enum.IntEnum):
    """``kestrel_pooling``: how kestrel_embed pools an input's states (MODEL: the GGUF's key, else LAST)."""

    MODEL = 0
    MEAN = 1
    CLS = 2
    LAST = 3


class FinishReason(enum.IntEnum):
    """``kestrel_finish_reason``: why an engine request ended."""

    NONE = 0
    STOP = 1
    LENGTH = 2
    CANCELLED = 3
    ERROR = 4


#: C enum name -> (Python enum, prefix of its enumerators in C).
ENUMS: dict[str, tuple[type[enum.IntEnum], str]] = {
    "kestrel_status": (Status, "KESTREL_"),
    "kestrel_log_level": (LogLevel, "KESTREL_LOG_"),
    "kestrel_spec_mode": (SpecMode, "KESTREL_SPEC_"),
    "kestrel_kv_type": (KvType, "KESTREL_KV_"),
    "kestrel_finish_reason": (FinishReason, "KESTREL_FINISH_"),
    "kestrel_pooling": (Pooling, "KESTREL_POOLING_"),
}

# ---- callback types ------------------------------------------------------------------------
LogFn = CFUNCTYPE(None, c_enum, c_char_p, c_void_p)
ProgressFn = CFUNCTYPE(c_bool, c_float, c_void_p)
TokenFn = CFUNCTYPE(c_bool, c_token, POINTER(ctypes.c_char), c_size_t, c_void_p)
LogitsFn = CFUNCTYPE(None, POINTER(c_float), c_int32, c_void_p)


class ModelOptions(Structure):
    """``kestrel_model_options``."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("backend", c_char_p),
        ("n_threads", c_int32),
        ("use_mmap", c_bool),
        ("vocab_only", c_bool),
        ("progress", ProgressFn),
        ("progress_user", c_void_p),
    ]


class ChatOptions(Structure):
    """``kestrel_chat_options``."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("template_source", c_char_p),
        ("tools_json", c_char_p),
        ("extra_context_json", c_char_p),
        ("bos_token", c_char_p),
        ("eos_token", c_char_p),
        ("add_generation_prompt", c_bool),
    ]


class ContextOptions(Structure):
    """``kestrel_context_options``."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("n_ctx", c_uint32),
        ("n_batch", c_uint32),
        ("n_seq_max", c_uint32),
        ("n_threads", c_int32),
        ("kv_type", c_int32),  # a kestrel_kv_type: K's, and V's unless kv_type_v
        ("kv_type_v", c_int32),  # API 9; -1: kv_type
    ]


class CBatch(Structure):
    """``kestrel_batch`` (the arrays belong to the caller)."""

    _fields_ = [
        ("n_tokens", c_int32),
        ("tokens", POINTER(c_token)),
        ("positions", POINTER(c_int32)),
        ("seq_ids", POINTER(c_int32)),
        ("logits", POINTER(c_bool)),
    ]


class SamplerOptions(Structure):
    """``kestrel_sampler_options``."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("temperature", c_float),
        ("top_k", c_int32),
        ("top_p", c_float),
        ("min_p", c_float),
        ("repeat_penalty", c_float),
        ("presence_penalty", c_float),
        ("frequency_penalty", c_float),
        ("penalty_last_n", c_int32),
        ("seed", c_uint64),
        ("logit_bias_tokens", POINTER(c_token)),
        ("logit_bias_values", POINTER(c_float)),
        ("n_logit_bias", c_int32),
    ]


class SpecOptions(Structure):
    """``kestrel_spec_options``."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("mode", c_enum),
        ("k_max", c_int32),
        ("ngram_min", c_int32),
        ("ngram_max", c_int32),
    ]


class TokenLogprob(Structure):
    """``kestrel_token_logprob``."""

    _fields_ = [("token", c_token), ("logprob", c_float)]


class SpecStats(Structure):
    """``kestrel_spec_stats``."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("n_steps", c_int32),
        ("n_drafted", c_int32),
        ("n_accepted", c_int32),
    ]


class GenerateOptions(Structure):
    """``kestrel_generate_options``."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("max_tokens", c_int32),
        ("add_special", c_bool),
        ("parse_special", c_bool),
        ("stop_at_eog", c_bool),
        ("sampling", POINTER(SamplerOptions)),
        ("on_token", TokenFn),
        ("user", c_void_p),
        ("speculative", POINTER(SpecOptions)),
        ("draft", c_void_p),
        ("spec_stats", POINTER(SpecStats)),
        ("stop_strings", POINTER(c_char_p)),
        ("n_stop_strings", c_int32),
        ("grammar", c_char_p),  # API 6
        ("json_schema", c_char_p),
    ]


class EngineOptions(Structure):
    """``kestrel_engine_options``."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("n_ctx", c_uint32),
        ("n_parallel", c_uint32),
        ("n_batch", c_uint32),
        ("n_threads", c_int32),
        ("draft_model", c_void_p),
        ("speculative", POINTER(SpecOptions)),
        ("kv_type", c_int32),  # a kestrel_kv_type: K's, and V's unless kv_type_v
        ("kv_type_v", c_int32),  # API 9; -1: kv_type
    ]


class RequestResult(Structure):
    """``kestrel_request_result``."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("finish", c_enum),
        ("status", c_enum),
        ("n_prompt", c_int32),
        ("n_cached", c_int32),
        ("n_generated", c_int32),
        ("n_drafted", c_int32),
        ("n_accepted", c_int32),
        ("stop_string", c_int32),
        ("queue_s", c_float),
    ]


DoneFn = CFUNCTYPE(None, POINTER(RequestResult), c_void_p)


class Request(Structure):
    """``kestrel_request``."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("prompt", POINTER(c_token)),
        ("n_prompt", c_int32),
        ("max_tokens", c_int32),
        ("sampling", POINTER(SamplerOptions)),
        ("stop_at_eog", c_bool),
        ("stop_tokens", POINTER(c_token)),
        ("n_stop_tokens", c_int32),
        ("stop_strings", POINTER(c_char_p)),
        ("n_stop_strings", c_int32),
        ("on_token", TokenFn),
        ("on_logits", LogitsFn),
        ("on_done", DoneFn),
        ("user", c_void_p),
        ("speculative", POINTER(SpecOptions)),
        ("grammar", c_char_p),  # API 6
        ("json_schema", c_char_p),
        ("reply", c_void_p),  # API 7: a kestrel_reply_parser
    ]


#: C struct name -> its mirror; the ABI test checks this against the header both ways.
STRUCTS: dict[str, type[Structure]] = {
    "kestrel_model_options": ModelOptions,
    "kestrel_chat_options": ChatOptions,
    "kestrel_context_options": ContextOptions,
    "kestrel_batch": CBatch,
    "kestrel_sampler_options": SamplerOptions,
    "kestrel_spec_options": SpecOptions,
    "kestrel_spec_stats": SpecStats,
    "kestrel_token_logprob": TokenLogprob,
    "kestrel_generate_options": GenerateOptions,
    "kestrel_engine_options": EngineOptions,
    "kestrel_request_result": RequestResult,
    "kestrel_request": Request,
}
