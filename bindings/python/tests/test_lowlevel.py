"""Context/Batch/Sampler: a hand-written greedy loop equals generate(temperature=0); KV operations;
one Context per thread."""

from __future__ import annotations

import json
import threading
import unittest
from array import array

import kestrel

from ._util import shared_stories

PROMPT = "Once upon a time"


def greedy_loop(ctx: kestrel.Context, model: kestrel.Model, prompt: str, n: int) -> list[int]:
    ctx.kv_clear()
    ctx.decode(model.tokenize(prompt))
    out: list[int] = []
    for _ in range(n):
        tok = ctx.argmax()
        if model.is_eog(tok):
            break
        out.append(tok)
        ctx.decode([tok])
    return out


def engine_tokens(model: kestrel.Model, prompt: str, n: int) -> list[int]:
    req = model.submit(prompt, max_tokens=n, temperature=0)
    req.text()
    return [t for t in req.tokens if not model.is_eog(t)]


class ContextTest(unittest.TestCase):
    def test_greedy_loop_equals_generate(self) -> None:
        m = shared_stories()
        with m.context(n_ctx=256, n_threads=1) as ctx:
            self.assertEqual(ctx.n_ctx, 256)
            self.assertTrue(ctx.backend)
            toks = greedy_loop(ctx, m, PROMPT, 40)
            self.assertEqual(toks, engine_tokens(m, PROMPT, 40))
            d = m.detokenizer()
            self.assertEqual("".join(d.push(t) for t in toks) + d.flush(), m.generate(PROMPT, max_tokens=40, temperature=0))

    def test_sampler_greedy_and_logits_types(self) -> None:
        m = shared_stories()
        ctx = kestrel.Context(m, n_ctx=128, n_threads=1)
        ctx.decode(kestrel.Batch(m.tokenize(PROMPT)))
        logits = ctx.logits()
        self.assertIsInstance(logits, array)
        self.assertEqual(len(logits), m.n_vocab)
        with kestrel.Sampler(temperature=0) as s:
            best = max(range(len(logits)), key=logits.__getitem__)
            self.assertEqual(s.sample(logits), best)
            self.assertEqual(s.sample(list(logits)), best)
            self.assertEqual(s.sample_context(ctx), best)
            s.accept(best)
            s.reset()
        seeded = [kestrel.Sampler(temperature=1.0, seed=3).sample(logits) for _ in range(2)]
        self.assertEqual(seeded[0], seeded[1])
        banned = kestrel.Sampler(temperature=0, logit_bias={best: float("-inf")}).sample(logits)
        self.assertNotEqual(banned, best)
        s.close()
        with self.assertRaises(kestrel.KestrelError):
            s.sample(logits)
        ctx.close()
        with self.assertRaises(kestrel.KestrelError):
            ctx.logits()

    def test_sampler_grammar_in_a_hand_written_loop(self) -> None:
        m = shared_stories()
        schema = '{"type": "object", "properties": {"mood": {"enum": ["happy", "sad"]}}, "required": ["mood"], ' \
                 '"additionalProperties": false}'
        with m.context(n_ctx=256, n_threads=1) as ctx, kestrel.Sampler(temperature=1.0, seed=5) as s:
            def loop(n: int) -> str:
                ctx.kv_clear()
                ctx.decode(m.tokenize(PROMPT))
                d = m.detokenizer()
                text = ""
                for _ in range(n):
                    tok = s.sample_context(ctx)
                    if m.is_eog(tok):
                        break
                    text += d.push(tok)
                    ctx.decode([tok])
                return text + d.flush()
            s.set_grammar(m, json_schema=schema)
            self.assertIn(json.loads(loop(64)), [{"mood": "happy"}, {"mood": "sad"}])
            s.set_grammar(m)  # unconstrained again: the stories model writes prose
            self.assertRaises(ValueError, json.loads, loop(16))
            with self.assertRaises(kestrel.KestrelError):
                s.set_grammar(m, json_schema='{"type": "string", "pattern": "a+"}')
            # A reply parser forcing a call: the loop's text is the family's call.
            tmpl = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}" \
                   "{% if tools %}<tools>{{ tools | tojson }}</tools>{% endif %}<|im_start|>assistant\n"
            tools = [{"type": "function", "function": {"name": "f", "parameters": {
                "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}]
            with m._use() as ptr, kestrel.ReplyParser(ptr, "", tools, "required", template=tmpl) as p:
                s.set_grammar(m, reply=p)
                d = m.detokenizer()
                d.show_markers(p)
                text = loop(120)
                self.assertTrue(text.lstrip().startswith("<tool_call>"), text)

    def test_batch_rows_positions_and_sequences(self) -> None:
        m = shared_stories()
        toks = m.tokenize(PROMPT)
        n = len(toks)
        with m.context(n_ctx=256, n_seq_max=2, n_threads=1) as ctx:
            ctx.decode(kestrel.Batch(toks, positions=list(range(n)), seq_ids=[0] * n, logits=[True] * n))
            last = ctx.logits(n - 1)
            self.assertEqual(ctx.logits(-1), last)
            self.assertEqual(len(ctx.logits(0)), m.n_vocab)
            self.assertEqual(ctx.kv_seq_pos_max(0), n - 1)
            self.assertEqual(ctx.kv_seq_pos_max(1), -1)
            # Fork sequence 0 into 1: the same next token from either.
            ctx.kv_seq_copy(0, 1)
            self.assertEqual(ctx.kv_seq_pos_max(1), n - 1)
            nxt = ctx.argmax()
            ctx.decode(kestrel.Batch([nxt, nxt], positions=[n, n], seq_ids=[0, 1], logits=[True, True]))
            self.assertEqual(ctx.logits(0), ctx.logits(1))
            ctx.kv_seq_keep(1)
            self.assertEqual(ctx.kv_seq_pos_max(0), -1)
            ctx.kv_seq_remove(1, n, -1)
            self.assertEqual(ctx.kv_seq_pos_max(1), n - 1)
            ctx.kv_clear()
            self.assertEqual(ctx.kv_seq_pos_max(1), -1)
            with self.assertRaises(ValueError):
                ctx.decode(kestrel.Batch([1, 2], positions=[0]))
            with self.assertRaises(kestrel.KestrelError) as cm:
                ctx.logits(5)
            self.assertEqual(cm.exception.status, "ERR_OUT_OF_RANGE")
            with self.assertRaises(kestrel.KestrelError) as cm:
                ctx.decode([m.n_vocab + 5])
            self.assertTrue(cm.exception.message)

    def test_context_full(self) -> None:
        m = shared_stories()
        with m.context(n_ctx=16, n_threads=1) as ctx:
            with self.assertRaises(kestrel.KestrelError) as cm:
                ctx.decode(m.tokenize("one two three four five six seven eight nine ten eleven twelve thirteen"))
            self.assertIn(cm.exception.status, ("ERR_CONTEXT_FULL", "ERR_INVALID_ARGUMENT"))

    def test_fp8_kv_cache(self) -> None:
        m = shared_stories()
        with m.context(n_ctx=64, n_threads=1, kv_type="f8_e4m3") as ctx:
            toks = greedy_loop(ctx, m, PROMPT, 8)
            self.assertEqual(len(toks), 8)
        with self.assertRaises(ValueError):
            m.context(n_ctx=64, kv_type="q5_0")
        with self.assertRaises(ValueError):
            m.context(n_ctx=64, kv_type="q8_0", kv_type_v="iq4_nl")

    def test_quantized_kv_cache(self) -> None:
        # Q8_0 K and Q4_0 V reach the library: a greedy loop runs, and the logits move from F16's.
        m = shared_stories()
        ids = m.tokenize(PROMPT)
        last = {}
        for k, v in (("f16", None), ("q8_0", "q4_0")):
            with m.context(n_ctx=64, n_threads=1, kv_type=k, kv_type_v=v) as ctx:
                ctx.decode(ids)
                last[k] = list(ctx.logits(-1))
                self.assertEqual(len(greedy_loop(ctx, m, PROMPT, 4)), 4)
        self.assertNotEqual(last["f16"], last["q8_0"])

    def test_profiling(self) -> None:
        m = shared_stories()
        with m.context(n_ctx=64, n_threads=1) as ctx:
            ctx.set_profiling(True)
            ctx.decode(m.tokenize(PROMPT))
            prof = ctx.profile(reset=True)
            self.assertTrue(prof and {"op", "calls", "seconds"} <= set(prof[0]))

    def test_a_context_per_thread(self) -> None:
        m = shared_stories()
        prompts = [PROMPT, "The little dog", "Lily and Ben"]
        expected = [engine_tokens(m, p, 48) for p in prompts]
        got: dict[int, list[list[int]]] = {}
        errors: list[BaseException] = []

        def work(i: int) -> None:
            try:
                with m.context(n_ctx=128, n_threads=1) as ctx:
                    got[i] = [greedy_loop(ctx, m, prompts[i], 48) for _ in range(3)]
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(errors, [])
        for i in range(len(prompts)):
            self.assertEqual(got[i], [expected[i]] * 3)


if __name__ == "__main__":
    unittest.main()
