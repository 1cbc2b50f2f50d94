"""Hugging Face tokenizer.json + tokenizer_config.json -> the GGUF tokenizer.* keys.

Choices (see also docs in hf_to_gguf.py's --help):
- tokens: id order, vocab + added_tokens; ids nobody claims become "[PAD<i>]" of type UNUSED.
- token_type: CONTROL for added tokens with special=true, USER_DEFINED for special=false,
  UNKNOWN for model.unk_token, BYTE for "<0xXX>" in byte-fallback vocabularies, else NORMAL.
- scores: -(1 + rank of the first merge that produces the token); 0 for tokens no merge produces
  (single characters, bytes, added tokens). The merges decide BPE; the scores only make the
  score-ordered SentencePiece algorithm approximate it if a reader ignores the merges.
- merges: "left right" in rank order. The pair form ["a", "b"] may hold a space inside a part;
  such a merge can never fire here (the byte-level mapping and the U+2581 normalizer remove every
  space before BPE), so it is dropped with a note and every written merge has exactly one space.
"""

import gzip
import json
import os
import re

import pretokenizer
from gguf_writer import ValueType as T

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
# added_token_flags bits (HF AddedToken).
FLAG_LSTRIP, FLAG_RSTRIP, FLAG_SINGLE_WORD, FLAG_NORMALIZED = 1, 2, 4, 8

_BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")
# End-of-turn / end-of-message tokens by text (tokenizer_config.json has no field for them).
_EOT_TEXTS = ["<|eot_id|>", "<|im_end|>", "<end_of_turn>", "<|end|>", "<|eot|>"]
_EOM_TEXTS = ["<|eom_id|>", "<|call|>"]


class ConvertError(ValueError):
    """The input is missing, malformed or cannot be expressed; the message names what."""


def _read_json(path):
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            return json.loads(f.read())
    except (OSError, ValueError) as e:
        raise ConvertError(f"{path}: cannot read JSON ({e})") from None


def load_hf_files(hf_dir):
    """(tokenizer.json, tokenizer_config.json or {}, config.json or None, chat template file or None)."""
    tok_path = os.path.join(hf_dir, "tokenizer.json")
    if not os.path.exists(tok_path) and os.path.exists(tok_path + ".gz"):
        tok_path += ".gz"
    if not os.path.exists(tok_path):
        raise ConvertError(f"{hf_dir}: no tokenizer.json (or tokenizer.json.gz)")
    tok = _read_json(tok_path)
    cfg_path = os.path.join(hf_dir, "tokenizer_config.json")
    cfg = _read_json(cfg_path) if os.path.exists(cfg_path) else {}
    model_cfg_path = os.path.join(hf_dir, "config.json")
    model_cfg = _read_json(model_cfg_path) if os.path.exists(model_cfg_path) else None
    template = None
    jinja = os.path.join(hf_dir, "chat_template.jinja")
    if os.path.exists(jinja):
        with open(jinja, encoding="utf-8") as f:
            template = f.read()
    elif os.path.exists(os.path.join(hf_dir, "chat_template.json")):
        template = _read_json(os.path.join(hf_dir, "chat_template.json")).get("chat_template")
    for name, obj in (("tokenizer.json", tok), ("tokenizer_config.json", cfg)):
        if not isinstance(obj, dict):
            raise ConvertError(f"{hf_dir}/{name}: top level is not an object")
    return tok, cfg, model_cfg, template


def _merge_pairs(merges, notes):
    """[(left, right)] in rank order from either merge format; drops pairs that hold a space."""
    pairs, dropped = [], 0
    for i, m in enumerate(merges):
        if type(m) is list and len(m) == 2 and type(m[0]) is str and type(m[1]) is str and m[0] and m[1]:
            if " " in m[0] or " " in m[1]:
                dropped += 1
            else:
                pairs.append((m[0], m[1]))
        elif isinstance(m, str):
            parts = m.split(" ")
            if len(parts) != 2 or not parts[0] or not parts[1]:
                raise ConvertError(f"tokenizer.json model.merges[{i}] {m!r} is not 'left right'")
            pairs.append((parts[0], parts[1]))
        else:
            raise ConvertError(f"tokenizer.json model.merges[{i}] {m!r} is neither 'a b' nor ['a', 'b']")
    if dropped:
        notes.append(f"{dropped} merges contain a space inside a part; they cannot fire and were dropped")
    return pairs


def _token_text(value, what):
    """bos_token etc.: a string, an AddedToken dict, or null."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    raise ConvertError(f"tokenizer_config.json {what} {value!r} is neither a string nor an AddedToken")


def _template_specials(post, name_to_id):
    """Ids TemplateProcessing puts before and after the single sequence, or None without one."""
    for node in pretokenizer._flatten(post, "processors"):
        if node.get("type") != "TemplateProcessing":
            continue
        before, after, seen_a = [], [], False
        specials = node.get("special_tokens") or {}
        for item in node.get("single") or []:
            if "Sequence" in item:
                seen_a = True
            elif "SpecialToken" in item:
                key = item["SpecialToken"].get("id")
                ids = (specials.get(key) or {}).get("ids")
                if ids is None:
                    ids = [name_to_id[key]] if key in name_to_id else []
                (after if seen_a else before).extend(ids)
        return before, after
    return None


class VocabResult:
    def __init__(self):
        self.kv = []     # (key, ValueType, value) in write order; arrays as (ARRAY, (elem, list))
        self.notes = []  # things the user should know (printed by the CLI)
        self.model = ""

    def add(self, key, vtype, value):
        self.kv.append((key, vtype, value))

    def add_array(self, key, elem, values):
        self.kv.append((key, T.ARRAY, (elem, values)))


def build_vocab(tok, cfg, template_file=None):
    """The tokenizer.* keys for tokenizer.json `tok` and tokenizer_config.json `cfg`."""
    r = VocabResult()
    model = tok.get("model") or {}
    mtype = model.get("type")
    if mtype != "BPE":
        raise ConvertError(f"tokenizer.json model.type {mtype!r} is not supported (only BPE)")
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise ConvertError(f"tokenizer.json model.{key} {model[key]!r} is not supported")
    if model.get("dropout"):
        r.notes.append(f"BPE dropout {model['dropout']} ignored (inference does not use it)")
    try:
        pipe = pretokenizer.analyze(tok)
    except pretokenizer.UnsupportedTokenizer as e:
        raise ConvertError(f"tokenizer.json: {e}") from None
    r.notes.extend(pipe.notes)
    byte_fallback = bool(model.get("byte_fallback"))
    if pipe.byte_level and not pipe.spaces_to_mark:
        r.model = "gpt2"
    elif pipe.spaces_to_mark and not pipe.byte_level:
        r.model = "llama"
        if not byte_fallback:
            r.notes.append("U+2581 BPE without byte_fallback: characters outside the vocabulary become <unk>")
    else:
        raise ConvertError("tokenizer.json: BPE with neither a ByteLevel pre-tokenizer nor a space -> U+2581 "
                           "normalizer/Metaspace (or both) is not supported")

    # ---- tokens in id order ----
    vocab = model.get("vocab")
    if not isinstance(vocab, dict) or not vocab:
        raise ConvertError("tokenizer.json model.vocab is missing or not an object")
    added = tok.get("added_tokens") or []
    n = 0
    for text, i in vocab.items():
        if not isinstance(i, int) or i < 0 or i >= 1 << 24:
            raise ConvertError(f"tokenizer.json model.vocab[{text!r}] = {i!r} is not a token id")
        n = max(n, i + 1)
    for a in added:
        if not isinstance(a, dict) or not isinstance(a.get("id"), int) or not isinstance(a.get("content"), str):
            raise ConvertError(f"tokenizer.json added_tokens entry {a!r} lacks an integer id or string content")
        if not 0 <= a["id"] < 1 << 24:
            raise ConvertError(f"tokenizer.json added token {a['content']!r} has id {a['id']} out of range")
        n = max(n, a["id"] + 1)
    texts = [None] * n
    types = [NORMAL] * n
    flags = [0] * n
    for text, i in vocab.items():
        if texts[i] is not None:
            raise ConvertError(f"tokenizer.json model.vocab: id {i} is used by {texts[i]!r} and {text!r}")
        texts[i] = text
        if r.model == "llama" and byte_fallback and _BYTE_TOKEN.fullmatch(text):
            types[i] = BYTE
    name_to_id = dict(vocab)
    for a in added:
        i, content = a["id"], a["content"]
        if texts[i] is not None and texts[i] != content:
            r.notes.append(f"added token {content!r} replaces vocab entry {texts[i]!r} at id {i}")
        texts[i] = content
        name_to_id[content] = i
        types[i] = CONTROL if a.get("special") else USER_DEFINED
        flags[i] = ((FLAG_LSTRIP if a.get("lstrip") else 0) | (FLAG_RSTRIP if a.get("rstrip") else 0)
                    | (FLAG_SINGLE_WORD if a.get("single_word") else 0)
                    | (FLAG_NORMALIZED if a.get("normalized") else 0))
    unk_text = model.get("unk_token")
    if unk_text is not None and unk_text in name_to_id:
        types[name_to_id[unk_text]] = UNKNOWN
    gaps = [i for i in range(n) if texts[i] is None]
    for i in gaps:
        texts[i] = f"[PAD{i}]"
        types[i] = UNUSED
    if gaps:
        r.notes.append(f"{len(gaps)} unused ids filled with [PAD<i>] tokens (first: {gaps[0]})")

    # ---- merges and scores ----
    merges = _merge_pairs(model.get("merges") or [], r.notes)
    scores = [0.0] * n
    seen = set()
    for rank, (left, right) in enumerate(merges):
        i = name_to_id.get(left + right)
        if i is not None and i not in seen and types[i] == NORMAL:
            seen.add(i)
            scores[i] = -float(rank + 1)

    r.add("tokenizer.ggml.model", T.STRING, r.model)
    name = pretokenizer.pre_name(pipe.regexes) if r.model == "gpt2" else None
    if r.model == "gpt2" and name is None:
        r.notes.append("pre-tokenizer regexes not in the known table: tokenizer.ggml.pre = 'default' "
                       "(tokenizer.kestrel.pre_regex holds the exact list)")
    r.add("tokenizer.ggml.pre", T.STRING, name or "default")
    r.add_array("tokenizer.ggml.tokens", T.STRING, texts)
    r.add_array("tokenizer.ggml.scores", T.FLOAT32, scores)
    r.add_array("tokenizer.ggml.token_type", T.INT32, types)
    r.add_array("tokenizer.ggml.merges", T.STRING, [f"{a} {b}" for a, b in merges])
    # Always written, so no reader falls back to a built-in list: an empty list means "no split".
    r.add_array("tokenizer.kestrel.pre_regex", T.STRING, pipe.regexes)
    r.add("tokenizer.kestrel.normalizer", T.STRING, "nfc" if pipe.nfc else "")
    r.add("tokenizer.kestrel.ignore_merges", T.BOOL, bool(model.get("ignore_merges", False)))
    if any(flags):
        r.add_array("tokenizer.kestrel.added_token_flags", T.INT32, flags)
    r.add("tokenizer.ggml.add_space_prefix", T.BOOL, pipe.prepend_mark)
    _special_ids(r, tok, cfg, name_to_id, types)
    _chat_templates(r, cfg, template_file)
    return r


def _special_ids(r, tok, cfg, name_to_id, types):
    ids = {}
    for field, key in (("bos_token", "bos"), ("eos_token", "eos"), ("unk_token", "unknown"), ("pad_token", "padding")):
        text = _token_text(cfg.get(field), field)
        if text is None:
            continue
        if text not in name_to_id:
            r.notes.append(f"tokenizer_config.json {field} {text!r} is not in the vocabulary; not written")
            continue
        ids[key] = name_to_id[text]
    if "unknown" not in ids:
        unk = (tok.get("model") or {}).get("unk_token")
        if unk in name_to_id:
            ids["unknown"] = name_to_id[unk]
    for texts, key in ((_EOT_TEXTS, "eot"), (_EOM_TEXTS, "eom")):
        for text in texts:
            i = name_to_id.get(text)
            if i is not None and types[i] == CONTROL and i != ids.get("eos"):
                ids[key] = i
                break

    # add_bos/add_eos: tokenizer_config.json wins (transformers rebuilds the post-processor from it
    # for Llama-style tokenizers); otherwise what the post-processor's template adds.
    add = {"bos": cfg.get("add_bos_token"), "eos": cfg.get("add_eos_token")}
    tmpl = _template_specials(tok.get("post_processor"), name_to_id)
    if tmpl is not None:
        for key, side in (("bos", tmpl[0]), ("eos", tmpl[1])):
            if len(side) > 1:
                r.notes.append(f"post_processor adds {len(side)} tokens {side} on the {key} side; "
                               f"add_{key}_token can only add one")
            if isinstance(add[key], bool):
                continue
            add[key] = bool(side)
            if side and ids.get(key) != side[0]:
                r.notes.append(f"{key} id {ids.get(key)} replaced by {side[0]}, which the post_processor adds")
                ids[key] = side[0]
    for key in ("bos", "eos"):
        flag = bool(add[key]) if isinstance(add[key], bool) else False
        if flag and key not in ids:
            r.notes.append(f"add_{key}_token is set but there is no {key} token; written as false")
            flag = False
        r.add(f"tokenizer.ggml.add_{key}_token", T.BOOL, flag)
    for key in ("bos", "eos", "unknown", "padding", "eot", "eom"):
        if key in ids:
            r.add(f"tokenizer.ggml.{key}_token_id", T.UINT32, ids[key])


def _chat_templates(r, cfg, template_file):
    ct = cfg.get("chat_template", template_file)
    if ct is None:
        return
    if isinstance(ct, str):
        r.add("tokenizer.chat_template", T.STRING, ct)
        return
    if not isinstance(ct, list):
        raise ConvertError("tokenizer_config.json chat_template is neither a string nor a list")
    names = []
    for i, entry in enumerate(ct):
        if not (isinstance(entry, dict) and isinstance(entry.get("name"), str)
                and isinstance(entry.get("template"), str)):
            raise ConvertError(f"tokenizer_config.json chat_template[{i}] lacks a name or template string")
        if entry["name"] == "default":
            r.add("tokenizer.chat_template", T.STRING, entry["template"])
        else:
            names.append(entry["name"])
            r.add(f"tokenizer.chat_template.{entry['name']}", T.STRING, entry["template"])
    if names:
        r.add_array("tokenizer.chat_templates", T.STRING, names)
