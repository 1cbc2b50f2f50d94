"""generate/stream/chat on the engine: equal to `kestrel run --temp 0`, stop strings, cancellation,
several threads sharing one model."""

from __future__ import annotations

import threading
import time
import unittest

import kestrel

from ._util import cli_output, shared_stories, stories_path, testdata

PROMPT = "Once upon a time"


class GreedyMatchesCliTest(unittest.TestCase):
    def test_stories_generate_equals_kestrel_run(self) -> None:
        m = shared_stories()
        for prompt, n in [(PROMPT, 48), ("The little dog", 32), ("Lily and Ben ", 20)]:
            with self.subTest(prompt=prompt):
                self.assertEqual(m.generate(prompt, max_tokens=n, temperature=0), cli_output(stories_path(), prompt, n))

    def test_other_architectures_equal_kestrel_run(self) -> None:
        for name in ("stories260K-q4_0", "llama-gqa-q4_k_m", "qwen3-q8_0", "deepseek2-q4_k_m", "gpt-oss-mxfp4_moe"):
            path = testdata("models", name + ".gguf")
            with self.subTest(model=name), kestrel.Model(path, n_threads=1) as m:
                self.assertEqual(m.generate(PROMPT, max_tokens=16, temperature=0), cli_output(path, PROMPT, 16))

    def test_stream_pieces_concatenate_to_generate(self) -> None:
        m = shared_stories()
        expected = m.generate(PROMPT, max_tokens=40, temperature=0)
        pieces = list(m.stream(PROMPT, max_tokens=40, temperature=0))
        self.assertGreater(len(pieces), 5)
        self.assertTrue(all(isinstance(p, str) for p in pieces))
        self.assertEqual("".join(pieces), expected)

    def test_submit_reports_tokens_and_result(self) -> None:
        m = shared_stories()
        req = m.submit(PROMPT, max_tokens=10, temperature=0, stop_at_eog=False)
        text = req.text()
        self.assertEqual(len(req.tokens), 10)
        d = m.detokenizer()
        self.assertEqual("".join(d.push(t) for t in req.tokens) + d.flush(), text)
        self.assertEqual(req.result.finish, kestrel.FinishReason.LENGTH)
        self.assertEqual(req.result.n_generated, 10)
        self.assertEqual(req.result.n_prompt, len(m.tokenize(PROMPT)))

    def test_token_prompt_equals_text_prompt(self) -> None:
        m = shared_stories()
        self.assertEqual(m.generate(m.tokenize(PROMPT), max_tokens=12, temperature=0),
                         m.generate(PROMPT, max_tokens=12, temperature=0))

    def test_seeded_sampling_is_reproducible(self) -> None:
        m = shared_stories()
        a = m.generate(PROMPT, max_tokens=24, temperature=1.0, seed=1234)
        self.assertEqual(a, m.generate(PROMPT, max_tokens=24, temperature=1.0, seed=1234))
        self.assertTrue(a)
        self.assertEqual(m.generate(PROMPT, max_tokens=24, temperature=1.0, top_k=1, seed=5),
                         m.generate(PROMPT, max_tokens=24, temperature=0))

    def test_engine_options(self) -> None:
        expected = shared_stories().generate(PROMPT, max_tokens=24, temperature=0)
        with kestrel.Model(stories_path(), n_threads=1, n_ctx=128, n_parallel=2, n_batch=8) as m:
            self.assertEqual(m.generate(PROMPT, max_tokens=24, temperature=0), expected)
            self.assertEqual(m.engine_stats()["kv"]["blocks"] * m.engine_stats()["kv"]["block_size"], 128)
            with self.assertRaises(kestrel.KestrelError) as cm:
                m.generate("word " * 300, max_tokens=4)  # a prompt the engine's context cannot hold
            self.assertTrue(cm.exception.message)

    def test_bad_options_raise(self) -> None:
        m = shared_stories()
        with self.assertRaises(kestrel.KestrelError) as cm:
            m.generate([], max_tokens=4)
        self.assertEqual(cm.exception.status, "ERR_INVALID_ARGUMENT")
        with self.assertRaises(kestrel.KestrelError) as cm:
            m.generate([99999], max_tokens=4)
        self.assertTrue(cm.exception.message)
        with self.assertRaises(TypeError):
            m.generate(PROMPT, max_token=4)


class StopTest(unittest.TestCase):
    def test_stop_strings_end_the_text_before_the_match(self) -> None:
        m = shared_stories()
        full = m.generate(PROMPT, max_tokens=64, temperature=0)
        self.assertIn(".", full)
        for stop in (["."], ". One", ["girl", "Lily"]):
            with self.subTest(stop=stop):
                stops = [stop] if isinstance(stop, str) else stop
                cut = min(full.index(s) for s in stops if s in full)
                self.assertEqual(m.generate(PROMPT, max_tokens=64, temperature=0, stop=stop), full[:cut])
                self.assertEqual("".join(m.stream(PROMPT, max_tokens=64, temperature=0, stop=stop)), full[:cut])
        req = m.submit(PROMPT, max_tokens=64, temperature=0, stop=["."])
        req.text()
        self.assertEqual(req.result.finish, kestrel.FinishReason.STOP)

    def test_stop_tokens(self) -> None:
        m = shared_stories()
        req = m.submit(PROMPT, max_tokens=30, temperature=0)
        req.text()
        stop_at = req.tokens[5]
        got = m.submit(PROMPT, max_tokens=30, temperature=0, stop_tokens=[stop_at])
        got.text()
        self.assertEqual(got.tokens, req.tokens[: req.tokens.index(stop_at) + 1][: len(got.tokens)])
        self.assertEqual(got.result.finish, kestrel.FinishReason.STOP)


class CancelTest(unittest.TestCase):
    def test_break_out_of_stream_cancels(self) -> None:
        m = shared_stories()
        expected = m.generate(PROMPT, max_tokens=32, temperature=0)
        finished = m.engine_stats()["requests_finished"]
        gen = m.stream(PROMPT, max_tokens=100000, temperature=0, stop_at_eog=False)
        for i, _ in enumerate(gen):
            if i == 3:
                break
        gen.close()
        # Closing waited for the engine's on_done. The C engine counts the request as finished
        # just after on_done returns, and refreshes requests_running only after a step that
        # decoded something (it can read 1 after every request has ended), so poll the former.
        deadline = time.monotonic() + 10
        while m.engine_stats()["requests_finished"] != finished + 1 and time.monotonic() < deadline:
            time.sleep(0.001)
        self.assertEqual(m.engine_stats()["requests_finished"], finished + 1)
        self.assertEqual(m.generate(PROMPT, max_tokens=32, temperature=0), expected)

    def test_cancel_request_reports_cancelled(self) -> None:
        m = shared_stories()
        req = m.submit(PROMPT, max_tokens=100000, temperature=0, stop_at_eog=False)
        next(iter(req))
        req.cancel()
        self.assertEqual(req.result.finish, kestrel.FinishReason.CANCELLED)
        self.assertLess(req.result.n_generated, 100000)

    def test_close_model_while_streaming(self) -> None:
        m = kestrel.Model(stories_path(), n_threads=1)
        gen = m.stream(PROMPT, max_tokens=100000, temperature=0, stop_at_eog=False)
        self.assertTrue(next(gen) is not None)
        ctx = m.context(n_ctx=64)
        m.close()
        with self.assertRaises(kestrel.KestrelError) as cm:
            list(gen)  # ends instead of hanging or crashing, and says why
        self.assertEqual(cm.exception.status, "ERR_CANCELLED")
        with self.assertRaises(kestrel.KestrelError):
            ctx.n_ctx
        with self.assertRaises(kestrel.KestrelError):
            m.generate(PROMPT, max_tokens=4)


class ChatTest(unittest.TestCase):
    def test_chat_with_fallback_template(self) -> None:
        m = shared_stories()
        msgs = [{"role": "user", "content": "Hi!"}]
        prompt = m.chat_template(msgs)
        ids = m.tokenize(prompt, add_special=True, parse_special=True)
        self.assertEqual(ids[0], m.bos)
        self.assertEqual(m.chat(msgs, max_tokens=16, temperature=0), m.generate(ids, max_tokens=16, temperature=0))
        self.assertEqual("".join(m.chat_stream(msgs, max_tokens=16, temperature=0)), m.chat(msgs, max_tokens=16, temperature=0))

    def test_chat_with_explicit_template(self) -> None:
        import json

        with open(testdata("chat_templates", "Qwen-Qwen2.5-7B-Instruct.json"), encoding="utf-8") as f:
            template = json.load(f)["template"]
        m = shared_stories()
        msgs = [{"role": "system", "content": "Tell a story."}, {"role": "user", "content": "A dog"}]
        rendered = m.chat_template(msgs, template=template)
        self.assertTrue(rendered.startswith("<|im_start|>system\nTell a story.<|im_end|>"))
        self.assertTrue(rendered.endswith("<|im_start|>assistant\n"))
        ids = m.tokenize(rendered, add_special=True, parse_special=True)
        got = m.chat(msgs, max_tokens=20, temperature=0, template=template)
        self.assertEqual(got, m.generate(ids, max_tokens=20, temperature=0))
        self.assertTrue(got)

    def test_bos_written_by_the_template_is_not_doubled(self) -> None:
        m = shared_stories()
        ids = m._chat_prompt([{"role": "user", "content": "x"}], "{{ bos_token }}{{ messages[0].content }}", None, {})
        self.assertEqual(ids[0], m.bos)
        self.assertNotEqual(ids[1], m.bos)


class ThreadsTest(unittest.TestCase):
    def test_two_threads_share_one_model(self) -> None:
        m = shared_stories()
        prompts = [PROMPT, "The little dog"]
        expected = [m.generate(p, max_tokens=200, temperature=0) for p in prompts]
        results: dict[int, list[str]] = {0: [], 1: []}
        errors: list[BaseException] = []
        barrier = threading.Barrier(2)

        def work(i: int) -> None:
            try:
                barrier.wait()
                for k in range(4):
                    if k % 2:
                        results[i].append("".join(m.stream(prompts[i], max_tokens=200, temperature=0)))
                    else:
                        results[i].append(m.generate(prompts[i], max_tokens=200, temperature=0))
            except BaseException as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(errors, [])
        for i in range(2):
            self.assertEqual(results[i], [expected[i]] * 4)

    def test_close_while_other_threads_use_the_model(self) -> None:
        for _ in range(3):
            m = kestrel.Model(stories_path(), n_threads=1, n_parallel=2)
            started = threading.Barrier(5)
            unexpected: list[BaseException] = []

            def work(i: int) -> None:
                started.wait()
                try:
                    for _ in range(50):
                        if i % 2:
                            with m.context(n_ctx=32) as ctx:
                                ctx.decode(m.tokenize("Hello"))
                                ctx.logits()
                        else:
                            m.generate(PROMPT, max_tokens=50, temperature=0)
                except kestrel.KestrelError:
                    pass  # "closed" or "cancelled": the model went away under it
                except BaseException as e:
                    unexpected.append(e)

            threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
            for t in threads:
                t.start()
            started.wait()
            m.generate(PROMPT, max_tokens=8, temperature=0)
            m.close()
            for t in threads:
                t.join(60)
            self.assertEqual(unexpected, [])

    def test_errors_stay_on_their_thread(self) -> None:
        m = shared_stories()
        seen: list[str] = []

        def fail() -> None:
            try:
                m.detokenize([123456])
            except kestrel.KestrelError as e:
                seen.append(e.message)

        t = threading.Thread(target=fail)
        t.start()
        t.join()
        self.assertTrue(seen and "123456" in seen[0], seen)
        self.assertNotIn("123456", kestrel.errors.last_error())


if __name__ == "__main__":
    unittest.main()


class ToolCallTest(unittest.TestCase):
    TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 10}, "days": {"type": "integer"}},
        "required": ["city", "days"]}}}]

    def template(self) -> str:  # short (the stories model holds 512 tokens); the default family: Hermes
        return "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}<tool_call> for tools\nassistant: "

    def test_tools_return_parsed_calls(self) -> None:
        m = shared_stories()
        msgs = [{"role": "user", "content": "Weather in Paris?"}]
        for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
            with self.subTest(tool_choice=choice):
                r = m.chat(msgs, 300, template=self.template(), tools=self.TOOLS, tool_choice=choice, temperature=1.0,
                           seed=3)
                self.assertIsInstance(r, kestrel.ChatReply)
                self.assertEqual(r.finish_reason, "tool_calls")
                self.assertGreaterEqual(len(r.tool_calls), 1)
                for c in r.tool_calls:
                    self.assertEqual(c.name, "get_weather")
                    self.assertTrue(c.id.startswith("call_"))
                    self.assertIsInstance(c.arguments["city"], str)
                    self.assertLessEqual(len(c.arguments["city"]), 10)
                    self.assertIsInstance(c.arguments["days"], int)
        r = m.chat(msgs, 8, template=self.template(), tools=self.TOOLS, temperature=0)  # auto: prose
        self.assertIsInstance(r.content, str)
        self.assertEqual(r.tool_calls, [])
        with self.assertRaises(kestrel.KestrelError):
            m.chat(msgs, 8, template=self.template(), tools=self.TOOLS, tool_choice="nope")

    def test_reply_parser_streams_deltas(self) -> None:
        m = shared_stories()
        text = '<think>hmm</think>Sure.<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}</tool_call>'
        with m._use() as ptr, kestrel.ReplyParser(ptr, "", self.TOOLS, template="<think>{{ messages }}<tool_call>") as p:
            merged: dict = {"content": "", "reasoning_content": "", "tool_calls": []}
            for i in range(0, len(text), 3):
                d = p.push(text[i:i + 3])
                merged["content"] += d.get("content", "")
                merged["reasoning_content"] += d.get("reasoning_content", "")
                merged["tool_calls"] += d.get("tool_calls", [])
            merged["tool_calls"] += p.push("", final=True).get("tool_calls", [])
        self.assertEqual(merged["reasoning_content"], "hmm")
        self.assertEqual(merged["content"], "Sure.")
        self.assertEqual(len(merged["tool_calls"]), 1)
        self.assertEqual(merged["tool_calls"][0]["function"]["arguments"], '{"city":"Oslo","days":2}')


class StructuredOutputTest(unittest.TestCase):
    SCHEMA = {
        "type": "object",
        "properties": {"mood": {"enum": ["happy", "sad"]}, "n": {"type": "integer", "minimum": 0}},
        "required": ["mood", "n"],
        "additionalProperties": False,
    }

    def test_json_schema_gives_json_valid_under_it(self) -> None:
        import json

        m = shared_stories()
        for temperature, seed in ((0, 0), (1.0, 5)):
            with self.subTest(temperature=temperature):
                text = m.generate(PROMPT, max_tokens=300, temperature=temperature, seed=seed, json_schema=self.SCHEMA)
                value = json.loads(text)
                self.assertEqual(list(value), ["mood", "n"])
                self.assertIn(value["mood"], ("happy", "sad"))
                self.assertIsInstance(value["n"], int)
                self.assertGreaterEqual(value["n"], 0)

    def test_grammar_and_refusals(self) -> None:
        m = shared_stories()
        text = m.generate(PROMPT, max_tokens=40, temperature=0.8, seed=2, grammar='root ::= " and " ("Lily" | "Ben") "."')
        self.assertIn(text, (" and Lily.", " and Ben."))
        with self.assertRaises(kestrel.KestrelError) as e:
            m.generate(PROMPT, max_tokens=4, json_schema={"type": "string", "pattern": "a+"})
        self.assertIn("'pattern'", str(e.exception))
