"""Safetensors checkpoints, read lazily (Python standard library only).

A file is: u64 little-endian header length N, N bytes of JSON
    {"name": {"dtype": "F32"|"F16"|"BF16"|..., "shape": [...], "data_offsets": [begin, end]}, ...,
     "__metadata__": {...}}
then the data section (offsets are relative to its start). Only headers are parsed up front; a
tensor's bytes are read (one seek + read) when asked for, so converting a checkpoint holds one
tensor at a time.

A checkpoint folder is either `model.safetensors` or shards listed by
`model.safetensors.index.json` (its "weight_map": tensor name -> shard file); without an index,
every `*.safetensors` file in the folder is read.
"""

import json
import os
import struct

DTYPE_SIZE = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
              "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
FLOAT_DTYPES = ("F32", "F16", "BF16")


class CheckpointError(ValueError):
    """A checkpoint file or index that cannot be read (the message names the file)."""


class TensorRef:
    """One tensor of a checkpoint: its file, dtype, shape (HF order, row-major) and byte range."""

    __slots__ = ("name", "path", "dtype", "shape", "begin", "end")

    def __init__(self, name, path, dtype, shape, begin, end):
        self.name, self.path, self.dtype, self.shape, self.begin, self.end = name, path, dtype, shape, begin, end

    @property
    def nbytes(self):
        return self.end - self.begin

    @property
    def n_elements(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def read(self, offset=0, size=None):
        """The tensor's raw little-endian bytes (or `size` bytes from byte `offset` of it)."""
        size = self.nbytes - offset if size is None else size
        with open(self.path, "rb") as f:
            f.seek(self.begin + offset)
            data = f.read(size)
        if len(data) != size:
            raise CheckpointError(f"{self.path}: tensor '{self.name}' is truncated "
                                  f"({len(data)} of {size} bytes)")
        return data


def read_header(path):
    """{name: TensorRef} of one .safetensors file (the data is not read)."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise CheckpointError(f"{path}: not a safetensors file (shorter than 8 bytes)")
            (n,) = struct.unpack("<Q", head)
            if n > size - 8 or n > 100 * 1024 * 1024:
                raise CheckpointError(f"{path}: header length {n} does not fit the file ({size} bytes)")
            header = json.loads(f.read(n).decode("utf-8"))
    except OSError as e:
        raise CheckpointError(f"{path}: {e.strerror or e}") from None
    except (UnicodeDecodeError, ValueError) as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"{path}: header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: header is not a JSON object")
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = info["dtype"]
            shape = [int(d) for d in info["shape"]]
            b, e = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{path}: tensor '{name}' has no valid dtype/shape/data_offsets") from None
        ref = TensorRef(name, path, dtype, shape, base + b, base + e)
        if dtype in DTYPE_SIZE and ref.nbytes != ref.n_elements * DTYPE_SIZE[dtype]:
            raise CheckpointError(f"{path}: tensor '{name}': {ref.nbytes} bytes for shape {shape} {dtype}")
        if base + e > size:
            raise CheckpointError(f"{path}: tensor '{name}' ends past the end of the file")
        out[name] = ref
    return out


def open_checkpoint(hf_dir):
    """{name: TensorRef} over the folder's safetensors files, in the files' order."""
    index_path = os.path.join(hf_dir, "model.safetensors.index.json")
    if os.path.exists(index_path):
        try:
            with open(index_path, encoding="utf-8") as f:
                index = json.load(f)
            weight_map = index["weight_map"]
            if not isinstance(weight_map, dict):
                raise TypeError
        except (OSError, ValueError, KeyError, TypeError):
            raise CheckpointError(f"{index_path}: no readable 'weight_map' object") from None
        files = sorted(dict.fromkeys(weight_map.values()))
        tensors = {}
        for fname in files:
            path = os.path.join(hf_dir, fname)
            if not os.path.exists(path):
                raise CheckpointError(f"{index_path}: shard '{fname}' is missing")
            tensors.update(read_header(path))
        missing = sorted(set(weight_map) - set(tensors))
        extra = sorted(set(tensors) - set(weight_map))
        if missing or extra:
            raise CheckpointError(f"{index_path}: weight_map and shards disagree "
                                  f"(missing {missing[:5]}, not listed {extra[:5]})")
        return tensors
    files = sorted(f for f in os.listdir(hf_dir) if f.endswith(".safetensors"))
    if not files:
        bins = [f for f in os.listdir(hf_dir) if f.endswith((".bin", ".pt", ".pth"))]
        hint = f" (found {bins[0]}: PyTorch pickles are not read; save the model as safetensors)" if bins else ""
        raise CheckpointError(f"{hf_dir}: no *.safetensors files{hint}")
    tensors = {}
    for fname in files:
        tensors.update(read_header(os.path.join(hf_dir, fname)))
    return tensors
