"""A minimal GGUF v3 reader/writer (Python standard library only) for the hostile suite.

It exists for one job: give the random-weight qwen3 test model a byte-level BPE vocabulary (the
Llama 3 one, cut to the model's 512 rows) so the streaming tests also run on a vocabulary whose
single-byte tokens are lone UTF-8 lead/continuation bytes. Tensor data is copied unchanged.
"""
import struct

# GGUF metadata value types.
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
_SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
           BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}


class _Reader:
    def __init__(self, data):
        self.d, self.p = data, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.d, self.p)[0]
        self.p += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = bytes(self.d[self.p:self.p + n])
        self.p += n
        return s.decode("utf-8", errors="surrogateescape")

    def value(self, t):
        if t == STR:
            return self.string()
        if t == ARR:
            et, n = self.take("<I"), self.take("<Q")
            return (et, [self.value(et) for _ in range(n)])
        return self.take(_SCALAR[t])


def read(path):
    """Returns (kv: list of (key, type, value)), tensor_infos: bytes, n_tensors, data: bytes, alignment).
    Array values are (element_type, [values])."""
    with open(path, "rb") as f:
        raw = f.read()
    r = _Reader(raw)
    if raw[:4] != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file")
    r.p = 4
    version, n_tensors, n_kv = r.take("<I"), r.take("<Q"), r.take("<Q")
    if version != 3:
        raise ValueError(f"{path}: GGUF version {version}, want 3")
    kv = []
    for _ in range(n_kv):
        key = r.string()
        t = r.take("<I")
        kv.append((key, t, r.value(t)))
    align = next((v for k, _, v in kv if k == "general.alignment"), 32)
    start = r.p
    for _ in range(n_tensors):  # name, n_dims, dims, type, offset
        r.string()
        nd = r.take("<I")
        r.p += 8 * nd + 4 + 8
    infos = raw[start:r.p]
    data_start = (r.p + align - 1) // align * align
    return kv, infos, n_tensors, raw[data_start:], align


def _pack_string(s):
    b = s.encode("utf-8", errors="surrogateescape")
    return struct.pack("<Q", len(b)) + b


def _pack_value(t, v):
    if t == STR:
        return _pack_string(v)
    if t == ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(_pack_value(et, x) for x in items)
    return struct.pack(_SCALAR[t], v)


def write(path, kv, infos, n_tensors, data, align):
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, n_tensors, len(kv)))
    for key, t, v in kv:
        out += _pack_string(key) + struct.pack("<I", t) + _pack_value(t, v)
    out += infos
    out += b"\0" * ((-len(out)) % align)
    out += data
    with open(path, "wb") as f:
        f.write(out)


def byte_bpe_model(weights_path, vocab_path, out_path):
    """weights_path's tensors and non-tokenizer metadata + vocab_path's byte-level BPE vocabulary
    cut to the weights' row count (merges kept only where both parts and the result survive).
    The last kept id becomes the end-of-text control token."""
    kv, infos, n_tensors, data, align = read(weights_path)
    vkv = read(vocab_path)[0]
    vocab = {k: (t, v) for k, t, v in vkv}
    n_vocab = len(next(v for k, _, v in kv if k == "tokenizer.ggml.tokens")[1])
    tokens = list(vocab["tokenizer.ggml.tokens"][1][1][:n_vocab])
    types = list(vocab["tokenizer.ggml.token_type"][1][1][:n_vocab])
    tokens[-1], types[-1] = "<|end_of_text|>", 3
    keep = set(tokens)
    merges = [m for m in vocab["tokenizer.ggml.merges"][1][1]
              if len(m.split(" ")) == 2 and all(p in keep for p in m.split(" "))
              and m.replace(" ", "") in keep and m.replace(" ", "") != tokens[-1]]
    new = [(k, t, v) for k, t, v in kv if not k.startswith("tokenizer.")]
    new += [("tokenizer.ggml.model", STR, vocab["tokenizer.ggml.model"][1]),
            ("tokenizer.ggml.pre", STR, vocab["tokenizer.ggml.pre"][1]),
            ("tokenizer.ggml.tokens", ARR, (STR, tokens)),
            ("tokenizer.ggml.token_type", ARR, (I32, types)),
            ("tokenizer.ggml.merges", ARR, (STR, merges)),
            ("tokenizer.ggml.eos_token_id", U32, n_vocab - 1),
            ("tokenizer.ggml.add_bos_token", BOOL, False)]
    write(out_path, new, infos, n_tensors, data, align)
    return out_path
