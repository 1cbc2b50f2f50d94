"""tokenizer.json normalizer + pre-tokenizer -> what the GGUF tokenizer keys can say.

Kestrel's tokenizer runs: optional NFC, then (for "llama" vocabularies) spaces -> U+2581 with an
optional leading U+2581, then a list of regexes applied in sequence with "Isolated" behaviour
(tokenizer.kestrel.pre_regex), then BPE. Anything in tokenizer.json outside that model is an
UnsupportedTokenizer error naming the component, never a silently different tokenizer.
"""

SPACE_MARK = "\u2581"  # SentencePiece's visible space

# HF's ByteLevel pre-tokenizer regex (use_regex=true): GPT-2's split pattern.
GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"

_CONTRACTIONS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
_LLAMA3 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_QWEN2 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_QWEN35 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_O200K_WORDS = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+%s"
                r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*%s")
_GPT4O = (_O200K_WORDS % (_CONTRACTIONS + "?", _CONTRACTIONS + "?")
          + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_TEKKEN = _O200K_WORDS % ("", "") + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
# DeepSeek-V3 (JSON "\r\n" inside the third pattern are real CR/LF characters).
_DEEPSEEK3 = [
    r"\p{N}{1,3}",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^""" "\r\n" r"\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
    r"| ?[\p{P}\p{S}]+[" "\r\n" r"]*|\s*[" "\r\n" r"]+|\s+(?!\S)|\s+",
]
_CJK_HANGUL = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"

# tokenizer.json regex lists (verbatim, in order) -> llama.cpp's tokenizer.ggml.pre name. The
# first exact match wins (llama.cpp has several names for one list: dbrx, smaug, chatglm-bpe = llama-bpe).
KNOWN_PRE = [
    ("llama-bpe", [_LLAMA3]),
    ("qwen2", [_QWEN2]),
    ("qwen35", [_QWEN35]),
    ("gpt-4o", [_GPT4O]),
    ("tekken", [_TEKKEN]),
    ("deepseek-v3", _DEEPSEEK3),
    ("deepseek-coder", ["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK_HANGUL, r"\p{N}"]),
    ("gpt-2", [GPT2_REGEX]),
    ("starcoder", [r"\p{N}", GPT2_REGEX]),
]


def _is_deepseek_llm(regexes):
    # Its second pattern is a ~400-character list of Latin/Greek/Cyrillic letter ranges; the
    # shape of the list identifies it well enough for a name.
    return (len(regexes) == 6 and regexes[0] == "[\r\n]" and regexes[1].startswith(r"\s?[A-Za-z")
            and regexes[3] == r"\s+$" and regexes[4] == _CJK_HANGUL and regexes[5] == r"\p{N}+")


def pre_name(regexes):
    """llama.cpp's name for a regex list, or None when unknown."""
    for name, known in KNOWN_PRE:
        if regexes == known:
            return name
    if _is_deepseek_llm(regexes):
        return "deepseek-llm"
    return None


class UnsupportedTokenizer(ValueError):
    """tokenizer.json uses something the GGUF keys cannot express."""


def regex_escape(s):
    """A PCRE pattern matching the literal string s."""
    return "".join("\\" + c if c in "\\^$.|?*+()[]{}" else c for c in s)


class Pipeline:
    """What the normalizer and pre-tokenizer amount to."""

    def __init__(self):
        self.nfc = False
        self.spaces_to_mark = False   # " " -> U+2581 before the model (Replace normalizer / Metaspace)
        self.prepend_mark = False     # a leading U+2581 (Prepend normalizer / Metaspace prepend)
        self.byte_level = False       # GPT-2 byte -> unicode mapping (ByteLevel pre-tokenizer)
        self.regexes = []             # Isolated splits, in order
        self.notes = []


def _flatten(node, list_key):
    if node is None:
        return []
    if node.get("type") == "Sequence":
        out = []
        for child in node.get(list_key) or []:
            out.extend(_flatten(child, list_key))
        return out
    return [node]


def _pattern(node, where):
    pat = node.get("pattern") or {}
    if "Regex" in pat:
        return pat["Regex"], None
    if "String" in pat:
        return regex_escape(pat["String"]), pat["String"]
    raise UnsupportedTokenizer(f"{where}: pattern {pat!r} is neither Regex nor String")


def _normalizer(p, node):
    t = node.get("type")
    if t == "NFC":
        p.nfc = True
    elif t == "Prepend" and node.get("prepend") == SPACE_MARK:
        p.prepend_mark = True
    elif t == "Replace" and (node.get("pattern") or {}).get("String") == " " and node.get("content") == SPACE_MARK:
        p.spaces_to_mark = True
    else:
        detail = {k: v for k, v in node.items() if k != "type"}
        raise UnsupportedTokenizer(
            f"normalizer {t} {detail} cannot be expressed (supported: NFC, Prepend('\u2581'), "
            f"Replace(' ' -> '\u2581'))")


def _split(p, node):
    where = "pre_tokenizer Split"
    regex, literal = _pattern(node, where)
    if node.get("invert"):
        raise UnsupportedTokenizer(f"{where} with invert=true on {regex!r} is not supported")
    if literal is not None and p.spaces_to_mark and literal.strip(" ") == "":
        # After Replace(' ' -> U+2581) the text holds no spaces: this split never matches (Gemma 3).
        p.notes.append(f"{where} on {literal!r} is a no-op after the space -> \u2581 normalizer; dropped")
        return
    behavior = node.get("behavior", "Isolated")
    if behavior != "Isolated":
        raise UnsupportedTokenizer(f"{where} on {regex!r} with behavior {behavior} is not supported (only Isolated)")
    p.regexes.append(regex)


def _pre_tokenizer(p, node):
    t = node.get("type")
    if t == "Split":
        _split(p, node)
    elif t == "ByteLevel":
        p.byte_level = True
        if node.get("use_regex", True):
            p.regexes.append(GPT2_REGEX)
        if node.get("add_prefix_space", False):
            p.notes.append("ByteLevel add_prefix_space=true is not expressible; ignored (as llama.cpp does)")
    elif t == "Metaspace":
        if node.get("replacement", SPACE_MARK) != SPACE_MARK:
            raise UnsupportedTokenizer(f"Metaspace replacement {node.get('replacement')!r} is not U+2581")
        p.spaces_to_mark = True
        scheme = node.get("prepend_scheme")
        if scheme is None:  # older files
            scheme = "always" if node.get("add_prefix_space", True) else "never"
        p.prepend_mark = scheme != "never"
        if scheme == "first":
            p.notes.append("Metaspace prepend_scheme 'first' written as add_space_prefix=true")
        if node.get("split", True):
            # Metaspace splits before each U+2581 (merged with the text that follows it).
            p.regexes.append(SPACE_MARK + "[^" + SPACE_MARK + "]*|[^" + SPACE_MARK + "]+")
    elif t == "Digits":
        p.regexes.append(r"\p{N}" if node.get("individual_digits") else r"\p{N}+")
    else:
        raise UnsupportedTokenizer(
            f"pre_tokenizer {t} is not supported (supported: Split, ByteLevel, Metaspace, Digits)")


def analyze(tokenizer_json):
    """Reads tokenizer.json's normalizer and pre_tokenizer into a Pipeline."""
    p = Pipeline()
    for node in _flatten(tokenizer_json.get("normalizer"), "normalizers"):
        _normalizer(p, node)
    for node in _flatten(tokenizer_json.get("pre_tokenizer"), "pretokenizers"):
        _pre_tokenizer(p, node)
    return p
