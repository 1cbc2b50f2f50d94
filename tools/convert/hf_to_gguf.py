#!/usr/bin/env python3
"""Hugging Face checkpoint folder -> GGUF (Python standard library only).

    python3 tools/convert/hf_to_gguf.py HF_DIR --vocab-only -o OUT.gguf

HF_DIR holds tokenizer.json (or tokenizer.json.gz) and usually tokenizer_config.json; config.json,
when present, gives general.architecture. Today only the vocabulary is converted (--vocab-only);
model tensors are a later step that adds to the same writer.
Exit status: 0 written, 1 input error (message names the file/field), 2 unsupported request.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import vocab  # noqa: E402
from gguf_writer import GGUFError, GGUFWriter  # noqa: E402


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("hf_dir", help="folder with tokenizer.json and tokenizer_config.json")
    ap.add_argument("-o", "--outfile", required=True, help="GGUF file to write")
    ap.add_argument("--vocab-only", action="store_true", help="write only the tokenizer (no tensors)")
    ap.add_argument("--name", help="general.name (default: the folder name)")
    ap.add_argument("-q", "--quiet", action="store_true", help="do not print notes")
    return ap.parse_args(argv)


def convert_vocab(args):
    tok, cfg, model_cfg, template = vocab.load_hf_files(args.hf_dir)
    result = vocab.build_vocab(tok, cfg, template)
    w = GGUFWriter()
    if model_cfg is not None and isinstance(model_cfg.get("model_type"), str):
        w.add_string("general.architecture", model_cfg["model_type"])
    w.add_string("general.name", args.name or os.path.basename(os.path.normpath(args.hf_dir)))
    for key, vtype, value in result.kv:
        w.add(key, vtype, value)
    tmp = args.outfile + ".tmp"
    try:
        w.write(tmp)
        os.replace(tmp, args.outfile)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return result


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if not args.vocab_only:
        print("hf_to_gguf: model tensors not supported yet; use --vocab-only to convert the tokenizer",
              file=sys.stderr)
        return 2
    try:
        result = convert_vocab(args)
    except (vocab.ConvertError, GGUFError, OSError) as e:
        print(f"hf_to_gguf: error: {e}", file=sys.stderr)
        return 1
    if not args.quiet:
        for note in result.notes:
            print(f"hf_to_gguf: note: {note}", file=sys.stderr)
        n = next(len(v[1]) for k, t, v in result.kv if k == "tokenizer.ggml.tokens")
        print(f"hf_to_gguf: wrote {args.outfile}: {result.model} vocabulary, {n} tokens", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
