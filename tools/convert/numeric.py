"""Element type conversions for the converter (Python standard library only).

Everything goes through little-endian F32 bytes, as llama.cpp's convert_hf_to_gguf.py goes
through float32 (it widens every non-F16/F32 tensor to F32 before writing):
- F16 -> F32 and BF16 -> F32 are exact; F32 -> F16 rounds to nearest even (overflow -> inf, as
  numpy's astype); F32 -> BF16 rounds to nearest even with llama.cpp's NaN rule
  (gguf-py quants.py __compute_fp32_to_bf16).
- Q8_0 is GGML's quantize_row_q8_0_ref: per 32 values amax, d = amax / 127 (f32),
  id = 1 / d (0 when d is 0), q = roundf(x * id) (f32 product, half away from zero),
  block = f16(d) then 32 int8.
Float32 arithmetic is emulated exactly: the double product/quotient of two f32 values is
rounded once to f32 (array('f')), which equals the f32 operation (the double result is exact or
correctly rounded with enough spare bits that the second rounding cannot differ).
"""

import array
import math
import struct
import sys

if sys.byteorder != "little":  # array('f') is native-endian
    raise ImportError("tools/convert needs a little-endian host")

# ggml type ids and the LLAMA_FTYPE (general.file_type) of each output type.
GGML_F32, GGML_F16, GGML_Q8_0, GGML_BF16 = 0, 1, 8, 30
OUTTYPES = {  # name -> (ggml type for quantizable tensors, general.file_type)
    "f32": (GGML_F32, 0),
    "f16": (GGML_F16, 1),
    "bf16": (GGML_BF16, 32),
    "q8_0": (GGML_Q8_0, 7),
}
QK8_0 = 34  # bytes per Q8_0 block of 32 values


def type_nbytes(ggml_type, n_elements):
    if ggml_type == GGML_F32:
        return 4 * n_elements
    if ggml_type in (GGML_F16, GGML_BF16):
        return 2 * n_elements
    if ggml_type == GGML_Q8_0:
        return n_elements // 32 * QK8_0
    raise ValueError(f"ggml type {ggml_type}")


def to_f32(raw, dtype):
    """Raw safetensors bytes of dtype F32/F16/BF16 -> little-endian F32 bytes."""
    if dtype == "F32":
        return bytes(raw)
    if dtype == "BF16":
        raw = bytes(raw)
        out = bytearray(len(raw) * 2)
        out[2::4] = raw[0::2]
        out[3::4] = raw[1::2]
        return bytes(out)
    if dtype == "F16":
        n = len(raw) // 2
        return array.array("f", struct.unpack("<%de" % n, raw)).tobytes()  # n <= CHUNK in convert_chunks
    raise ValueError(f"dtype {dtype} is not a float type this converter reads")


def _f16_one(v):
    try:
        return struct.pack("<e", v)
    except OverflowError:
        return struct.pack("<e", math.copysign(math.inf, v))


def f32_to_f16(f32):
    x = array.array("f")
    x.frombytes(f32)
    try:
        return struct.pack("<%de" % len(x), *x)
    except OverflowError:  # |v| rounds past 65504: numpy gives +-inf
        return b"".join(_f16_one(v) for v in x)


def f32_to_bf16(f32):
    u = array.array("I")
    u.frombytes(f32)
    out = array.array("H", bytes(2 * len(u)))
    for i, n in enumerate(u):
        if (n & 0x7FFFFFFF) > 0x7F800000:  # NaN: keep sign/exponent, force a quiet-NaN bit
            n = (n & 0xFFFF0000) | 0x400000
        out[i] = ((n + 0x7FFF + ((n >> 16) & 1)) >> 16) & 0xFFFF
    return out.tobytes()


def _f32(v):
    return array.array("f", (v,))[0]


def f32_to_q8_0(f32):
    """GGML Q8_0 of a whole tensor whose rows are multiples of 32 values (so blocks never span rows)."""
    x = array.array("f")
    x.frombytes(f32)
    n = len(x)
    if n % 32:
        raise ValueError("Q8_0 needs a multiple of 32 values")
    out = bytearray()
    i8 = struct.Struct("<32b").pack
    for i in range(0, n, 32):
        blk = x[i:i + 32]
        hi, lo = max(blk), min(blk)
        amax = hi if hi >= -lo else -lo
        d = _f32(amax / 127)
        inv = _f32(1.0 / d) if d != 0.0 else 0.0
        # roundf: |p| <= 127.0001, so p + 0.5 is exact in double and int() truncates like floor
        prods = array.array("f", [v * inv for v in blk])
        try:
            qs = [int(p + 0.5) if p >= 0 else -int(0.5 - p) for p in prods]
        except (ValueError, OverflowError):  # NaN / inf in the block: GGML's saturating cast
            qs = [0 if p != p else (127 if p >= 127 else (-128 if p <= -128 else int(math.copysign(
                math.floor(abs(p) + 0.5), p)))) for p in prods]
        out += _f16_one(d)
        out += i8(*qs)
    return bytes(out)


CHUNK = 1 << 20  # values per conversion step (a multiple of 32): bounds the Python objects alive


def convert_chunks(raw, src_dtype, ggml_type):
    """Raw source bytes -> the bytes of ggml_type (F32, F16, BF16 or Q8_0), as a generator of chunks
    of CHUNK values, so no more than one chunk's Python floats exist at a time."""
    if (ggml_type == GGML_F16 and src_dtype == "F16") or (ggml_type == GGML_BF16 and src_dtype == "BF16") \
            or (ggml_type == GGML_F32 and src_dtype == "F32"):
        yield bytes(raw)
        return
    es = {"F32": 4, "F16": 2, "BF16": 2}[src_dtype]
    mv = memoryview(raw)
    step = CHUNK * es
    for i in range(0, len(mv), step):
        f32 = to_f32(mv[i:i + step], src_dtype)
        if ggml_type == GGML_F32:
            yield f32
        elif ggml_type == GGML_F16:
            yield f32_to_f16(f32)
        elif ggml_type == GGML_BF16:
            yield f32_to_bf16(f32)
        elif ggml_type == GGML_Q8_0:
            yield f32_to_q8_0(f32)
        else:
            raise ValueError(f"ggml type {ggml_type}")


def convert(raw, src_dtype, ggml_type):
    """Raw source bytes -> bytes of ggml_type (F32, F16, BF16 or Q8_0)."""
    return b"".join(convert_chunks(raw, src_dtype, ggml_type))
