#!/usr/bin/env python3
"""tools/convert/hf_to_gguf.py on real checkpoint layouts, end to end (standard library only).

For each random test model (testdata/models: llama-gqa-f32, qwen2-f32, qwen3-f32, qwen3moe-f16,
deepseek2-f16, gpt-oss-f16; plus a Mixtral built from llama-gqa with two identical experts) this test
writes a tiny Hugging Face folder by INVERTING llama.cpp's GGUF <- HF mapping (config.json from the
GGUF keys, tensors renamed, llama Q/K rows un-permuted, experts un-stacked, DeepSeek's attn_k_b /
attn_v_b merged back into kv_b_proj, GPT-OSS's experts in its [E, in, out] gate/up-interleaved layout,
safetensors in F32 / F16 / BF16, one checkpoint sharded with model.safetensors.index.json, a
tokenizer.json of the stories260K vocabulary), converts it back, and checks:
- the tensors: same names, shapes and types as llama.cpp's converter gives, data equal to the
  source (exactly, or after the checkpoint's/outtype's rounding); rope_freqs (made from rope_scaling llama3)
  equal to the test model's;
- the metadata: exactly the keys llama.cpp's convert_hf_to_gguf.py writes for the family (listed
  below from its TextModel/LlamaModel/Qwen2Model/Qwen2MoeModel set_gguf_parameters), with the
  source file's values; the tokenizer's tokens, types and special ids;
- `kestrel eval` on the converted file against the source model's llama.cpp references
  (testdata/reference), with test_reference_logits' tolerances;
- --outtype q8_0 equals, tensor for tensor and byte for byte, both `kestrel quantize F32 OUT Q8_0
  --pure` of the F32 conversion and llama.cpp's llama-quantize file llama-gqa-q8_0.gguf;
- errors: an unknown architecture and MXFP4 GPT-OSS experts (exit 2 naming them), a missing
  shard (exit 1).
Exit 77 (skip) when testdata or the CLI is missing, unless KESTREL_REQUIRE_TESTDATA=1.
"""

import array
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
SCRIPT = os.path.join(ROOT, "tools", "convert", "hf_to_gguf.py")
sys.path.insert(0, HERE)
from convert_test import read_gguf  # noqa: E402  (independent GGUF reader)

TESTDATA = os.environ.get("KESTREL_TESTDATA") or os.path.join(os.path.dirname(ROOT), "shared", "testdata")
MODELS = os.path.join(TESTDATA, "models")
REFS = os.path.join(TESTDATA, "reference")
CLI = os.environ.get("KESTREL_CLI") or os.path.join(ROOT, "build", "kestrel")

F32, F16, Q8_0, BF16 = 0, 1, 8, 30

# The non-general, non-tokenizer keys llama.cpp's convert_hf_to_gguf.py writes for these configs
# (TextModel.set_gguf_parameters: block_count, context_length, embedding_length,
# feed_forward_length, head_count, head_count_kv, rope.freq_base, layer_norm_rms_epsilon,
# expert_count, expert_used_count, key/value_length when config has head_dim; LlamaModel adds
# vocab_size and rope.dimension_count; Qwen2MoeModel (Qwen3Moe) adds expert_feed_forward_length).
BASE_KEYS = {"block_count", "context_length", "embedding_length", "feed_forward_length", "attention.head_count",
             "attention.head_count_kv", "rope.freq_base", "attention.layer_norm_rms_epsilon"}
LLAMACPP_KEYS = {
    "llama": BASE_KEYS | {"vocab_size", "rope.dimension_count"},
    "qwen2": BASE_KEYS,
    "qwen3": BASE_KEYS | {"attention.key_length", "attention.value_length"},
    "qwen3moe": BASE_KEYS | {"attention.key_length", "attention.value_length", "expert_count",
                             "expert_used_count", "expert_feed_forward_length"},
    # DeepseekV2Model: head_count_kv 1 (MLA as MQA), the MLA sizes, MoE routing keys; TextModel adds
    # expert_used_count and expert_gating_func (scoring_func).
    "deepseek2": BASE_KEYS | {"expert_count", "expert_used_count", "expert_gating_func",
                              "leading_dense_block_count", "vocab_size", "attention.q_lora_rank",
                              "attention.kv_lora_rank", "attention.key_length", "attention.value_length",
                              "attention.key_length_mla", "attention.value_length_mla",
                              "expert_feed_forward_length", "expert_shared_count", "expert_weights_scale",
                              "expert_weights_norm", "rope.dimension_count"},
    # GptOssModel: sliding_window, expert_feed_forward_length; TextModel: yarn rope scaling keys.
    "gpt-oss": BASE_KEYS | {"expert_count", "expert_used_count", "attention.key_length", "attention.value_length",
                            "rope.scaling.type", "rope.scaling.factor", "rope.scaling.original_context_length",
                            "attention.sliding_window", "expert_feed_forward_length"},
}
# Keys the test models carry that llama.cpp's converter does not write for that family (its
# loader defaults them to the same values): rope.dimension_count = head dim for qwen*.
NOT_WRITTEN_BY_LLAMACPP = {"qwen2": {"rope.dimension_count"}, "qwen3": {"rope.dimension_count"},
                           "qwen3moe": {"rope.dimension_count"}, "gpt-oss": {"rope.dimension_count"}}

HF_LAYER = {  # GGUF blk.N.<key> -> HF model.layers.N.<name>
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm", "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj", "ffn_gate_inp": "mlp.gate",
    "attn_q_a": "self_attn.q_a_proj", "attn_q_a_norm": "self_attn.q_a_layernorm", "attn_q_b": "self_attn.q_b_proj",
    "attn_kv_a_mqa": "self_attn.kv_a_proj_with_mqa", "attn_kv_a_norm": "self_attn.kv_a_layernorm",
    "ffn_gate_shexp": "mlp.shared_experts.gate_proj", "ffn_up_shexp": "mlp.shared_experts.up_proj",
    "ffn_down_shexp": "mlp.shared_experts.down_proj",
}
HF_CLASS = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
            "qwen3moe": "Qwen3MoeForCausalLM", "deepseek2": "DeepseekV3ForCausalLM", "gpt-oss": "GptOssForCausalLM"}


# ---------------------------------------------------------------- numbers (independent of tools/convert)
def decode(data, gtype, n):
    if gtype == F32:
        a = array.array("f")
        a.frombytes(data[:4 * n])
        return list(a)
    if gtype == F16:
        return list(struct.unpack("<%de" % n, data[:2 * n]))
    if gtype == BF16:
        return list(struct.unpack("<%df" % n, b"".join(b"\0\0" + data[2 * i:2 * i + 2] for i in range(n))))
    raise ValueError(gtype)


def encode(values, dtype):
    if dtype in ("F32", F32):
        return struct.pack("<%df" % len(values), *values)
    if dtype in ("F16", F16):
        return struct.pack("<%de" % len(values), *values)
    if dtype in ("BF16", BF16):  # round to nearest even (finite values only here)
        out = []
        for u in struct.unpack("<%dI" % len(values), struct.pack("<%df" % len(values), *values)):
            out.append((u + 0x7FFF + ((u >> 16) & 1)) >> 16)
        return struct.pack("<%dH" % len(out), *out)
    raise ValueError(dtype)


GTYPE = {"F32": F32, "F16": F16, "BF16": BF16, "f32": F32, "f16": F16, "bf16": BF16, "q8_0": Q8_0}
ESIZE = {F32: 4, F16: 2, BF16: 2}


class Source:
    """A test model file: metadata, tensors, and each tensor's float values."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.data = f.read()
        _, self.kv, tensors, self.start = read_gguf(self.data)
        self.arch = self.kv["general.architecture"][1]
        self.tensors = {name: (ne, t, off) for name, ne, t, off in tensors}

    def value(self, key):
        return self.kv[f"{self.arch}.{key}"][1] if f"{self.arch}.{key}" in self.kv else None

    def raw(self, name):
        ne, t, off = self.tensors[name]
        n = math.prod(ne)
        size = n * 4 if t == F32 else (n * 2 if t in (F16, BF16) else n // 32 * 34)
        return self.data[self.start + off:self.start + off + size]

    def floats(self, name):
        ne, t, _ = self.tensors[name]
        return decode(self.raw(name), t, math.prod(ne))


# ---------------------------------------------------------------- GGUF -> HF folder
def tokenizer_files(src, d, n_tokens=None):
    toks = src.kv["tokenizer.ggml.tokens"][1][1][:n_tokens]
    types = src.kv["tokenizer.ggml.token_type"][1][1][:n_tokens]
    vocab = {t: i for i, t in enumerate(toks)}
    merges = []
    for i, t in enumerate(toks):  # stories260K: merged tokens in score (= id) order
        if types[i] != 1 or len(t) < 2:
            continue
        for k in range(len(t) - 1, 0, -1):
            a, b = t[:k], t[k:]
            if vocab.get(a, 1 << 30) < i and vocab.get(b, 1 << 30) < i:
                merges.append(f"{a} {b}")
                break
    special = [{"id": i, "content": toks[i], "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True} for i in range(3)]
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": special,
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                           {"type": "Replace", "pattern": {"String": " "},
                                                            "content": "\u2581"}]},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": None,
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True,
                  "vocab": vocab, "merges": merges},
    }
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    cfg = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
           "unk_token": "<unk>", "pad_token": None, "tokenizer_class": "LlamaTokenizer",
           "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"}
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f)


def src_tok(i):
    return Source(os.path.join(MODELS, "qwen2-f32.gguf")).kv["tokenizer.ggml.tokens"][1][1][i]


def hf_config(src):
    a = src.arch
    n_head = src.value("attention.head_count")
    cfg = {
        "architectures": [HF_CLASS[a]], "model_type": a,
        "hidden_size": src.value("embedding_length"), "intermediate_size": src.value("feed_forward_length"),
        "num_hidden_layers": src.value("block_count"), "num_attention_heads": n_head,
        "num_key_value_heads": src.value("attention.head_count_kv"),
        "max_position_embeddings": src.value("context_length"),
        "rms_norm_eps": src.value("attention.layer_norm_rms_epsilon"),
        "rope_theta": src.value("rope.freq_base") or 10000.0,
        "vocab_size": len(src.kv["tokenizer.ggml.tokens"][1][1]),
        "tie_word_embeddings": "output.weight" not in src.tensors, "torch_dtype": "float32",
    }
    if a in ("qwen3", "qwen3moe"):
        cfg["head_dim"] = src.tensors["blk.0.attn_q_norm.weight"][0][0]
    if a == "qwen3moe":
        cfg.update(num_experts=src.value("expert_count"), num_experts_per_tok=src.value("expert_used_count"),
                   moe_intermediate_size=src.value("expert_feed_forward_length"), norm_topk_prob=True,
                   decoder_sparse_step=1, mlp_only_layers=[])
    if a == "deepseek2":
        kb = src.tensors["blk.1.attn_k_b.weight"][0]  # [nope, kv_lora, n_head]
        cfg.update(num_key_value_heads=n_head, moe_intermediate_size=src.value("expert_feed_forward_length"),
                   n_routed_experts=src.value("expert_count"), num_experts_per_tok=src.value("expert_used_count"),
                   n_shared_experts=src.value("expert_shared_count"),
                   first_k_dense_replace=src.value("leading_dense_block_count"),
                   q_lora_rank=src.value("attention.q_lora_rank"), kv_lora_rank=src.value("attention.kv_lora_rank"),
                   qk_nope_head_dim=kb[0], qk_rope_head_dim=src.value("rope.dimension_count"),
                   v_head_dim=src.value("attention.value_length_mla"),
                   routed_scaling_factor=src.value("expert_weights_scale"),
                   norm_topk_prob=src.value("expert_weights_norm"),
                   scoring_func={1: "softmax", 2: "sigmoid"}[src.value("expert_gating_func")],
                   topk_method="noaux_tc", rope_scaling=None)
    if a == "gpt-oss":
        cfg.update(model_type="gpt_oss", head_dim=src.value("attention.key_length"),
                   num_local_experts=src.value("expert_count"), num_experts_per_tok=src.value("expert_used_count"),
                   sliding_window=src.value("attention.sliding_window"), swiglu_limit=7.0,
                   layer_types=["sliding_attention" if i % 2 == 0 else "full_attention"
                                for i in range(src.value("block_count"))],
                   rope_scaling={"rope_type": "yarn", "factor": src.value("rope.scaling.factor"),
                                 "original_max_position_embeddings": src.value("rope.scaling.original_context_length")})
    if "rope_freqs.weight" in src.tensors:  # the test model's Llama-3 rope scaling (models/README.md)
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    return cfg


def unpermute(values, rows, cols, n_head):
    """Inverse of llama.cpp's permute: HF row h*hd + j*hd/2 + i = GGUF row h*hd + 2i + j."""
    hd = rows // n_head
    half = hd // 2
    out = [None] * rows
    for h in range(n_head):
        for i in range(half):
            for j in range(2):
                out[h * hd + j * half + i] = values[(h * hd + 2 * i + j) * cols:(h * hd + 2 * i + j + 1) * cols]
    return [v for r in out for v in r]


def hf_tensors(src, mixtral=0):
    """[(hf name, shape, float values)] in HF layout. mixtral=N: the dense FFN becomes N identical
    Mixtral experts (block_sparse_moe.experts.E.w1/w2/w3) with a zero router: with top-N routing and
    renormalized weights the layer computes exactly the dense FFN."""
    out = []
    a = src.arch
    for name, (ne, _, _) in src.tensors.items():
        if name == "rope_freqs.weight":
            continue  # generated from config.json's rope_scaling
        vals = src.floats(name)
        shape = list(reversed(ne))
        if name in ("token_embd.weight", "output_norm.weight", "output.weight"):
            hf = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                  "output.weight": "lm_head.weight"}[name]
            out.append((hf, shape, vals))
            continue
        _, bid, key, suffix = name.split(".")
        if a == "gpt-oss" and (key.endswith("_exps") or key in ("attn_sinks", "post_attention_norm", "ffn_gate_inp")):
            out.extend(oss_tensors(src, name, bid, key, suffix, shape, vals))
            continue
        if key == "exp_probs_b":
            out.append((f"model.layers.{bid}.mlp.gate.e_score_correction_bias", shape, vals))
            continue
        if key == "attn_v_b":
            continue  # with attn_k_b into kv_b_proj
        if key == "attn_k_b":  # llama.cpp splits kv_b_proj and transposes k_b: undo both
            nope, kv_lora, heads = ne
            v_ne = src.tensors[f"blk.{bid}.attn_v_b.weight"][0]
            v_dim = v_ne[1]
            vb = src.floats(f"blk.{bid}.attn_v_b.weight")
            rows = []
            for h in range(heads):
                kh = vals[h * kv_lora * nope:(h + 1) * kv_lora * nope]  # [kv_lora][nope]
                for r in range(nope):
                    rows.extend(kh[r::nope])
                rows.extend(vb[h * v_dim * kv_lora:(h + 1) * v_dim * kv_lora])
            out.append((f"model.layers.{bid}.self_attn.kv_b_proj.weight", [heads * (nope + v_dim), kv_lora], rows))
            continue
        if key.endswith("_exps"):
            n_exp, rows, cols = shape
            proj = {"ffn_gate_exps": "gate_proj", "ffn_up_exps": "up_proj", "ffn_down_exps": "down_proj"}[key]
            for e in range(n_exp):
                out.append((f"model.layers.{bid}.mlp.experts.{e}.{proj}.{suffix}", [rows, cols],
                            vals[e * rows * cols:(e + 1) * rows * cols]))
            continue
        if mixtral and key in ("ffn_gate", "ffn_up", "ffn_down"):
            w = {"ffn_gate": "w1", "ffn_down": "w2", "ffn_up": "w3"}[key]
            for e in range(mixtral):
                out.append((f"model.layers.{bid}.block_sparse_moe.experts.{e}.{w}.{suffix}", shape, vals))
            if key == "ffn_gate":
                out.append((f"model.layers.{bid}.block_sparse_moe.gate.weight", [mixtral, shape[1]],
                            [0.0] * (mixtral * shape[1])))
            continue
        if a == "llama" and key in ("attn_q", "attn_k"):
            heads = src.value("attention.head_count" if key == "attn_q" else "attention.head_count_kv")
            cols = shape[1] if len(shape) == 2 else 1
            vals = unpermute(vals, shape[0], cols, heads)
        out.append((f"model.layers.{bid}.{HF_LAYER[key]}.{suffix}", shape, vals))
    return out


def oss_tensors(src, name, bid, key, suffix, shape, vals):
    """GPT-OSS's HF layout: experts as [E, in, out] with gate/up interleaved in one gate_up_proj."""
    p = f"model.layers.{bid}."
    if key == "attn_sinks":
        return [(p + "self_attn.sinks", shape, vals)]
    if key == "post_attention_norm":
        return [(p + "post_attention_layernorm.weight", shape, vals)]
    if key == "ffn_gate_inp":
        return [(p + f"mlp.router.{suffix}", shape, vals)]
    if key == "ffn_up_exps":
        return []  # with ffn_gate_exps
    if key == "ffn_down_exps" and suffix == "bias":
        return [(p + "mlp.experts.down_proj_bias", shape, vals)]
    if key == "ffn_down_exps":  # [E][n_embd][n_ff] -> [E][n_ff][n_embd]
        n_exp, n_embd, n_ff = shape
        out = []
        for e in range(n_exp):
            m = vals[e * n_embd * n_ff:(e + 1) * n_embd * n_ff]
            for k in range(n_ff):
                out.extend(m[k::n_ff])
        return [(p + "mlp.experts.down_proj", [n_exp, n_ff, n_embd], out)]
    up = src.floats(name.replace("ffn_gate_exps", "ffn_up_exps"))
    if suffix == "bias":  # [E][n_ff] twice -> [E][2 n_ff] interleaved
        inter = [v for pair in zip(vals, up) for v in pair]
        return [(p + "mlp.experts.gate_up_proj_bias", [shape[0], 2 * shape[1]], inter)]
    n_exp, n_ff, n_embd = shape  # [E][n_ff][n_embd] twice -> [E][n_embd][2 n_ff]
    out = []
    for e in range(n_exp):
        g = vals[e * n_ff * n_embd:(e + 1) * n_ff * n_embd]
        u = up[e * n_ff * n_embd:(e + 1) * n_ff * n_embd]
        for c in range(n_embd):
            for gv, uv in zip(g[c::n_embd], u[c::n_embd]):
                out.append(gv)
                out.append(uv)
    return [(p + "mlp.experts.gate_up_proj", [n_exp, n_embd, 2 * n_ff], out)]


def write_safetensors(path, items, dtype):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, shape, vals in items:
        b = encode(vals, dtype)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((-len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def write_hf(src, d, dtype, shards=1, mixtral=0):
    os.makedirs(d)
    cfg = hf_config(src)
    if mixtral:
        cfg.update(architectures=["MixtralForCausalLM"], model_type="mixtral", num_local_experts=mixtral,
                   num_experts_per_tok=mixtral)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    tokenizer_files(src, d)
    items = hf_tensors(src, mixtral)
    if shards == 1:
        write_safetensors(os.path.join(d, "model.safetensors"), items, dtype)
        return
    weight_map = {}
    per = (len(items) + shards - 1) // shards
    for s in range(shards):
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = items[s * per:(s + 1) * per]
        write_safetensors(os.path.join(d, fname), part, dtype)
        weight_map.update({n: fname for n, _, _ in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)


# ---------------------------------------------------------------- checks
def convert(d, out, outtype):
    run = subprocess.run([sys.executable, SCRIPT, d, "-o", out, "--outtype", outtype],
                         capture_output=True, text=True)
    if run.returncode != 0:
        raise AssertionError(f"hf_to_gguf {d} --outtype {outtype}: exit {run.returncode}\n{run.stderr}")
    return run


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def eval_json(model, tokens, n):
    run = subprocess.run([CLI, "eval", "-m", model, "-t", "2", "--tokens", ",".join(map(str, tokens)),
                          "-n", str(n), "--top", "10"], capture_output=True, text=True)
    if run.returncode != 0:
        raise AssertionError(f"kestrel eval {model}: exit {run.returncode}\n{run.stderr[-2000:]}")
    return json.loads(run.stdout)


class ConvertModelTest(unittest.TestCase):
    tmp = None

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="kestrel-convert-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def roundtrip(self, model, ckpt_dtype, outtype, shards=1):
        src = Source(os.path.join(MODELS, model + ".gguf"))
        d = os.path.join(self.tmp, f"{model}-{ckpt_dtype}")
        if not os.path.exists(d):
            write_hf(src, d, ckpt_dtype, shards)
        out = os.path.join(self.tmp, f"{model}-{ckpt_dtype}-{outtype}.gguf")
        run = convert(d, out, outtype)
        self.assertIn("100%", run.stderr)  # the progress bar reached the end
        with open(out, "rb") as f:
            data = f.read()
        _, kv, tensors, start = read_gguf(data)
        return src, kv, {n: (ne, t, off) for n, ne, t, off in tensors}, data, start, out

    def check_metadata(self, src, kv, outtype):
        a = src.arch
        self.assertEqual(kv["general.architecture"][1], a)
        self.assertEqual(kv["general.type"][1], "model")
        self.assertEqual(kv["general.file_type"][1], {"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7}[outtype])
        self.assertEqual(kv["general.quantization_version"][1], 2)
        arch_keys = {k[len(a) + 1:] for k in kv if k.startswith(a + ".")}
        self.assertEqual(arch_keys, LLAMACPP_KEYS[a], "keys differ from what llama.cpp's converter writes")
        src_keys = {k[len(a) + 1:] for k in src.kv if k.startswith(a + ".")}
        self.assertEqual(src_keys - arch_keys, NOT_WRITTEN_BY_LLAMACPP.get(a, set()))
        for k in arch_keys & src_keys:
            got, want = kv[f"{a}.{k}"], src.kv[f"{a}.{k}"]
            self.assertEqual(got[0], want[0], k)
            self.assertEqual(got[1], want[1] if want[0] != 6 else f32(want[1]), k)
        self.assertEqual(kv[f"{a}.vocab_size"][1] if a in ("llama", "deepseek2") else 512, 512)
        for k in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type"):
            self.assertEqual(kv[k][1][1], src.kv[k][1][1], k)
        for k in ("tokenizer.ggml.model", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                  "tokenizer.ggml.unknown_token_id"):
            self.assertEqual(kv[k][1], src.kv[k][1], k)
        self.assertIn("tokenizer.chat_template", kv)

    def check_tensors(self, src, tensors, data, start, ckpt_dtype, outtype):
        self.assertEqual(set(tensors), set(src.tensors))
        for name, (ne, t, off) in tensors.items():
            sne = src.tensors[name][0]
            self.assertEqual(ne, sne, name)
            n = math.prod(ne)
            f32_kept = len(ne) == 1 or name.endswith(("_norm.weight", "ffn_gate_inp.weight")) \
                or not name.endswith(".weight")
            self.assertEqual(t, F32 if f32_kept else GTYPE[outtype], name)
            got = data[start + off:start + off + n * ESIZE[t]]
            if name == "rope_freqs.weight":  # not in the checkpoint: made from rope_scaling
                self.assertEqual(got, src.raw(name), name)
                continue
            # source -> checkpoint dtype -> output type, exactly
            vals = decode(encode(src.floats(name), ckpt_dtype), GTYPE[ckpt_dtype], n)
            self.assertEqual(got, encode(vals, t), name)

    def check_eval(self, out, ref_model, tol):
        for case in ("short", "long"):
            with open(os.path.join(REFS, f"{ref_model}.{case}.json")) as f:
                ref = json.load(f)
            got = eval_json(out, ref["prompt_tokens"], ref["n_gen"])
            diff = max(abs(g - r) for g, r in zip(got["last_logits"], ref["last_logits"]))
            print(f"  {os.path.basename(out)} vs {ref_model}.{case}: last_logits max |diff| {diff:.4g} (tol {tol})",
                  file=sys.stderr)
            self.assertLessEqual(diff, tol, f"{ref_model}.{case}: last_logits max |diff| {diff}")
            for k, (want, have) in enumerate(zip(ref["greedy_top10"], got["greedy_top10"])):
                if want[0][1] - want[1][1] < tol:
                    break  # near-tie: the rest may legitimately differ
                self.assertEqual(have[0][0], want[0][0], f"{ref_model}.{case}: greedy step {k}")
                self.assertEqual(got["greedy_tokens"][k], ref["greedy_tokens"][k])

    # -- the four families ------------------------------------------------------------------------
    def test_llama_gqa_f32_sharded(self):
        """F32 checkpoint in two shards -> F32: bit-exact, rope_freqs from rope_scaling llama3."""
        src, kv, tensors, data, start, out = self.roundtrip("llama-gqa-f32", "F32", "f32", shards=2)
        self.check_metadata(src, kv, "f32")
        self.check_tensors(src, tensors, data, start, "F32", "f32")
        self.check_eval(out, "llama-gqa-f32", 0.05)

    def test_llama_gqa_q8_0(self):
        """--outtype q8_0 == kestrel quantize --pure of the F32 conversion == llama-quantize's file."""
        src, kv, tensors, data, start, out = self.roundtrip("llama-gqa-f32", "F32", "q8_0", shards=2)
        self.check_metadata(src, kv, "q8_0")
        f32_out = os.path.join(self.tmp, "llama-gqa-f32-F32-f32.gguf")
        if not os.path.exists(f32_out):
            convert(os.path.join(self.tmp, "llama-gqa-f32-F32"), f32_out, "f32")
        requant = os.path.join(self.tmp, "requant.gguf")
        run = subprocess.run([CLI, "quantize", f32_out, requant, "Q8_0", "--pure", "-t", "2"],
                             capture_output=True, text=True)
        self.assertEqual(run.returncode, 0, run.stderr)
        for other_path in (requant, os.path.join(MODELS, "llama-gqa-q8_0.gguf")):
            other = Source(other_path)
            self.assertEqual(set(other.tensors), set(tensors), other_path)
            for name, (ne, t, off) in tensors.items():
                self.assertEqual((ne, t), other.tensors[name][:2], f"{other_path}: {name}")
                n = math.prod(ne)
                size = n * 4 if t == F32 else n // 32 * 34
                self.assertEqual(data[start + off:start + off + size], other.raw(name), f"{other_path}: {name}")
        self.check_eval(out, "llama-gqa-q8_0", 0.3)

    def test_qwen2_f16_checkpoint(self):
        """F16 checkpoint (q/k/v biases, tied embeddings) -> F32: equals qwen2-f32.gguf."""
        src, kv, tensors, data, start, out = self.roundtrip("qwen2-f32", "F16", "f32")
        self.check_metadata(src, kv, "f32")
        self.check_tensors(src, tensors, data, start, "F16", "f32")
        self.check_eval(out, "qwen2-f32", 0.05)

    def test_qwen3_bf16_checkpoint(self):
        """BF16 checkpoint (q/k norms, head_dim 64 != n_embd / n_head) -> BF16."""
        src, kv, tensors, data, start, out = self.roundtrip("qwen3-f32", "BF16", "bf16")
        self.check_metadata(src, kv, "bf16")
        self.check_tensors(src, tensors, data, start, "BF16", "bf16")
        # BF16 rounds every weight (8-bit mantissa), so llama.cpp's F32 reference is only met
        # loosely; the BF16 file must compute what an F32 file of the same (rounded) weights does.
        src, kv32, tensors32, data32, start32, out32 = self.roundtrip("qwen3-f32", "BF16", "f32")
        self.check_tensors(src, tensors32, data32, start32, "BF16", "f32")
        self.check_eval(out32, "qwen3-f32", 1.0)
        ref = eval_json(out32, list(range(1, 60)), 16)
        got = eval_json(out, list(range(1, 60)), 16)
        diff = max(abs(g - r) for g, r in zip(got["last_logits"], ref["last_logits"]))
        print(f"  bf16 vs f32 file of the same weights: last_logits max |diff| {diff:.4g}", file=sys.stderr)
        # BF16 matmuls round the activations to BF16 too (as llama.cpp's vec_dot_type): ~0.1.
        self.assertLessEqual(diff, 0.25)

    def test_qwen3moe_f16_checkpoint(self):
        """F16 checkpoint with 8 experts per layer (un-stacked, re-stacked) -> F16: equals qwen3moe-f16.gguf."""
        src, kv, tensors, data, start, out = self.roundtrip("qwen3moe-f16", "F16", "f16")
        self.check_metadata(src, kv, "f16")
        self.check_tensors(src, tensors, data, start, "F16", "f16")
        self.check_eval(out, "qwen3moe-f16", 0.05)

    def test_mixtral_from_llama_gqa(self):
        """MixtralForCausalLM: w1/w2/w3 experts stacked into ffn_{gate,down,up}_exps, the router
        F32, Q/K permuted as llama; two identical experts compute the source's dense FFN."""
        src = Source(os.path.join(MODELS, "llama-gqa-f32.gguf"))
        d = os.path.join(self.tmp, "mixtral")
        write_hf(src, d, "F32", mixtral=2)
        out = os.path.join(self.tmp, "mixtral.gguf")
        convert(d, out, "f32")
        with open(out, "rb") as f:
            data = f.read()
        _, kv, tensors, start = read_gguf(data)
        tensors = {n: (ne, t, off) for n, ne, t, off in tensors}
        self.assertEqual(kv["general.architecture"][1], "llama")
        self.assertEqual((kv["llama.expert_count"][1], kv["llama.expert_used_count"][1]), (2, 2))
        arch_keys = {k[len("llama."):] for k in kv if k.startswith("llama.")}
        self.assertEqual(arch_keys, LLAMACPP_KEYS["llama"] | {"expert_count", "expert_used_count"})
        want = {n for n in src.tensors if not n.endswith(("ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"))}
        for b in range(2):
            want |= {f"blk.{b}.ffn_gate_exps.weight", f"blk.{b}.ffn_up_exps.weight",
                     f"blk.{b}.ffn_down_exps.weight", f"blk.{b}.ffn_gate_inp.weight"}
        self.assertEqual(set(tensors), want)
        for name, (ne, t, off) in tensors.items():
            n = math.prod(ne)
            got = data[start + off:start + off + 4 * n]
            self.assertEqual(t, F32, name)
            if name.endswith("_exps.weight"):
                dense = src.raw(name.replace("_exps", ""))
                self.assertEqual(ne, src.tensors[name.replace("_exps", "")][0] + [2], name)
                self.assertEqual(got, dense + dense, name)
            elif name.endswith("ffn_gate_inp.weight"):
                self.assertEqual(ne, [256, 2])
            else:
                self.assertEqual(got, src.raw(name), name)
        self.check_eval(out, "llama-gqa-f32", 0.05)

    def test_deepseek_v3_f16_checkpoint(self):
        """DeepseekV3ForCausalLM (MLA with q/kv LoRA, kv_b_proj split into attn_k_b/attn_v_b, a dense
        first layer, sigmoid router with e_score_correction_bias, a shared expert) -> F16."""
        src, kv, tensors, data, start, out = self.roundtrip("deepseek2-f16", "F16", "f16")
        self.check_metadata(src, kv, "f16")
        self.check_tensors(src, tensors, data, start, "F16", "f16")
        self.check_eval(out, "deepseek2-f16", 0.05)

    def test_gpt_oss_bf16_checkpoint(self):
        """GptOssForCausalLM in the dequantized (BF16-repository) layout: gate_up_proj [E, n_embd, 2 n_ff]
        with gate/up interleaved, down_proj [E, n_ff, n_embd], expert and router biases, attention
        sinks, post_attention_layernorm -> post_attention_norm; F16 checkpoint -> F16."""
        src, kv, tensors, data, start, out = self.roundtrip("gpt-oss-f16", "F16", "f16")
        self.check_metadata(src, kv, "f16")
        self.check_tensors(src, tensors, data, start, "F16", "f16")
        self.check_eval(out, "gpt-oss-f16", 0.05)

    def test_chunked_conversion(self):
        """Big tensors are converted CHUNK values at a time: the result does not depend on CHUNK."""
        sys.path.insert(0, os.path.join(ROOT, "tools", "convert"))
        import numeric
        import random
        rnd = random.Random(7)
        vals = [rnd.gauss(0, 1) * 10 ** rnd.randint(-3, 3) for _ in range(32 * 40)]
        saved = numeric.CHUNK
        try:
            for src in ("F32", "F16", "BF16"):
                raw = encode(vals, src)
                for dst in (F32, F16, BF16, Q8_0):
                    numeric.CHUNK = 1 << 20
                    whole = numeric.convert(raw, src, dst)
                    numeric.CHUNK = 96
                    self.assertEqual(numeric.convert(raw, src, dst), whole, (src, dst))
                    if dst != Q8_0:
                        self.assertEqual(whole, encode(decode(raw, GTYPE[src], len(vals)), dst), (src, dst))
        finally:
            numeric.CHUNK = saved

    def test_padded_vocabulary(self):
        """An embedding with more rows than the tokenizer has tokens (Qwen's 151936 vs 151665):
        tokens padded with [PAD<i>] (UNUSED), as llama.cpp does."""
        d = self.small_folder("padded", "Qwen2ForCausalLM")
        tokenizer_files(Source(os.path.join(MODELS, "qwen2-f32.gguf")), d, n_tokens=300)
        out = os.path.join(self.tmp, "padded.gguf")
        convert(d, out, "f16")
        with open(out, "rb") as f:
            _, kv, tensors, _ = read_gguf(f.read())
        toks, types = kv["tokenizer.ggml.tokens"][1][1], kv["tokenizer.ggml.token_type"][1][1]
        self.assertEqual(len(toks), 512)
        self.assertEqual(len(kv["tokenizer.ggml.scores"][1][1]), 512)
        self.assertEqual((toks[299], toks[300], toks[511]), (src_tok(299), "[PAD300]", "[PAD511]"))
        self.assertEqual(set(types[300:]), {5})

    # -- errors -----------------------------------------------------------------------------------
    def small_folder(self, name, arch, **extra):
        d = os.path.join(self.tmp, name)
        os.makedirs(d)
        src = Source(os.path.join(MODELS, "qwen2-f32.gguf"))
        tokenizer_files(src, d)
        cfg = hf_config(src)
        cfg["architectures"] = [arch]
        cfg.update(extra)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
        write_safetensors(os.path.join(d, "model.safetensors"),
                          [("model.embed_tokens.weight", [512, 256], [0.0] * (512 * 256))], "F32")
        return d

    def test_errors(self):
        out = os.path.join(self.tmp, "err.gguf")
        for arch, code, words in (("FancyNewForCausalLM", 2, ["unknown architecture FancyNewForCausalLM"]),):
            d = self.small_folder("err-" + arch, arch)
            run = subprocess.run([sys.executable, SCRIPT, d, "-o", out], capture_output=True, text=True)
            self.assertEqual(run.returncode, code, run.stderr)
            for w in words:
                self.assertIn(w, run.stderr)
            self.assertFalse(os.path.exists(out))
        d = self.small_folder("err-mxfp4", "GptOssForCausalLM", sliding_window=128)
        write_safetensors(os.path.join(d, "model.safetensors"),
                          [("model.embed_tokens.weight", [512, 256], [0.0] * (512 * 256))], "F32")
        with open(os.path.join(d, "model.safetensors"), "rb") as f:
            blob = f.read()
        n = struct.unpack("<Q", blob[:8])[0]
        header = json.loads(blob[8:8 + n])
        end = header["model.embed_tokens.weight"]["data_offsets"][1]
        header["model.layers.0.mlp.experts.gate_up_proj_blocks"] = {"dtype": "U8", "shape": [16],
                                                                    "data_offsets": [end, end + 16]}
        h = json.dumps(header).encode()
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + blob[8 + n:] + bytes(16))
        run = subprocess.run([sys.executable, SCRIPT, d, "-o", out], capture_output=True, text=True)
        self.assertEqual(run.returncode, 2, run.stderr)
        self.assertIn("MXFP4", run.stderr)
        d = self.small_folder("err-shard", "Qwen2ForCausalLM")
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump({"weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors"}}, f)
        run = subprocess.run([sys.executable, SCRIPT, d, "-o", out], capture_output=True, text=True)
        self.assertEqual(run.returncode, 1, run.stderr)
        self.assertIn("model-00001-of-00002.safetensors", run.stderr)


def main():
    need = [os.path.join(MODELS, m + ".gguf") for m in ("llama-gqa-f32", "llama-gqa-q8_0", "qwen2-f32",
                                                          "qwen3-f32", "qwen3moe-f16", "deepseek2-f16",
                                                          "gpt-oss-f16")]
    missing = [p for p in need + [CLI] if not os.path.exists(p)]
    if missing:
        msg = f"convert_model_test: missing {', '.join(missing)}"
        if os.environ.get("KESTREL_REQUIRE_TESTDATA") == "1":
            print(msg, file=sys.stderr)
            return 1
        print(msg + " (skipped)", file=sys.stderr)
        return 77
    prog = unittest.main(exit=False, verbosity=2)
    return 0 if prog.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
