"""Loading, errors, describe, the tokenizer against the core's reference vectors, chat templates."""

from __future__ import annotations

import glob
import json
import os
import tempfile
import unittest

import kestrel

from ._util import shared_stories, stories_path, testdata, testdata_root

SEPARATOR = "\n__ggml_vocab_test__\n"


def read_vectors(inp: str, out: str) -> list[tuple[str, list[int]]]:
    with open(inp, "rb") as f:
        cases = f.read().decode("utf-8").split(SEPARATOR)
    assert cases[-1] == "", "the .inp file ends with a separator"
    cases.pop()
    with open(out, "rb") as f:
        lines = f.read().decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    assert len(lines) == len(cases), (len(lines), len(cases))
    return [(text, [int(t) for t in line.split()]) for text, line in zip(cases, lines)]


class EmbedTest(unittest.TestCase):
    def test_embeddings_batched_equal_alone_and_are_unit_length(self) -> None:
        with kestrel.Model(stories_path(), n_threads=1) as m, m.context(n_seq_max=2) as ctx:
            inputs = [m.tokenize(t) for t in ("Once upon a time", "The cat sat.", "Hi")]
            both = ctx.embed(inputs, kestrel.Pooling.MEAN)
            self.assertEqual([len(v) for v in both], [64, 64, 64])
            alone = ctx.embed([inputs[2]], kestrel.Pooling.MEAN)[0]
            for x, y in zip(alone, both[2]):
                self.assertAlmostEqual(x, y, places=5)
            self.assertAlmostEqual(sum(x * x for x in both[0]), 1.0, places=5)
            self.assertEqual(list(ctx.embed(inputs[:1])[0]), list(ctx.embed(inputs[:1], kestrel.Pooling.LAST)[0]))
            with self.assertRaises(kestrel.KestrelError):
                ctx.embed([[]])


class LoadTest(unittest.TestCase):
    def test_load_properties_and_describe(self) -> None:
        with kestrel.Model(stories_path(), n_threads=1) as m:
            self.assertEqual(m.n_vocab, 512)
            self.assertGreater(m.n_ctx_train, 0)
            self.assertEqual((m.bos, m.eos), (1, 2))
            self.assertTrue(m.is_eog(2))
            self.assertFalse(m.is_eog(100))
            d = m.describe()
            self.assertEqual(d["architecture"], "llama")
            self.assertIn("hparams", d)
            self.assertIn("stories260K-f32.gguf", repr(m))
        self.assertTrue(m.closed)
        with self.assertRaises(kestrel.KestrelError):
            m.n_vocab
        m.close()  # idempotent

    def test_missing_file_raises(self) -> None:
        path = os.path.join(tempfile.gettempdir(), "kestrel-no-such-model.gguf")
        with self.assertRaises(kestrel.KestrelError) as cm:
            kestrel.Model(path)
        e = cm.exception
        self.assertEqual(e.status, "ERR_IO")
        self.assertEqual(e.code, int(kestrel.Status.ERR_IO))
        self.assertIn("kestrel-no-such-model.gguf", e.message)
        self.assertIn("ERR_IO", str(e))

    def test_malformed_files_raise(self) -> None:
        with open(stories_path(), "rb") as f:
            head = f.read(3000)
        with tempfile.TemporaryDirectory() as d:
            for name, data in [("garbage.gguf", b"this is not a GGUF file at all" * 10),
                               ("truncated.gguf", head), ("empty.gguf", b"")]:
                path = os.path.join(d, name)
                with open(path, "wb") as f:
                    f.write(data)
                with self.subTest(name), self.assertRaises(kestrel.KestrelError) as cm:
                    kestrel.Model(path, n_threads=1)
                self.assertIn(cm.exception.status, ("ERR_FORMAT", "ERR_IO"))
                self.assertTrue(cm.exception.message)

    def test_errors_carry_the_failing_threads_message(self) -> None:
        m = shared_stories()
        with self.assertRaises(kestrel.KestrelError) as cm:
            m.detokenize([100000])
        self.assertEqual(cm.exception.status, "ERR_OUT_OF_RANGE")
        self.assertTrue(cm.exception.message)

    def test_set_log_level(self) -> None:
        kestrel.set_log_level(kestrel.LogLevel.ERROR)
        kestrel.set_log_level(kestrel.LogLevel.INFO)

    def test_unknown_option_is_a_type_error(self) -> None:
        with self.assertRaises(TypeError):
            kestrel.Model(stories_path(), n_thread=1)

    def test_vocab_only_model_cannot_generate(self) -> None:
        with kestrel.Model(stories_path(), vocab_only=True) as m:
            self.assertEqual(m.tokenize("Hello", add_special=False), shared_stories().tokenize("Hello", add_special=False))
            with self.assertRaises(kestrel.KestrelError):
                m.context(n_ctx=64)

    def test_progress_callback(self) -> None:
        seen: list[float] = []
        with kestrel.Model(stories_path(), n_threads=1, progress=seen.append):
            pass
        self.assertTrue(seen)
        with self.assertRaises(kestrel.KestrelError) as cm:
            kestrel.Model(stories_path(), progress=lambda p: False)
        self.assertEqual(cm.exception.status, "ERR_CANCELLED")


class TokenizerTest(unittest.TestCase):
    def check_vectors(self, model: kestrel.Model, inp: str, out: str) -> None:
        for i, (text, ids) in enumerate(read_vectors(inp, out)):
            with self.subTest(case=i, text=text[:40]):
                self.assertEqual(model.tokenize(text, add_special=False, parse_special=False), ids)

    def test_stories260k_vectors(self) -> None:
        self.check_vectors(shared_stories(), testdata("tokenizer", "stories260K.inp"), testdata("tokenizer", "stories260K.out"))

    def test_vocab_only_gguf_vectors(self) -> None:
        for name in ("ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf"):
            path = testdata("tokenizer", name)
            with kestrel.Model(path, vocab_only=True) as m:
                self.check_vectors(m, path + ".inp", path + ".out")

    def test_round_trip_and_specials(self) -> None:
        m = shared_stories()
        text = "Once upon a time, there was a tiny dog. Ünïcödé 日本"
        ids = m.tokenize(text)
        self.assertEqual(ids[0], m.bos)
        self.assertEqual(m.detokenize(ids[1:]), text)
        self.assertEqual(m.detokenize(m.tokenize(text, add_special=False)), text)
        self.assertEqual(m.tokenize(""), [m.bos])
        self.assertEqual(m.tokenize("", add_special=False), [])
        self.assertEqual(m.tokenize("<s>", add_special=False, parse_special=True), [m.bos])
        self.assertNotEqual(m.tokenize("<s>", add_special=False, parse_special=False), [m.bos])
        self.assertEqual(b"".join(m.token_to_piece(t) for t in m.tokenize("dog", add_special=False)), b" dog")

    def test_streaming_detokenizer_joins_byte_tokens(self) -> None:
        m = shared_stories()
        ids = m.tokenize("日本 ok", add_special=False)
        d = m.detokenizer()
        pieces = [d.push(t) for t in ids] + [d.flush()]
        # The SentencePiece prefix space is kept by streaming, dropped by whole-text detokenization.
        self.assertEqual("".join(pieces), " 日本 ok")
        self.assertEqual(m.detokenize(ids), "日本 ok")
        self.assertTrue(all("\ufffd" not in p for p in pieces))
        d.close()


class ChatTemplateTest(unittest.TestCase):
    def check_file(self, name: str) -> int:
        with open(testdata("chat_templates", name), encoding="utf-8") as f:
            spec = json.load(f)
        n = 0
        if "strftime_now" in spec["template"]:
            return 0  # renders today's date; the expected strings used a fixed clock
        for case in spec["cases"]:
            if case.get("expected") is None:
                continue
            kwargs = dict(case.get("extra_context") or {})
            with self.subTest(template=name, case=case["name"]):
                got = kestrel.render_chat_template(
                    case["messages"], spec["template"], case["add_generation_prompt"], tools=case.get("tools"),
                    bos_token=spec.get("bos_token"), eos_token=spec.get("eos_token"), **kwargs)
                self.assertEqual(got, case["expected"])
                if spec.get("bos_token") is not None and spec.get("eos_token") is not None:
                    got = shared_stories().chat_template(
                        case["messages"], case["add_generation_prompt"], template=spec["template"],
                        tools=case.get("tools"), bos_token=spec["bos_token"], eos_token=spec["eos_token"], **kwargs)
                    self.assertEqual(got, case["expected"])
                n += 1
        return n

    def test_reference_renderings(self) -> None:
        n = sum(self.check_file(f) for f in ("Qwen-Qwen2.5-7B-Instruct.json", "google-gemma-2-2b-it.json",
                                               "fireworks-ai-llama-3-firefunction-v2.json"))
        self.assertGreaterEqual(n, 15)

    def test_all_reference_files(self) -> None:
        files = sorted(glob.glob(os.path.join(testdata_root(), "chat_templates", "*.json")))
        if not files:
            testdata("chat_templates", "Qwen-Qwen2.5-7B-Instruct.json")
        self.assertGreater(sum(self.check_file(os.path.basename(f)) for f in files), 300)

    def test_render_errors_raise(self) -> None:
        with open(testdata("chat_templates", "google-gemma-2-2b-it.json"), encoding="utf-8") as f:
            spec = json.load(f)
        msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
        with self.assertRaises(kestrel.KestrelError) as cm:
            kestrel.render_chat_template(msgs, spec["template"], bos_token="<bos>")
        self.assertEqual(cm.exception.status, "ERR_INVALID_ARGUMENT")
        self.assertIn("System role not supported", cm.exception.message)
        with self.assertRaises(kestrel.KestrelError) as cm:
            kestrel.render_chat_template(msgs, "{% if %}")
        self.assertEqual(cm.exception.status, "ERR_FORMAT")

    def test_model_without_template_uses_fallback(self) -> None:
        msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi!"}]
        self.assertEqual(shared_stories().chat_template(msgs), "<|system|>\nS\n<|user|>\nHi!\n<|assistant|>\n")
        self.assertEqual(shared_stories().chat_template(msgs, add_generation_prompt=False),
                         "<|system|>\nS\n<|user|>\nHi!\n")


if __name__ == "__main__":
    unittest.main()
