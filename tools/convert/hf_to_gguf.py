#!/usr/bin/env python3
"""Hugging Face checkpoint folder -> GGUF (Python standard library only).

    python3 tools/convert/hf_to_gguf.py HF_DIR -o OUT.gguf [--outtype f32|f16|bf16|q8_0]
    python3 tools/convert/hf_to_gguf.py HF_DIR --vocab-only -o OUT.gguf

HF_DIR holds config.json, model.safetensors (or shards + model.safetensors.index.json),
tokenizer.json (or tokenizer.json.gz) and usually tokenizer_config.json. The output follows
llama.cpp's convert_hf_to_gguf.py (keys, tensor names, Q/K permutation, expert stacking, F32
norms/biases/routers). Tensors are read and written one at a time.
Exit status: 0 written, 1 input error (message names the file/field), 2 unsupported request
(architecture, dtype or option).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import model  # noqa: E402
import safetensors_reader as safetensors  # noqa: E402
import vocab  # noqa: E402
from gguf_writer import GGUFError, GGUFWriter, ValueType as T  # noqa: E402


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("hf_dir", help="Hugging Face folder: config.json, *.safetensors, tokenizer.json, tokenizer_config.json")
    ap.add_argument("-o", "--outfile", required=True, help="GGUF file to write")
    ap.add_argument("--outtype", choices=sorted(model.numeric.OUTTYPES), default="f16",
                    help="type of the 2-D weights (norms, biases and routers stay F32; default f16, as llama.cpp)")
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


def _pad_vocab(result, n_vocab):
    """Pads tokens/scores/types to the embedding's rows with [PAD<i>] UNUSED tokens, as llama.cpp."""
    kv = {k: i for i, (k, _, _) in enumerate(result.kv)}
    tokens = result.kv[kv["tokenizer.ggml.tokens"]][2][1]
    n = len(tokens)
    if n > n_vocab:
        raise vocab.ConvertError(f"tokenizer has {n} tokens but the embedding has only {n_vocab} rows")
    if n == n_vocab:
        return
    result.notes.append(f"vocabulary padded from {n} to {n_vocab} tokens ([PAD<i>], unused)")
    for key, fill in (("tokenizer.ggml.tokens", None), ("tokenizer.ggml.scores", -1000.0),
                      ("tokenizer.ggml.token_type", 5), ("tokenizer.kestrel.added_token_flags", 0)):
        if key in kv:
            values = result.kv[kv[key]][2][1]
            values.extend(f"[PAD{i}]" if fill is None else fill for i in range(n, n_vocab))


class Progress:
    def __init__(self, stream, enabled):
        self.stream, self.enabled, self.last = stream, enabled, -1
        self.tty = enabled and stream.isatty()

    def __call__(self, i, n, done, total, name):
        if not self.enabled:
            return
        pct = 100 if total == 0 else int(100 * done / total)
        if not self.tty and pct < 100 and pct < self.last + 10:
            return  # a log file gets a line every 10%
        self.last = pct
        width = 30
        fill = width * pct // 100
        bar = "#" * fill + "." * (width - fill)
        line = f"[{bar}] {pct:3d}% {i}/{n} tensors, {done / 2**20:.1f}/{total / 2**20:.1f} MiB {name}"
        if self.tty:
            self.stream.write("\r" + line[:110].ljust(110))
            if i == n:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def convert_model(args):
    tok, cfg, model_cfg, template = vocab.load_hf_files(args.hf_dir)
    if model_cfg is None:
        raise model.ModelError(f"{args.hf_dir}: no config.json")
    conv = model.Converter(model_cfg, safetensors.open_checkpoint(args.hf_dir), args.outtype)
    plan = conv.plan()
    result = vocab.build_vocab(tok, cfg, template)
    n_vocab = next(ne[1] for name, ne, _, _, _ in plan.tensors if name == "token_embd.weight")
    _pad_vocab(result, n_vocab)
    w = GGUFWriter()
    w.add_string("general.architecture", conv.arch)
    w.add_string("general.type", "model")
    w.add_string("general.name", args.name or os.path.basename(os.path.normpath(args.hf_dir)))
    w.add_string("general.size_label", model.size_label(plan.n_params, plan.expert_params, plan.n_experts))
    for key, vtype, value in plan.kv:
        w.add(key, vtype, value)
    for key, vtype, value in result.kv:
        w.add(key, vtype, value)
    w.add(("general.quantization_version"), T.UINT32, 2)
    for name, ne, ggml_type, nbytes, source in plan.tensors:
        w.add_tensor(name, ne, ggml_type, nbytes, source)
    tmp = args.outfile + ".tmp"
    try:
        w.write(tmp, progress=Progress(sys.stderr, not args.quiet))
        os.replace(tmp, args.outfile)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    result.notes = plan.notes + result.notes
    return conv, plan, result


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.vocab_only:
            result = convert_vocab(args)
        else:
            conv, plan, result = convert_model(args)
    except model.Unsupported as e:
        print(f"hf_to_gguf: error: {e}", file=sys.stderr)
        return 2
    except (vocab.ConvertError, model.ModelError, safetensors.CheckpointError, GGUFError, OSError) as e:
        print(f"hf_to_gguf: error: {e}", file=sys.stderr)
        return 1
    if not args.vocab_only:
        if not args.quiet:
            for note in result.notes:
                print(f"hf_to_gguf: note: {note}", file=sys.stderr)
            print(f"hf_to_gguf: wrote {args.outfile}: {conv.arch} ({conv.hf_arch}), {len(plan.tensors)} tensors, "
                  f"{plan.n_params} parameters, {args.outtype}", file=sys.stderr)
        return 0
    if not args.quiet:
        for note in result.notes:
            print(f"hf_to_gguf: note: {note}", file=sys.stderr)
        n = next(len(v[1]) for k, t, v in result.kv if k == "tokenizer.ggml.tokens")
        print(f"hf_to_gguf: wrote {args.outfile}: {result.model} vocabulary, {n} tokens", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
