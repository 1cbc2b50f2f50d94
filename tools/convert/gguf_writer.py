"""A small GGUF v3 writer (Python standard library only).

File layout (little-endian):
    "GGUF", u32 version (3), u64 tensor_count, u64 kv_count,
    kv_count x { string key, u32 value_type, value },
    tensor_count x { string name, u32 n_dims, n_dims x u64 ne, u32 ggml_type, u64 offset },
    padding to `general.alignment` (default 32), data section (each tensor aligned the same way).
Strings are u64 byte length + UTF-8 bytes; arrays are u32 element type + u64 count + elements.

Metadata keeps insertion order. Tensor data is not held in memory: add_tensor takes a callable
that yields the bytes when the file is written, so whole checkpoints can be streamed later.
"""

import enum
import struct


class ValueType(enum.IntEnum):
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


# struct format and inclusive range of each fixed-size scalar type.
_SCALAR = {
    ValueType.UINT8: ("<B", 0, 2**8 - 1),
    ValueType.INT8: ("<b", -(2**7), 2**7 - 1),
    ValueType.UINT16: ("<H", 0, 2**16 - 1),
    ValueType.INT16: ("<h", -(2**15), 2**15 - 1),
    ValueType.UINT32: ("<I", 0, 2**32 - 1),
    ValueType.INT32: ("<i", -(2**31), 2**31 - 1),
    ValueType.UINT64: ("<Q", 0, 2**64 - 1),
    ValueType.INT64: ("<q", -(2**63), 2**63 - 1),
    ValueType.FLOAT32: ("<f", None, None),
    ValueType.FLOAT64: ("<d", None, None),
}

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
DEFAULT_ALIGNMENT = 32


class GGUFError(ValueError):
    """A value that cannot be written (wrong type, out of range, duplicate key or tensor)."""


def _pack_string(s):
    try:
        b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    except UnicodeEncodeError as e:  # lone surrogates from JSON "\ud800" escapes
        raise GGUFError(f"string {s[:40]!r} is not valid Unicode ({e.reason})") from None
    return struct.pack("<Q", len(b)) + b


def _pack_scalar(vtype, value, what):
    if vtype == ValueType.STRING:
        if not isinstance(value, (str, bytes)):
            raise GGUFError(f"{what}: expected a string, got {type(value).__name__}")
        return _pack_string(value)
    if vtype == ValueType.BOOL:
        if not isinstance(value, bool):
            raise GGUFError(f"{what}: expected a bool, got {type(value).__name__}")
        return b"\x01" if value else b"\x00"
    fmt, lo, hi = _SCALAR[vtype]
    if lo is None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise GGUFError(f"{what}: expected a number, got {type(value).__name__}")
        return struct.pack(fmt, value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise GGUFError(f"{what}: expected an integer, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise GGUFError(f"{what}: {value} is outside the range of {vtype.name}")
    return struct.pack(fmt, value)


def _pack_array(elem_type, values, what):
    elem_type = ValueType(elem_type)
    head = struct.pack("<IQ", elem_type, len(values))
    if elem_type == ValueType.ARRAY:
        # Nested arrays: each element is (elem_type, values).
        parts = [_pack_array(t, v, f"{what}[{i}]") for i, (t, v) in enumerate(values)]
        return head + b"".join(parts)
    if elem_type in _SCALAR and elem_type not in (ValueType.FLOAT32, ValueType.FLOAT64):
        fmt, lo, hi = _SCALAR[elem_type]
        for i, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise GGUFError(f"{what}[{i}]: {v!r} is not a {elem_type.name}")
        return head + struct.pack("<%d%s" % (len(values), fmt[1]), *values)
    if elem_type in (ValueType.FLOAT32, ValueType.FLOAT64):
        fmt = _SCALAR[elem_type][0]
        for i, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise GGUFError(f"{what}[{i}]: {v!r} is not a number")
        return head + struct.pack("<%d%s" % (len(values), fmt[1]), *values)
    if elem_type == ValueType.STRING:
        return head + _pack_string_list(values, what)
    return head + b"".join(_pack_scalar(elem_type, v, f"{what}[{i}]") for i, v in enumerate(values))


_U64 = struct.Struct("<Q").pack


def _pack_string_list(values, what):
    # The hot path for vocabularies (~10^6 strings): one pass, no per-item helper calls.
    try:
        encoded = [v.encode("utf-8") for v in values]
    except (AttributeError, UnicodeEncodeError):
        for i, v in enumerate(values):
            if not isinstance(v, (str, bytes)):
                raise GGUFError(f"{what}[{i}]: expected a string, got {type(v).__name__}") from None
            _pack_string(v)  # raises naming the bad string
        raise
    parts = []
    for b in encoded:
        parts.append(_U64(len(b)))
        parts.append(b)
    return b"".join(parts)


class TensorInfo:
    """One tensor: GGUF dimension order (ne[0] contiguous), a ggml type id and its byte size."""

    def __init__(self, name, ne, ggml_type, nbytes, source):
        self.name = name
        self.ne = list(ne)
        self.ggml_type = int(ggml_type)
        self.nbytes = int(nbytes)
        self.source = source  # callable returning bytes or an iterable of bytes chunks
        self.offset = 0


class GGUFWriter:
    def __init__(self, alignment=DEFAULT_ALIGNMENT):
        self._kv = {}  # key -> packed bytes of (u32 type, value), in insertion order
        self._tensors = []
        self._tensor_names = set()
        self.alignment = alignment
        if alignment != DEFAULT_ALIGNMENT:
            self.add_uint32("general.alignment", alignment)

    # ---- metadata ----
    def add(self, key, vtype, value):
        """Sets key to value of type vtype (an ARRAY value is (elem_type, list)). Replaces in place."""
        if not isinstance(key, str) or not key:
            raise GGUFError(f"metadata key {key!r} is not a non-empty string")
        vtype = ValueType(vtype)
        if vtype == ValueType.ARRAY:
            elem_type, values = value
            packed = _pack_array(elem_type, list(values), key)
        else:
            packed = _pack_scalar(vtype, value, key)
        self._kv[key] = struct.pack("<I", vtype) + packed

    def has(self, key):
        return key in self._kv

    def keys(self):
        return list(self._kv)

    def add_string(self, key, v):
        self.add(key, ValueType.STRING, v)

    def add_bool(self, key, v):
        self.add(key, ValueType.BOOL, v)

    def add_uint32(self, key, v):
        self.add(key, ValueType.UINT32, v)

    def add_int32(self, key, v):
        self.add(key, ValueType.INT32, v)

    def add_uint64(self, key, v):
        self.add(key, ValueType.UINT64, v)

    def add_float32(self, key, v):
        self.add(key, ValueType.FLOAT32, v)

    def add_array(self, key, elem_type, values):
        self.add(key, ValueType.ARRAY, (elem_type, values))

    # ---- tensors ----
    def add_tensor(self, name, ne, ggml_type, nbytes, source):
        """Declares a tensor; source() gives its nbytes bytes (or chunks) when the file is written."""
        if name in self._tensor_names:
            raise GGUFError(f"tensor '{name}' is added twice")
        if not 1 <= len(ne) <= 4 or any((not isinstance(d, int)) or d < 1 for d in ne):
            raise GGUFError(f"tensor '{name}': shape {list(ne)} is not 1-4 positive dimensions")
        self._tensor_names.add(name)
        self._tensors.append(TensorInfo(name, ne, ggml_type, nbytes, source))

    def add_tensor_bytes(self, name, ne, ggml_type, data):
        data = bytes(data)
        self.add_tensor(name, ne, ggml_type, len(data), lambda: data)

    # ---- output ----
    def _pad(self, n):
        return (-n) % self.alignment

    def _header(self):
        parts = [GGUF_MAGIC, struct.pack("<IQQ", GGUF_VERSION, len(self._tensors), len(self._kv))]
        for key, packed in self._kv.items():
            parts.append(_pack_string(key))
            parts.append(packed)
        offset = 0
        for t in self._tensors:
            t.offset = offset
            parts.append(_pack_string(t.name))
            parts.append(struct.pack("<I", len(t.ne)))
            parts.append(struct.pack("<%dQ" % len(t.ne), *t.ne))
            parts.append(struct.pack("<IQ", t.ggml_type, t.offset))
            offset += t.nbytes + self._pad(t.nbytes)
        head = b"".join(parts)
        if self._tensors:  # the data section starts aligned
            head += b"\x00" * self._pad(len(head))
        return head

    def tensors(self):
        return list(self._tensors)

    def write(self, path, progress=None):
        """Writes the file; progress(i, n, done_bytes, total_bytes, name), when given, is called
        before each tensor and once more at the end (i == n)."""
        total = sum(t.nbytes for t in self._tensors)
        done = 0
        with open(path, "wb") as f:
            f.write(self._header())
            for i, t in enumerate(self._tensors):
                if progress is not None:
                    progress(i, len(self._tensors), done, total, t.name)
                done += t.nbytes
                written = 0
                chunks = t.source()
                if isinstance(chunks, (bytes, bytearray, memoryview)):
                    chunks = [chunks]
                for chunk in chunks:
                    f.write(chunk)
                    written += len(chunk)
                if written != t.nbytes:
                    raise GGUFError(f"tensor '{t.name}': source gave {written} bytes, expected {t.nbytes}")
                f.write(b"\x00" * self._pad(t.nbytes))
            if progress is not None:
                progress(len(self._tensors), len(self._tensors), total, total, "")
