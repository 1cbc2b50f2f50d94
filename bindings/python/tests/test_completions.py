"""create_completion / create_chat_completion: llama-cpp-python's calls returning OpenAI's dicts
(plain and streamed), equal to generate/chat, with usage counts, stop strings, structured output,
tool calls, and unknown keywords refused."""

from __future__ import annotations

import json
import unittest

import kestrel

from ._util import shared_stories

PROMPT = "Once upon a time"
MSGS = [{"role": "user", "content": "Hi!"}]


class CompletionTest(unittest.TestCase):
    def test_completion_is_openai_shaped_and_equals_generate(self) -> None:
        m = shared_stories()
        r = m.create_completion(PROMPT, max_tokens=20, temperature=0)
        self.assertEqual(set(r), {"id", "object", "created", "model", "choices", "usage"})
        self.assertEqual(r["object"], "text_completion")
        self.assertTrue(r["id"].startswith("cmpl-"))
        self.assertIsInstance(r["created"], int)
        self.assertEqual(r["model"], m.path)
        self.assertEqual(len(r["choices"]), 1)
        c = r["choices"][0]
        self.assertEqual(c["index"], 0)
        self.assertIsNone(c["logprobs"])
        self.assertEqual(c["text"], m.generate(PROMPT, max_tokens=20, temperature=0))
        self.assertEqual(c["finish_reason"], "length")
        n_prompt = len(m.tokenize(PROMPT))
        self.assertEqual(r["usage"], {"prompt_tokens": n_prompt, "completion_tokens": 20, "total_tokens": n_prompt + 20})
        self.assertEqual(m.create_completion(PROMPT, temperature=0, model="stories")["model"], "stories")
        self.assertEqual(m.create_completion(PROMPT, temperature=0)["usage"]["completion_tokens"], 16)  # the default

    def test_stop_and_sampling_keywords(self) -> None:
        m = shared_stories()
        r = m.create_completion(PROMPT, max_tokens=64, temperature=0, stop=["Lily"])
        self.assertEqual(r["choices"][0]["finish_reason"], "stop")
        self.assertEqual(r["choices"][0]["text"], m.generate(PROMPT, max_tokens=64, temperature=0, stop=["Lily"]))
        self.assertNotIn("Lily", r["choices"][0]["text"])
        a = m.create_completion(PROMPT, max_tokens=24, temperature=0.9, top_p=0.9, top_k=20, min_p=0.01, seed=11,
                                repeat_penalty=1.1, presence_penalty=0.2, frequency_penalty=0.1, logit_bias={"13": -1})
        b = m.generate(PROMPT, max_tokens=24, temperature=0.9, top_p=0.9, top_k=20, min_p=0.01, seed=11,
                       repeat_penalty=1.1, presence_penalty=0.2, frequency_penalty=0.1, logit_bias={13: -1.0})
        self.assertEqual(a["choices"][0]["text"], b)

    def test_streamed_completion_chunks(self) -> None:
        m = shared_stories()
        chunks = list(m.create_completion(PROMPT, max_tokens=20, temperature=0, stream=True,
                                          stream_options={"include_usage": True}))
        self.assertEqual(len({c["id"] for c in chunks}), 1)
        self.assertTrue(all(c["object"] == "text_completion" for c in chunks))
        body, last, usage = chunks[:-2], chunks[-2], chunks[-1]
        self.assertTrue(all(c["choices"][0]["finish_reason"] is None for c in body))
        self.assertEqual(last["choices"][0]["finish_reason"], "length")
        text = "".join(c["choices"][0]["text"] for c in chunks[:-1])
        self.assertEqual(text, m.generate(PROMPT, max_tokens=20, temperature=0))
        self.assertEqual(usage["choices"], [])
        self.assertEqual(usage["usage"]["completion_tokens"], 20)

    def test_unknown_keywords_raise_type_error_naming_them(self) -> None:
        m = shared_stories()
        with self.assertRaises(TypeError) as e:
            m.create_completion(PROMPT, logprobs=3, mirostat_mode=2)
        self.assertIn("'logprobs'", str(e.exception))
        self.assertIn("'mirostat_mode'", str(e.exception))
        with self.assertRaises(TypeError) as e:
            m.create_chat_completion(MSGS, functions=[])
        self.assertIn("'functions'", str(e.exception))
        with self.assertRaises(TypeError):
            m.create_completion(PROMPT, tools=[])  # a chat keyword
        with self.assertRaises(ValueError):
            m.create_completion(PROMPT, response_format={"type": "yaml"})


class ChatCompletionTest(unittest.TestCase):
    def test_chat_completion_is_openai_shaped_and_equals_chat(self) -> None:
        m = shared_stories()  # no chat template in the file: the fallback format
        r = m.create_chat_completion(MSGS, max_tokens=16, temperature=0)
        self.assertEqual(set(r), {"id", "object", "created", "model", "choices", "usage"})
        self.assertEqual(r["object"], "chat.completion")
        self.assertTrue(r["id"].startswith("chatcmpl-"))
        c = r["choices"][0]
        self.assertEqual(c["index"], 0)
        self.assertEqual(c["message"], {"role": "assistant", "content": m.chat(MSGS, max_tokens=16, temperature=0)})
        self.assertEqual(c["finish_reason"], "length")
        n_prompt = len(m.chat_tokenize(m.chat_template(MSGS)))
        self.assertEqual(r["usage"], {"prompt_tokens": n_prompt, "completion_tokens": 16, "total_tokens": n_prompt + 16})
        template = "{% for m in messages %}{{ m.content }}{% endfor %} Once upon a time"
        r = m.create_chat_completion(MSGS, max_tokens=64, temperature=0, template=template, stop=".")
        self.assertEqual(r["choices"][0]["finish_reason"], "stop")
        self.assertEqual(r["choices"][0]["message"]["content"],
                         m.chat(MSGS, max_tokens=64, temperature=0, template=template, stop="."))

    def test_streamed_chat_chunks(self) -> None:
        m = shared_stories()
        chunks = list(m.create_chat_completion(MSGS, max_tokens=16, temperature=0, stream=True))
        self.assertEqual(len({c["id"] for c in chunks}), 1)
        self.assertTrue(all(c["object"] == "chat.completion.chunk" for c in chunks))
        self.assertEqual(chunks[0]["choices"][0]["delta"], {"role": "assistant", "content": ""})
        self.assertEqual(chunks[-1]["choices"][0], {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"})
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
        self.assertEqual(text, m.chat(MSGS, max_tokens=16, temperature=0))

    def test_leaving_a_stream_early_cancels_it(self) -> None:
        m = shared_stories()
        it = m.create_chat_completion(MSGS, max_tokens=400, temperature=0.8, seed=1, stream=True)
        next(it), next(it)
        it.close()
        self.assertEqual(m.engine_stats()["requests_running"], 0)

    def test_response_format_json_schema(self) -> None:
        m = shared_stories()
        schema = {"type": "object", "properties": {"mood": {"enum": ["happy", "sad"]}}, "required": ["mood"],
                  "additionalProperties": False}
        for fmt in ({"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
                    {"type": "json_object", "schema": schema}):
            with self.subTest(fmt=fmt["type"]):
                r = m.create_chat_completion(MSGS, max_tokens=100, temperature=0, response_format=fmt)
                self.assertIn(json.loads(r["choices"][0]["message"]["content"])["mood"], ("happy", "sad"))
        r = m.create_completion(PROMPT, max_tokens=100, temperature=0, response_format={"type": "json_object", "schema": schema})
        self.assertIn(json.loads(r["choices"][0]["text"])["mood"], ("happy", "sad"))
        r = m.create_completion(PROMPT, max_tokens=8, temperature=0, response_format={"type": "json_object"})
        self.assertTrue(r["choices"][0]["text"].lstrip().startswith("{"), r)  # any object (cut short here)

    TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 10}}, "required": ["city"]}}}]
    TEMPLATE = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}<tool_call> for tools\nassistant: "

    def test_tool_calls_plain_and_streamed(self) -> None:
        m = shared_stories()
        msgs = [{"role": "user", "content": "Weather in Paris?"}]
        kw = dict(max_tokens=300, template=self.TEMPLATE, tools=self.TOOLS, tool_choice="required", temperature=1.0,
                  seed=3)
        r = m.create_chat_completion(msgs, **kw)
        c = r["choices"][0]
        self.assertEqual(c["finish_reason"], "tool_calls")
        calls = c["message"]["tool_calls"]
        self.assertGreaterEqual(len(calls), 1)
        self.assertEqual(calls[0]["type"], "function")
        self.assertEqual(calls[0]["function"]["name"], "get_weather")
        self.assertTrue(calls[0]["id"].startswith("call_"))
        self.assertIsInstance(json.loads(calls[0]["function"]["arguments"])["city"], str)
        chunks = list(m.create_chat_completion(msgs, stream=True, **kw))
        self.assertEqual(chunks[-1]["choices"][0]["finish_reason"], "tool_calls")
        streamed = [t for ch in chunks for t in ch["choices"][0]["delta"].get("tool_calls", [])]
        self.assertEqual([t["function"]["name"] for t in streamed if "name" in t.get("function", {})],
                         [t["function"]["name"] for t in calls])
        args = "".join(t["function"].get("arguments", "") for t in streamed if t["index"] == 0)
        self.assertEqual(json.loads(args), json.loads(calls[0]["function"]["arguments"]))


if __name__ == "__main__":
    unittest.main()
