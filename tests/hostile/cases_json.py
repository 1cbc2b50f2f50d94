"""Hostile request bodies for the four POST endpoints, generated from tables so that every field
meets every wrong type: broken JSON, wrong types, out-of-range values, deep nesting, huge values,
invalid UTF-8 (in the request and forced into the reply). Each is a well-formed HTTP request."""
import json

from hostile_common import Case, exchange, http

COMPL, CHAT, TOK, DETOK = "/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"
BASE = {
    COMPL: {"prompt": "Once upon a time", "max_tokens": 2, "temperature": 0},
    CHAT: {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0},
    TOK: {"content": "Hello"},
    DETOK: {"tokens": [10, 20]},
}
MIB = 1 << 20


def post(path, body, timeout=10.0, headers=None):
    """body: an object (JSON-encoded here) or raw bytes."""
    return lambda srv: http(srv.host, srv.port, "POST", path, body, headers, timeout)


def patched(path, **fields):
    b = json.loads(json.dumps(BASE[path]))
    b.update(fields)
    return b


def splice(path, key, raw):
    """BASE[path] with "key": <raw JSON bytes> added (for values json.dumps cannot write)."""
    return json.dumps(BASE[path]).encode()[:-1] + b', "' + key.encode() + b'": ' + raw + b"}"


# ---- 1. broken JSON --------------------------------------------------------------------------
BROKEN = [b"", b" ", b"{", b"}", b"[1,2", b'{"a":}', b'{"a" 1}', b"{} trailing", b"null", b"123",
          b'"str"', b"[]", b"true", b"{'a':1}", b'{"a":NaN}', b'{"a":Infinity}', b'{"a":1,}',
          b'{"a":"\\x41"}', b'{"a":1}\x00', b"\x00\x00", b'{"a":"\x01"}', b'{"a":01}',
          b'{"a":1e99999}', b'{"a":"unterminated}']


def broken_json():
    return [Case("json-syntax", f"{p} {b[:20]!r}", post(p, b), {400}) for p in BASE for b in BROKEN]


# ---- 2. wrong types: each field x each wrong type --------------------------------------------
VALUES = {"bool": True, "int": 7, "float": 1.5, "str": "x", "arr": [], "obj": {}, "null": None,
          "arr_str": ["x"], "arr_obj": [{}]}
VALID = {"str": {"str"}, "int": {"int"}, "num": {"int", "float"}, "bool": {"bool"}, "obj": {"obj"},
         "arr": {"arr"}, "stop": {"str", "arr", "arr_str"}, "content": {"str", "arr", "null"},
         "prompt": {"str", "arr", "arr_str"}}  # OpenAI also takes a prompt as an array of strings
GEN_FIELDS = [("model", "str"), ("max_tokens", "int"), ("max_completion_tokens", "int"),
              ("temperature", "num"), ("top_p", "num"), ("top_k", "int"), ("min_p", "num"),
              ("presence_penalty", "num"), ("frequency_penalty", "num"), ("repeat_penalty", "num"),
              ("seed", "int"), ("n", "int"), ("stream", "bool"), ("stream_options", "obj"),
              ("stop", "stop"), ("logit_bias", "obj")]
OWN_FIELDS = {COMPL: [("prompt", "prompt", True)], CHAT: [("messages", "arr", True)],
              TOK: [("content", "str", True), ("add_special", "bool", False), ("parse_special", "bool", False)],
              DETOK: [("tokens", "arr", True)]}


def wrong(kind, required):
    return [(t, v) for t, v in VALUES.items() if t not in VALID[kind] and (required or t != "null")]


def wrong_types():
    cases = []
    for path in (COMPL, CHAT):
        for field, kind in GEN_FIELDS:
            for t, v in wrong(kind, False):
                cases.append(Case("types", f"{path} {field}={t}", post(path, patched(path, **{field: v})),
                                  {400}, param=field))
    for path, fields in OWN_FIELDS.items():
        for field, kind, required in fields:
            for t, v in wrong(kind, required):
                cases.append(Case("types", f"{path} {field}={t}", post(path, patched(path, **{field: v})),
                                  {400}, param=field))
    # Nested fields: the element's wrong types, the error naming the top-level field.
    nested = [  # (endpoint, the field the error names, the element, its kind, null is wrong, body patch)
        (CHAT, "messages", "messages[0]", "obj", True, lambda v: {"messages": [v]}),
        (CHAT, "messages", "messages[0].role", "str", True, lambda v: {"messages": [{"role": v, "content": "Hi"}]}),
        (CHAT, "messages", "messages[0].content", "content", True,
         lambda v: {"messages": [{"role": "user", "content": v}]}),
        (COMPL, "stream_options", "stream_options.include_usage", "bool", False,
         lambda v: {"stream": True, "stream_options": {"include_usage": v}}),
        (COMPL, "logit_bias", "logit_bias[10]", "num", True, lambda v: {"logit_bias": {"10": v}}),
        (COMPL, "stop", "stop[0]", "str", True, lambda v: {"stop": [v]}),
        (DETOK, "tokens", "tokens[0]", "int", True, lambda v: {"tokens": [v]}),
    ]
    for path, param, name, kind, required, make in nested:
        for t, v in wrong(kind, required):
            cases.append(Case("types", f"{path} {name}={t}", post(path, patched(path, **make(v))), {400}, param=param))
    parts = [[7], ["x"], [[]], [None], [{"type": 7, "text": "x"}], [{"type": "text", "text": 7}],
             [{"type": "text"}], [{"text": "x"}], [{"type": "text", "text": ["x"]}]]
    for p in parts:
        body = patched(CHAT, messages=[{"role": "user", "content": p}])
        cases.append(Case("types", f"{CHAT} content parts {json.dumps(p)[:60]}", post(CHAT, body), {400}, param="messages"))
    # Part types a text model cannot use: refusing or ignoring them are both fine, failing is not.
    for p in [[{"type": "image_url", "image_url": {"url": "http://127.0.0.1/x.png"}}],
              [{"type": "text", "text": "a"}, {"type": "input_audio", "input_audio": 5}]]:
        body = patched(CHAT, messages=[{"role": "user", "content": p}])
        cases.append(Case("types", f"{CHAT} content parts {json.dumps(p)[:60]}", post(CHAT, body), "non5xx"))
    return cases


# ---- 3. out-of-range values ------------------------------------------------------------------
GEN_RANGE = [("temperature", -0.1), ("temperature", 2.01), ("temperature", 1e300), ("temperature", -1e300),
             ("top_p", -0.1), ("top_p", 1.01), ("top_k", -1), ("top_k", 2 ** 31), ("top_k", 2 ** 63),
             ("min_p", -0.1), ("min_p", 1.5), ("presence_penalty", 2.5), ("presence_penalty", -2.5),
             ("frequency_penalty", 2.5), ("frequency_penalty", -2.5), ("repeat_penalty", 0),
             ("repeat_penalty", -1), ("repeat_penalty", 1000), ("max_tokens", 0), ("max_tokens", -1),
             ("max_tokens", 2 ** 31), ("max_tokens", 2 ** 64), ("max_completion_tokens", 0), ("n", 0),
             ("n", 9), ("n", 100), ("seed", 2 ** 64), ("stop", ["s"] * 17)]
BIAS_RANGE = [{"-1": 1}, {"512": 1}, {"abc": 1}, {"1.5": 1}, {"": 1}, {"0x10": 1},
              {"99999999999999999999": 1}, {"1": 101}, {"1": -101}, {"1": 1e300}]


def out_of_range(n_vocab):
    cases = []
    for path in (COMPL, CHAT):
        for field, v in GEN_RANGE:
            cases.append(Case("range", f"{path} {field}={str(v)[:20]}", post(path, patched(path, **{field: v})),
                              {400}, param=field))
        for lb in BIAS_RANGE:
            cases.append(Case("range", f"{path} logit_bias={json.dumps(lb)[:30]}",
                              post(path, patched(path, logit_bias=lb)), {400}, param="logit_bias"))
        ban = {str(i): -100 for i in range(n_vocab)}
        cases.append(Case("range", f"{path} logit_bias bans every token", post(path, patched(path, logit_bias=ban)),
                          {400}, param="logit_bias"))
        ban = {str(i): -100 for i in range(n_vocab)}
        cases.append(Case("range", f"{path} logit_bias bans every token (stream)",
                          post(path, patched(path, logit_bias=ban, stream=True)), {400}, param="logit_bias"))
    for v in [-1, n_vocab, 2 ** 31, 2 ** 63, 2 ** 64, -(2 ** 63) - 1]:
        cases.append(Case("range", f"{DETOK} tokens=[{v}]", post(DETOK, {"tokens": [1, v]}), {400}, param="tokens"))
    msgs = [
        ("messages=[]", []), ("messages=[{}]", [{}]), ("5000 messages", [{"role": "user", "content": "a"}] * 5000)]
    for name, m in msgs:
        cases.append(Case("range", f"{CHAT} {name}", post(CHAT, patched(CHAT, messages=m)), {400}, param="messages"))
    cases.append(Case("range", f"{CHAT} unknown role", post(CHAT, patched(CHAT, messages=[{"role": "wizard", "content": "x"}])),
                      "non5xx"))
    cases.append(Case("range", f"{COMPL} model not served", post(COMPL, patched(COMPL, model="gpt-4")), {404}, param="model"))
    cases.append(Case("range", f"{COMPL} prompt longer than the context",
                      post(COMPL, patched(COMPL, prompt="Once upon a time " * 3000)), {400}))
    cases.append(Case("range", f"{CHAT} messages longer than the context",
                      post(CHAT, patched(CHAT, messages=[{"role": "user", "content": "Once upon a time " * 3000}])), {400}))
    return cases


# ---- 4. deep nesting ---------------------------------------------------------------------------
def deep_arr(n):
    return b"[" * n + b"]" * n


def deep_obj(n):
    return b'{"a":' * n + b"1" + b"}" * n


def nesting():
    msg_arr = b'{"messages": [{"role": "user", "content": "Hi", "extra": ' + deep_arr(100000) + b'}], "max_tokens": 2}'
    msg_obj = b'{"messages": [{"role": "user", "content": "Hi", "extra": ' + deep_obj(100000) + b'}], "max_tokens": 2}'
    msg_70 = b'{"messages": [{"role": "user", "content": "Hi", "extra": ' + deep_arr(70) + b'}], "max_tokens": 2}'
    msg_content = b'{"messages": [{"role": "user", "content": ' + deep_arr(100000) + b'}], "max_tokens": 2}'
    specs = [
        (CHAT, "100000-deep arrays in a message's extra field", msg_arr),
        (CHAT, "100000-deep objects in a message's extra field", msg_obj),
        (CHAT, "70-deep arrays in a message's extra field (limit 64)", msg_70),
        (CHAT, "100000-deep arrays as a message's content", msg_content),
        (CHAT, "100000-deep arrays as a top-level extra field", splice(CHAT, "extra", deep_arr(100000))),
        (COMPL, "100000-deep arrays as a top-level extra field", splice(COMPL, "extra", deep_arr(100000))),
        (COMPL, "100000-deep objects as a top-level extra field", splice(COMPL, "extra", deep_obj(100000))),
        (COMPL, "100000-deep arrays as the model", splice(COMPL, "model", deep_arr(100000))),
        (COMPL, "100000-deep arrays as stop", splice(COMPL, "stop", deep_arr(100000))),
        (COMPL, "100000-deep arrays as a logit_bias value", splice(COMPL, "logit_bias", b'{"1": ' + deep_arr(100000) + b"}")),
        (COMPL, "1000-deep arrays as a top-level extra field", splice(COMPL, "extra", deep_arr(1000))),
        (TOK, "100000-deep arrays as content", splice(TOK, "content", deep_arr(100000))),
        (DETOK, "100000-deep arrays as tokens", b'{"tokens": ' + deep_arr(100000) + b"}"),
        (TOK, "the whole body 100000-deep arrays", deep_arr(100000)),
    ]
    return [Case("nesting", f"{p} {name}", post(p, body), {400}) for p, name, body in specs]


# ---- 5. huge values ----------------------------------------------------------------------------
def huge_body(srv):
    """A 9 MiB body (over the 8 MiB default): 413, possibly before the body is read."""
    body = json.dumps({"prompt": "a" * (9 * MIB)}).encode()
    head = (f"POST {COMPL} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    return exchange(srv.host, srv.port, head + body, timeout=20)


def huge():
    wide = b'{"content": "Hello", "extra": [' + b",".join([b"1"] * 500000) + b"]}"
    many_keys = b'{"content": "Hello", "extra": {' + b",".join(b'"k%d":0' % i for i in range(200000)) + b"}}"
    return [
        Case("huge", "9 MiB body", huge_body, {413}, allow_closed=False),
        Case("huge", "1 MB model name", post(COMPL, patched(COMPL, model="m" * MIB)), {400, 404}, param="model"),
        Case("huge", "16 stop strings of 64 KB", post(COMPL, patched(COMPL, stop=["s" * 65536] * 16)), "non5xx"),
        Case("huge", "1 MB /tokenize content", post(TOK, {"content": "Once upon a time. " * 60000}, timeout=30), "non5xx"),
        Case("huge", "300000 tokens to /detokenize", post(DETOK, {"tokens": [65] * 300000}, timeout=30), "non5xx"),
        Case("huge", "500000-element array in an extra field", post(TOK, wide), "non5xx"),
        Case("huge", "200000 keys in an extra object", post(TOK, many_keys), "non5xx"),
        Case("huge", "1 MB role string", post(CHAT, patched(CHAT, messages=[{"role": "r" * MIB, "content": "x"}])), "non5xx"),
    ]


# ---- 6. invalid UTF-8 in, invalid UTF-8 forced out ---------------------------------------------
BAD_UTF8 = [b"\xff", b"\xc3", b"\xc3(", b"\xe2\x82", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80"]


def utf8_in():
    # (endpoint, field name, body with @ where the bad bytes go)
    spots = [
        (COMPL, "prompt", b'{"prompt": "Once @ upon", "max_tokens": 2}'),
        (COMPL, "model", b'{"prompt": "Once", "model": "qwen@", "max_tokens": 2}'),
        (COMPL, "stop", b'{"prompt": "Once", "stop": ["@"], "max_tokens": 2}'),
        (COMPL, "logit_bias key", b'{"prompt": "Once", "logit_bias": {"1@": 1}, "max_tokens": 2}'),
        (COMPL, "an extra key", b'{"prompt": "Once", "@": 1, "max_tokens": 2}'),
        (CHAT, "content", b'{"messages": [{"role": "user", "content": "Hi @"}], "max_tokens": 2}'),
        (CHAT, "role", b'{"messages": [{"role": "us@er", "content": "Hi"}], "max_tokens": 2}'),
        (CHAT, "a content part", b'{"messages": [{"role": "user", "content": [{"type": "text", "text": "@"}]}], "max_tokens": 2}'),
        (TOK, "content", b'{"content": "He@llo"}'),
    ]
    cases = []
    for path, field, tmpl in spots:
        for bad in BAD_UTF8:
            cases.append(Case("utf8", f"{path} {field} holds {bad!r}", post(path, tmpl.replace(b"@", bad)), {400}))
    for esc in [b"\\ud800", b"\\udc00x", b"\\ud800\\u0041", b"\\udbff\\udbff"]:
        cases.append(Case("utf8", f"{COMPL} prompt holds escaped {esc.decode()}",
                          post(COMPL, b'{"prompt": "Once ' + esc + b'", "max_tokens": 2}'), "non5xx", check=utf8_reply))
        cases.append(Case("utf8", f"{TOK} content holds escaped {esc.decode()}",
                          post(TOK, b'{"content": "a' + esc + b'"}'), "non5xx", check=utf8_reply))
    for s in ["\u0000", "\uffff", "\U0001F600 \u4e2d\u6587", "\u200b\u202e"]:
        cases.append(Case("utf8", f"{TOK} valid but odd text {s!r}", post(TOK, {"content": s}), {200}))
    return cases


def utf8_reply(r):
    """The reply must be strict UTF-8 JSON without lone surrogate escapes."""
    try:
        j = json.loads(r.body.decode("utf-8"))
        json.dumps(j, ensure_ascii=False).encode("utf-8")
    except (UnicodeError, ValueError) as e:
        return f"reply is not valid UTF-8 JSON ({e}): {r.body[:200]!r}"
    return None


def utf8_out(byte_ids):
    """byte_ids: token ids whose pieces are a lone lead byte, a continuation byte, 0xFF."""
    cases = []
    for name, t in byte_ids.items():
        cases.append(Case("utf8", f"{DETOK} the lone byte token {name}", post(DETOK, {"tokens": [t]}), {200}, check=utf8_reply))
    lead = byte_ids["lead 0xE2"]
    for path in (COMPL, CHAT):
        for n in (1, 3):
            body = patched(path, logit_bias={str(lead): 100}, max_tokens=n)
            cases.append(Case("utf8", f"{path} logit_bias forces {n} lone lead byte(s), not streamed", post(path, body),
                              {200}, check=utf8_reply))
    return cases


def all_cases(n_vocab, byte_ids):
    return (broken_json() + wrong_types() + out_of_range(n_vocab) + nesting() + huge() + utf8_in()
            + utf8_out(byte_ids))


def sanity():
    """Well-formed requests that must succeed: the baseline the hostile cases differ from."""
    return [Case("sanity", f"{p} base body", post(p, BASE[p]), {200}, check=utf8_reply) for p in BASE]

