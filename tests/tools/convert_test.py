#!/usr/bin/env python3
"""Unit tests of tools/convert (standard library unittest).

    python3 tests/tools/convert_test.py                     # run the tests
    python3 tests/tools/convert_test.py --write-sample F    # write the GGUF that the C++ reader
                                                            # test checks (test_hf_cases.cpp)
The reader below is independent of gguf_writer.py (written from the format description) so the
round trip checks the byte layout, not the writer against itself.
"""

import gzip
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
CONVERT = os.path.join(HERE, "..", "..", "tools", "convert")
sys.path.insert(0, CONVERT)

import gguf_writer  # noqa: E402
import pretokenizer  # noqa: E402
import vocab  # noqa: E402
from gguf_writer import GGUFWriter, ValueType as T  # noqa: E402

_FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 10: "<Q", 11: "<q", 12: "<d"}


def read_gguf(data):
    """(version, {key: (type, value)}, [(name, ne, type, offset)], data_start)."""
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("<Q")
        s = data[pos:pos + n].decode("utf-8")
        pos += n
        return s

    def value(t):
        if t == 7:
            return bool(take("<B"))
        if t == 8:
            return string()
        if t == 9:
            et, n = take("<I"), take("<Q")
            return (et, [value(et) for _ in range(n)])
        return take(_FMT[t])

    assert data[:4] == b"GGUF"
    pos = 4
    version, n_tensors, n_kv = take("<I"), take("<Q"), take("<Q")
    kv = {}
    for _ in range(n_kv):
        key = string()
        t = take("<I")
        kv[key] = (t, value(t))
    tensors = []
    for _ in range(n_tensors):
        name = string()
        nd = take("<I")
        ne = [take("<Q") for _ in range(nd)]
        tensors.append((name, ne, take("<I"), take("<Q")))
    align = kv.get("general.alignment", (4, 32))[1]
    return version, kv, tensors, pos + (-pos) % align


def write_sample(path):
    """Every value type, nested arrays and two tensors; test_hf_cases.cpp checks the same values."""
    w = GGUFWriter()
    w.add("t.u8", T.UINT8, 200)
    w.add("t.i8", T.INT8, -100)
    w.add("t.u16", T.UINT16, 60000)
    w.add("t.i16", T.INT16, -30000)
    w.add("t.u32", T.UINT32, 4000000000)
    w.add("t.i32", T.INT32, -2000000000)
    w.add("t.f32", T.FLOAT32, 1.5)
    w.add("t.bool", T.BOOL, True)
    w.add("t.str", T.STRING, "h\u00e9llo \u2581 \U0001F600")
    w.add("t.u64", T.UINT64, 2**63 + 5)
    w.add("t.i64", T.INT64, -(2**62))
    w.add("t.f64", T.FLOAT64, -0.25)
    w.add_array("t.arr_str", T.STRING, ["a b", "", "\u2581x"])
    w.add_array("t.arr_i32", T.INT32, [1, -2, 3])
    w.add_array("t.arr_f32", T.FLOAT32, [0.5, -1.0])
    w.add_array("t.arr_empty", T.STRING, [])
    w.add_array("t.arr_nested", T.ARRAY, [(T.UINT8, [1, 2]), (T.STRING, ["z"])])
    w.add_tensor_bytes("a", [3], 0, struct.pack("<3f", 1.0, 2.0, 3.0))  # F32
    w.add_tensor_bytes("b", [2, 2], 0, struct.pack("<4f", 4.0, 5.0, 6.0, 7.0))
    w.write(path)


class WriterTest(unittest.TestCase):
    def test_round_trip(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "s.gguf")
            write_sample(path)
            with open(path, "rb") as f:
                data = f.read()
        version, kv, tensors, start = read_gguf(data)
        self.assertEqual(version, 3)
        self.assertEqual(kv["t.i16"], (T.INT16, -30000))
        self.assertEqual(kv["t.u64"], (T.UINT64, 2**63 + 5))
        self.assertEqual(kv["t.str"], (T.STRING, "h\u00e9llo \u2581 \U0001F600"))
        self.assertEqual(kv["t.arr_str"], (T.ARRAY, (T.STRING, ["a b", "", "\u2581x"])))
        self.assertEqual(kv["t.arr_nested"][1], (T.ARRAY, [(T.UINT8, [1, 2]), (T.STRING, ["z"])]))
        self.assertEqual(kv["t.arr_empty"][1], (T.STRING, []))
        self.assertEqual(list(kv)[0], "t.u8")  # insertion order
        self.assertEqual([t[0] for t in tensors], ["a", "b"])
        self.assertEqual(start % 32, 0)
        self.assertEqual(tensors[1][3] % 32, 0)
        b = tensors[1][3] + start
        self.assertEqual(struct.unpack_from("<4f", data, b), (4.0, 5.0, 6.0, 7.0))
        self.assertEqual(len(data), b + 32)  # last tensor padded to the alignment

    def test_rejects_bad_values(self):
        w = GGUFWriter()
        for vtype, value in ((T.UINT8, 256), (T.INT32, 2**31), (T.BOOL, 1), (T.STRING, 5), (T.UINT32, -1)):
            with self.assertRaises(gguf_writer.GGUFError):
                w.add("k", vtype, value)
        with self.assertRaises(gguf_writer.GGUFError):
            w.add_array("k", T.INT32, [1, "x"])
        with self.assertRaises(gguf_writer.GGUFError):
            w.add_array("k", T.STRING, ["ok", "\ud800"])
        w.add_tensor_bytes("t", [1], 0, b"\0\0\0\0")
        with self.assertRaises(gguf_writer.GGUFError):
            w.add_tensor_bytes("t", [1], 0, b"\0\0\0\0")


def byte_level_json(**over):
    tok = {
        "added_tokens": [{"id": 6, "content": "<|end|>", "special": True, "lstrip": False, "rstrip": True,
                          "single_word": False, "normalized": False}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<|end|>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "special_tokens": {"<|end|>": {"id": "<|end|>", "ids": [6], "tokens": ["<|end|>"]}}},
        "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 3, "\u0120ab": 4},
                  "merges": [["a", "b"], ["\u0120", "ab"], ["x y", "z"]]},
    }
    tok.update(over)
    return tok


def kv_of(result):
    return {k: v for k, _, v in result.kv}


class VocabTest(unittest.TestCase):
    def test_byte_level(self):
        r = vocab.build_vocab(byte_level_json(), {})
        kv = kv_of(r)
        self.assertEqual(kv["tokenizer.ggml.model"], "gpt2")
        self.assertEqual(kv["tokenizer.ggml.pre"], "gpt-2")
        self.assertEqual(kv["tokenizer.kestrel.pre_regex"], (T.STRING, [pretokenizer.GPT2_REGEX]))
        # id 5 is a gap; id 6 the added control token.
        self.assertEqual(kv["tokenizer.ggml.tokens"][1], ["a", "b", "ab", "\u0120", "\u0120ab", "[PAD5]", "<|end|>"])
        self.assertEqual(kv["tokenizer.ggml.token_type"][1], [1, 1, 1, 1, 1, 5, 3])
        self.assertEqual(kv["tokenizer.ggml.scores"][1], [0.0, 0.0, -1.0, 0.0, -2.0, 0.0, 0.0])
        self.assertEqual(kv["tokenizer.ggml.merges"][1], ["a b", "\u0120 ab"])  # "x y"+"z" dropped
        self.assertEqual(kv["tokenizer.kestrel.added_token_flags"][1], [0, 0, 0, 0, 0, 0, 2])
        # No add_bos_token in the config: the template's leading <|end|> decides.
        self.assertTrue(kv["tokenizer.ggml.add_bos_token"])
        self.assertEqual(kv["tokenizer.ggml.bos_token_id"], 6)
        self.assertEqual(kv["tokenizer.ggml.eot_token_id"], 6)
        self.assertFalse(kv["tokenizer.ggml.add_space_prefix"])

    def test_config_overrides_template_and_named_templates(self):
        cfg = {"add_bos_token": False, "bos_token": {"__type": "AddedToken", "content": "<|end|>"},
               "eos_token": None, "chat_template": [{"name": "default", "template": "D"},
                                                    {"name": "tool_use", "template": "T"}]}
        kv = kv_of(vocab.build_vocab(byte_level_json(), cfg))
        self.assertFalse(kv["tokenizer.ggml.add_bos_token"])
        self.assertNotIn("tokenizer.ggml.eos_token_id", kv)
        self.assertEqual(kv["tokenizer.chat_template"], "D")
        self.assertEqual(kv["tokenizer.chat_template.tool_use"], "T")

    def test_metaspace_style(self):
        tok = byte_level_json(
            normalizer={"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": "\u2581"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
            pre_tokenizer={"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                           "invert": False})
        tok["model"].update({"byte_fallback": True, "unk_token": "a", "merges": ["a b", "\u0120 ab"]})
        tok["model"]["vocab"]["<0x0A>"] = 5
        kv = kv_of(vocab.build_vocab(tok, {}))
        self.assertEqual(kv["tokenizer.ggml.model"], "llama")
        self.assertTrue(kv["tokenizer.ggml.add_space_prefix"])
        self.assertEqual(kv["tokenizer.kestrel.pre_regex"], (T.STRING, []))  # the split on " " is a no-op
        self.assertEqual(kv["tokenizer.ggml.token_type"][1], [2, 1, 1, 1, 1, 6, 3])
        self.assertEqual(kv["tokenizer.ggml.unknown_token_id"], 0)

    def test_string_split_is_escaped(self):
        tok = byte_level_json(pre_tokenizer={"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"String": "a.b("}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "use_regex": False}]})
        kv = kv_of(vocab.build_vocab(tok, {}))
        self.assertEqual(kv["tokenizer.kestrel.pre_regex"], (T.STRING, [r"a\.b\("]))
        self.assertEqual(kv["tokenizer.ggml.pre"], "default")

    def test_unsupported_is_an_error_naming_it(self):
        for over, word in (({"normalizer": {"type": "NFKC"}}, "NFKC"),
                           ({"pre_tokenizer": {"type": "Whitespace"}}, "Whitespace"),
                           ({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "x"},
                                               "behavior": "Removed"}}, "Removed")):
            with self.assertRaises(vocab.ConvertError) as e:
                vocab.build_vocab(byte_level_json(**over), {})
            self.assertIn(word, str(e.exception))
        with self.assertRaises(vocab.ConvertError):
            vocab.build_vocab(byte_level_json(model={"type": "Unigram", "vocab": [["a", 0.0]]}), {})

    def test_cli(self):
        script = os.path.join(CONVERT, "hf_to_gguf.py")
        with tempfile.TemporaryDirectory() as d:
            with gzip.open(os.path.join(d, "tokenizer.json.gz"), "wt", encoding="utf-8") as f:
                json.dump(byte_level_json(), f)
            out = os.path.join(d, "v.gguf")
            run = subprocess.run([sys.executable, script, d, "--vocab-only", "-o", out], capture_output=True)
            self.assertEqual(run.returncode, 0, run.stderr)
            with open(out, "rb") as f:
                _, kv, tensors, _ = read_gguf(f.read())
            self.assertEqual(kv["general.name"][1], os.path.basename(d))
            self.assertNotIn("general.architecture", kv)
            self.assertEqual(tensors, [])
            run = subprocess.run([sys.executable, script, d, "-o", out], capture_output=True, text=True)
            self.assertEqual(run.returncode, 1)  # a model conversion needs config.json + safetensors
            self.assertIn("config.json", run.stderr)
            run = subprocess.run([sys.executable, script, os.path.join(d, "nope"), "--vocab-only", "-o", out],
                                 capture_output=True, text=True)
            self.assertEqual(run.returncode, 1)
            self.assertIn("tokenizer.json", run.stderr)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--write-sample":
        write_sample(sys.argv[2])
        sys.exit(0)
    unittest.main()
