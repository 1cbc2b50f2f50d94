"""Hugging Face config.json + safetensors -> GGUF model tensors and hyperparameters.

Follows llama.cpp's convert_hf_to_gguf.py (TextModel, LlamaModel, Qwen2Model, Qwen3Model,
Qwen2MoeModel/Qwen3MoeModel, DeepseekV2Model, GptOssModel) for the key names, which keys are
written, the tensor names, the Q/K row permutation of llama-family checkpoints, expert stacking,
the MLA kv_b split, GPT-OSS's expert layout, the llama3 `rope_freqs` tensor and which tensors stay
F32. Tensors are planned here and read/converted one at a time when the
writer asks for their bytes.
"""

import array
import math
import re
import struct

import numeric
from gguf_writer import ValueType as T
from safetensors_reader import DTYPE_SIZE, FLOAT_DTYPES

# config.json "architectures"[0] -> llama.cpp architecture name.
ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "LLaMAForCausalLM": "llama",
    "MistralForCausalLM": "llama",
    "MixtralForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3moe",
    "DeepseekV2ForCausalLM": "deepseek2",
    "DeepseekV3ForCausalLM": "deepseek2",
    "GptOssForCausalLM": "gpt-oss",
}
# Known to llama.cpp and to Kestrel, but not converted here yet.
NOT_YET = {}
PERMUTE_QK = {"llama"}  # LlamaModel.undo_permute; Qwen2/3 checkpoints are already in NEOX order


class ModelError(ValueError):
    """Input that cannot be converted (exit 1); the message names the file/field/tensor."""


class Unsupported(ValueError):
    """A request this converter does not handle (exit 2)."""


_GLOBAL = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
_LAYER = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "mlp.gate": "ffn_gate_inp",                # Qwen MoE router
    "block_sparse_moe.gate": "ffn_gate_inp",   # Mixtral router
    "mlp.shared_expert.gate_proj": "ffn_gate_shexp",
    "mlp.shared_expert.up_proj": "ffn_up_shexp",
    "mlp.shared_expert.down_proj": "ffn_down_shexp",
    "mlp.shared_expert_gate": "ffn_gate_inp_shexp",
    # DeepSeek-V2/V3 (MLA; kv_b_proj is split into attn_k_b / attn_v_b, see Converter.plan)
    "self_attn.q_a_proj": "attn_q_a",
    "self_attn.q_a_layernorm": "attn_q_a_norm",
    "self_attn.q_b_proj": "attn_q_b",
    "self_attn.kv_a_proj_with_mqa": "attn_kv_a_mqa",
    "self_attn.kv_a_layernorm": "attn_kv_a_norm",
    "mlp.shared_experts.gate_proj": "ffn_gate_shexp",
    "mlp.shared_experts.up_proj": "ffn_up_shexp",
    "mlp.shared_experts.down_proj": "ffn_down_shexp",
    "mlp.gate.e_score_correction": "exp_probs_b",
    # GPT-OSS
    "self_attn.sinks": "attn_sinks",
    "mlp.router": "ffn_gate_inp",
}
_LAYER_RE = re.compile(r"^model\.layers\.(\d+)\.(.+)\.(weight|bias)$")
_EXPERT_RE = re.compile(r"^model\.layers\.(\d+)\.(?:mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)"
                        r"|block_sparse_moe\.experts\.(\d+)\.(w1|w2|w3))\.weight$")
_EXPERT_KIND = {"gate_proj": "gate", "up_proj": "up", "down_proj": "down", "w1": "gate", "w2": "down", "w3": "up"}
_SKIP = (".rotary_emb.inv_freq", ".attention.masked_bias", ".attention.bias")
# Never quantized (llama.cpp prepare_tensors: FFN_GATE_INP / FFN_GATE_INP_SHEXP stay F32).
_F32_SUFFIXES = ("ffn_gate_inp.weight", "ffn_gate_inp_shexp.weight")


def hf_architecture(config, where="config.json"):
    archs = config.get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise ModelError(f"{where}: no \"architectures\" list (which model class is this?)")
    hf = archs[0]
    if hf in NOT_YET:
        raise Unsupported(f"{where}: architecture {hf} ({NOT_YET[hf]}) is not converted yet; "
                          f"supported: {', '.join(sorted(ARCHITECTURES))}")
    if hf not in ARCHITECTURES:
        raise Unsupported(f"{where}: unknown architecture {hf}; supported: {', '.join(sorted(ARCHITECTURES))}")
    return hf, ARCHITECTURES[hf]


def _find(hp, keys, optional=True):
    for k in keys:
        if k in hp and hp[k] is not None:
            return hp[k]
    if optional:
        return None
    raise ModelError(f"config.json: none of {', '.join(keys)} is set")


def _int(v, what):
    if isinstance(v, bool) or not isinstance(v, int):
        raise ModelError(f"config.json: {what} = {v!r} is not an integer")
    return v


class Plan:
    """What to write: metadata (key, type, value) and tensors (name, ne, ggml type, nbytes, source)."""

    def __init__(self):
        self.kv = []
        self.tensors = []
        self.notes = []
        self.n_params = 0
        self.expert_params = 0
        self.n_experts = 0


class Converter:
    def __init__(self, config, tensors, outtype):
        self.hp = dict(config)
        if isinstance(self.hp.get("text_config"), dict):
            self.hp.update(self.hp["text_config"])
        self.hf_arch, self.arch = hf_architecture(config)
        self.src = tensors
        self.outtype = outtype
        self.out_ggml, self.file_type = numeric.OUTTYPES[outtype]
        hp = self.hp
        self.n_layer = _int(_find(hp, ["n_layers", "num_hidden_layers", "n_layer", "num_layers"], False),
                            "num_hidden_layers")
        self.n_head = _int(_find(hp, ["num_attention_heads", "n_head", "n_heads"], False), "num_attention_heads")
        kv = _find(hp, ["num_key_value_heads", "n_kv_heads"])
        self.n_head_kv = _int(kv, "num_key_value_heads") if kv is not None else self.n_head
        self.rope = hp.get("rope_parameters") or hp.get("rope_scaling") or {}
        if not isinstance(self.rope, dict):
            raise ModelError(f"config.json: rope_scaling = {self.rope!r} is not an object")
        self.rope = dict(self.rope)
        if isinstance(self.rope.get("full_attention"), dict):
            self.rope = dict(self.rope["full_attention"])
        if "rope_type" not in self.rope and "type" in self.rope:
            self.rope["rope_type"] = self.rope["type"]
        if "rope_theta" not in self.rope:
            theta = _find(hp, ["rope_theta", "rotary_emb_base"])
            if theta is not None:
                self.rope["rope_theta"] = theta

    # ---------------------------------------------------------------- metadata
    def metadata(self):
        hp, a = self.hp, self.arch
        kv = []

        def add(key, vtype, value):
            kv.append((f"{a}.{key}", vtype, value))

        add("block_count", T.UINT32, self.n_layer)
        n_ctx = _find(hp, ["max_position_embeddings", "n_ctx", "n_positions", "max_length",
                           "max_sequence_length", "model_max_length"])
        if n_ctx is not None:
            add("context_length", T.UINT32, _int(n_ctx, "max_position_embeddings"))
        n_embd = _int(_find(hp, ["hidden_size", "n_embd", "dim"], False), "hidden_size")
        add("embedding_length", T.UINT32, n_embd)
        n_ff = _find(hp, ["intermediate_size", "n_inner", "hidden_dim"])
        if n_ff is not None:
            add("feed_forward_length", T.UINT32, _int(n_ff, "intermediate_size"))
        add("attention.head_count", T.UINT32, self.n_head)
        kvh = _find(hp, ["num_key_value_heads", "n_kv_heads"])
        if a == "deepseek2":
            add("attention.head_count_kv", T.UINT32, 1)  # MLA runs as MQA over the latent
        elif kvh is not None:
            add("attention.head_count_kv", T.UINT32, self.n_head_kv)
        rope_type = self.rope.get("rope_type")
        if isinstance(rope_type, str):
            factor = self.rope.get("factor")
            if rope_type == "linear" and factor is not None:
                add("rope.scaling.type", T.STRING, "linear")
                add("rope.scaling.factor", T.FLOAT32, float(factor))
            elif rope_type == "yarn" and factor is not None:
                add("rope.scaling.type", T.STRING, "yarn")
                add("rope.scaling.factor", T.FLOAT32, float(factor))
                orig = self.rope.get("original_max_position_embeddings")
                if orig is None:
                    raise ModelError("config.json: yarn rope_scaling without original_max_position_embeddings")
                add("rope.scaling.original_context_length", T.UINT32, _int(orig, "original_max_position_embeddings"))
                for src, key in (("extrapolation_factor", "yarn_ext_factor"), ("attention_factor", "yarn_attn_factor"),
                                 ("attn_factor", "yarn_attn_factor"), ("beta_fast", "yarn_beta_fast"),
                                 ("beta_slow", "yarn_beta_slow")):
                    if self.rope.get(src) is not None and not any(k == f"{a}.rope.scaling.{key}" for k, _, _ in kv):
                        add(f"rope.scaling.{key}", T.FLOAT32, float(self.rope[src]))
            elif rope_type in ("su", "longrope"):
                add("rope.scaling.type", T.STRING, "longrope")
            elif rope_type.lower() in ("llama3", "default", "dynamic"):
                pass  # llama3: the rope_freqs tensor; default: nothing to write
            else:
                raise Unsupported(f"config.json: rope_scaling type {rope_type!r} is not converted")
        if self.rope.get("rope_theta") is not None:
            add("rope.freq_base", T.FLOAT32, float(self.rope["rope_theta"]))
        eps = _find(hp, ["rms_norm_eps", "norm_eps"])
        if eps is None and a == "deepseek2":
            eps = 1e-6
        if eps is not None:
            add("attention.layer_norm_rms_epsilon", T.FLOAT32, float(eps))
        eps = _find(hp, ["layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"])
        if eps is not None:
            add("attention.layer_norm_epsilon", T.FLOAT32, float(eps))
        n_exp = _find(hp, ["num_local_experts", "num_experts"])
        if n_exp is not None:
            add("expert_count", T.UINT32, _int(n_exp, "num_experts"))
        n_used = _find(hp, ["num_experts_per_tok", "num_experts_per_token", "top_k_experts"])
        if n_used is not None:
            add("expert_used_count", T.UINT32, _int(n_used, "num_experts_per_tok"))
        if hp.get("n_group") is not None:
            add("expert_group_count", T.UINT32, _int(hp["n_group"], "n_group"))
        if hp.get("topk_group") is not None:
            add("expert_group_used_count", T.UINT32, _int(hp["topk_group"], "topk_group"))
        score = _find(hp, ["score_function", "scoring_func", "score_func", "moe_router_activation",
                           "moe_router_activation_func"])
        if score is not None:
            if score not in ("softmax", "sigmoid"):
                raise Unsupported(f"config.json: expert scoring function {score!r} is not converted")
            add("expert_gating_func", T.UINT32, 1 if score == "softmax" else 2)
        head_dim = hp.get("head_dim")
        if head_dim is not None:
            add("attention.key_length", T.UINT32, _int(head_dim, "head_dim"))
            add("attention.value_length", T.UINT32, head_dim)
        if a == "llama":
            if hp.get("vocab_size") is not None:
                add("vocab_size", T.UINT32, _int(hp["vocab_size"], "vocab_size"))
            rope_dim = head_dim if head_dim is not None else n_embd // self.n_head
            add("rope.dimension_count", T.UINT32, rope_dim)
        if a == "qwen3moe":
            if hp.get("moe_intermediate_size") is not None:
                add("expert_feed_forward_length", T.UINT32, _int(hp["moe_intermediate_size"], "moe_intermediate_size"))
            if hp.get("shared_expert_intermediate_size") is not None:
                add("expert_shared_feed_forward_length", T.UINT32,
                    _int(hp["shared_expert_intermediate_size"], "shared_expert_intermediate_size"))
        if a == "deepseek2":
            self._deepseek2_metadata(add, n_embd)
        if a == "gpt-oss":  # GptOssModel.set_gguf_parameters
            add("attention.sliding_window", T.UINT32, _int(_find(hp, ["sliding_window"], False), "sliding_window"))
            add("expert_feed_forward_length", T.UINT32, _int(n_ff, "intermediate_size"))
        kv.append(("general.file_type", T.UINT32, self.file_type))
        # later writes of a key replace earlier ones (llama.cpp's classes add after the base class)
        seen = {}
        for i, (k, _, _) in enumerate(kv):
            seen[k] = i
        return [item for i, item in enumerate(kv) if seen[item[0]] == i]

    def _deepseek2_metadata(self, add, n_embd):
        """llama.cpp DeepseekV2Model.set_gguf_parameters (after TextModel's)."""
        hp = self.hp
        need = {k: hp.get(k) for k in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")}
        missing = [k for k, v in need.items() if v is None]
        if missing:
            raise ModelError(f"config.json: DeepSeek MLA config lacks {', '.join(missing)}")
        moe = hp.get("n_routed_experts") is not None
        first_dense = hp.get("first_k_dense_replace")
        if first_dense is None:
            first_dense = 0 if moe else self.n_layer
        add("leading_dense_block_count", T.UINT32, _int(first_dense, "first_k_dense_replace"))
        add("vocab_size", T.UINT32, _int(hp["vocab_size"], "vocab_size"))
        if hp.get("q_lora_rank") is not None:
            add("attention.q_lora_rank", T.UINT32, _int(hp["q_lora_rank"], "q_lora_rank"))
        kv_lora, nope, rope, v = (_int(need[k], k) for k in ("kv_lora_rank", "qk_nope_head_dim",
                                                             "qk_rope_head_dim", "v_head_dim"))
        add("attention.kv_lora_rank", T.UINT32, kv_lora)
        add("attention.key_length", T.UINT32, kv_lora + rope)
        add("attention.value_length", T.UINT32, kv_lora)
        add("attention.key_length_mla", T.UINT32, nope + rope)
        add("attention.value_length_mla", T.UINT32, v)
        ff_exp = _find(hp, ["moe_intermediate_size", "intermediate_size"], False)
        add("expert_feed_forward_length", T.UINT32, _int(ff_exp, "moe_intermediate_size"))
        if moe:
            add("expert_count", T.UINT32, _int(hp["n_routed_experts"], "n_routed_experts"))
        add("expert_shared_count", T.UINT32, _int(hp.get("n_shared_experts") or 0, "n_shared_experts"))
        if hp.get("routed_scaling_factor") is not None:
            add("expert_weights_scale", T.FLOAT32, float(hp["routed_scaling_factor"]))
        if hp.get("norm_topk_prob"):
            add("expert_weights_norm", T.BOOL, True)
        add("rope.dimension_count", T.UINT32, rope)
        if self.rope.get("mscale_all_dim") is not None:
            add("rope.scaling.yarn_log_multiplier", T.FLOAT32, 0.1 * float(self.rope["mscale_all_dim"]))

    # ---------------------------------------------------------------- tensors
    def _ggml_type(self, gguf_name, shape):
        """llama.cpp prepare_tensors: 1-D, *_norm.weight, biases and routers F32; else the outtype
        (Q8_0 falls back to F16 when a row is not a multiple of 32)."""
        if len(shape) <= 1 or gguf_name.endswith("_norm.weight") or not gguf_name.endswith(".weight") \
                or gguf_name.endswith(_F32_SUFFIXES):
            return numeric.GGML_F32
        if self.out_ggml == numeric.GGML_Q8_0 and shape[-1] % 32 != 0:
            return numeric.GGML_F16
        return self.out_ggml

    def _permute_rows(self, raw, shape, dtype, n_head):
        rows = shape[0]
        if rows % n_head or (rows // n_head) % 2:
            raise ModelError(f"cannot permute {rows} rows into {n_head} heads of even size")
        row_bytes = len(raw) // rows
        hd = rows // n_head
        half = hd // 2
        mv = memoryview(raw)
        parts = []
        for h in range(n_head):
            for i in range(half):
                for j in range(2):
                    r = h * hd + j * half + i
                    parts.append(mv[r * row_bytes:(r + 1) * row_bytes])
        return b"".join(parts)

    def _check(self, ref):
        if ref.dtype not in FLOAT_DTYPES:
            raise Unsupported(f"{ref.path}: tensor '{ref.name}' has dtype {ref.dtype}; "
                              f"only {', '.join(FLOAT_DTYPES)} checkpoints are converted")

    def _loader(self, ref, ggml_type, permute_heads=None):
        def load():
            raw = ref.read()
            if permute_heads:
                raw = self._permute_rows(raw, ref.shape, ref.dtype, permute_heads)
            return numeric.convert_chunks(raw, ref.dtype, ggml_type)
        return load

    def _add(self, plan, name, hf_shape, ggml_type, source, experts=0):
        n = 1
        for d in hf_shape:
            n *= d
        ne = [int(d) for d in reversed(hf_shape)]
        plan.tensors.append((name, ne, ggml_type, numeric.type_nbytes(ggml_type, n), source))
        plan.n_params += n
        if experts:
            plan.expert_params += n // experts
            plan.n_experts = experts

    def plan(self):
        plan = Plan()
        plan.kv = self.metadata()
        rope_freqs = self.rope_freqs()
        if rope_freqs is not None:
            data = struct.pack("<%df" % len(rope_freqs), *rope_freqs)
            self._add(plan, "rope_freqs.weight", [len(rope_freqs)], numeric.GGML_F32, lambda d=data: d)
        experts = {}   # (layer, kind) -> {expert index: ref}
        order = []     # output order: names, or ("exps", layer, kind) at the first expert's place
        mapped = {}
        n_exp = _find(self.hp, ["num_local_experts", "num_experts", "n_routed_experts"])
        for hf_name, ref in self.src.items():
            name = hf_name
            if name.endswith(_SKIP):
                continue
            if not name.startswith(("model.", "lm_head.")) and name.startswith(("layers.", "embed_tokens.", "norm.")):
                name = "model." + name  # LlamaModel / Qwen2Model checkpoints without the "model." prefix
            if self.arch == "gpt-oss":
                lm = re.match(r"^model\.layers\.(\d+)\.(.+)$", name)
                if lm and lm.group(2).startswith("mlp.experts."):
                    if not name.endswith(("_blocks", "_scales")):
                        self._check(ref)
                    order.append(("oss", int(lm.group(1)), lm.group(2)[len("mlp.experts."):], ref))
                    continue
                if name.endswith("self_attn.sinks"):
                    name += ".weight"
            if self.arch == "deepseek2":
                if name.endswith("e_score_correction_bias"):
                    name = name[:-len("_bias")] + ".bias"
                if name == "lm_head.weight" and self.hp.get("tie_word_embeddings"):
                    continue
                lm = re.match(r"^model\.layers\.(\d+)\.", name)
                if lm and int(lm.group(1)) >= self.n_layer:
                    continue  # multi-token-prediction layers: llama.cpp skips them
                if name.endswith("self_attn.kv_b_proj.weight"):
                    self._check(ref)
                    layer = int(lm.group(1))
                    order.append(("kv_b", layer, ref))
                    continue
            m = _EXPERT_RE.match(name)
            if m:
                self._check(ref)
                layer = int(m.group(1))
                idx = int(m.group(2) if m.group(2) is not None else m.group(4))
                kind = _EXPERT_KIND[m.group(3) or m.group(5)]
                key = (layer, kind)
                if key not in experts:
                    experts[key] = {}
                    order.append(("exps",) + key)
                experts[key][idx] = ref
                continue
            if name in _GLOBAL:
                gguf = _GLOBAL[name]
            else:
                lm = _LAYER_RE.match(name)
                if not lm or lm.group(2) not in _LAYER:
                    raise ModelError(f"{ref.path}: cannot map tensor '{hf_name}' to a GGUF name for {self.hf_arch}")
                layer = int(lm.group(1))
                if layer >= self.n_layer:
                    raise ModelError(f"{ref.path}: tensor '{hf_name}' is for layer {layer}, "
                                     f"but num_hidden_layers is {self.n_layer}")
                gguf = f"blk.{layer}.{_LAYER[lm.group(2)]}.{lm.group(3)}"
                if self.arch == "gpt-oss" and gguf.endswith(".ffn_norm.weight"):
                    gguf = f"blk.{layer}.post_attention_norm.weight"  # gpt-oss: the pre-FFN norm
            self._check(ref)
            if gguf in mapped:
                raise ModelError(f"{ref.path}: tensors '{mapped[gguf][0].name}' and '{hf_name}' both map to '{gguf}'")
            order.append(gguf)
            permute = None
            if self.arch in PERMUTE_QK:
                if name.endswith(("self_attn.q_proj.weight", "self_attn.q_proj.bias")):
                    permute = self.n_head
                elif name.endswith(("self_attn.k_proj.weight", "self_attn.k_proj.bias")):
                    permute = self.n_head_kv
            mapped[gguf] = (ref, permute)
        for item in order:
            if isinstance(item, tuple) and item[0] == "kv_b":
                self._add_kv_b(plan, item[1], item[2])
                continue
            if isinstance(item, tuple) and item[0] == "oss":
                self._add_oss_experts(plan, *item[1:])
                continue
            if isinstance(item, tuple):
                _, layer, kind = item
                group = experts[(layer, kind)]
                n = len(group)
                if n_exp is not None and n != n_exp:
                    raise ModelError(f"layer {layer}: {n} '{kind}' experts in the checkpoint, config says {n_exp}")
                if sorted(group) != list(range(n)):
                    raise ModelError(f"layer {layer}: '{kind}' expert indices are not 0..{n - 1}")
                refs = [group[i] for i in range(n)]
                shape0 = refs[0].shape
                if any(r.shape != shape0 for r in refs):
                    raise ModelError(f"layer {layer}: '{kind}' experts differ in shape")
                if len(shape0) != 2:
                    raise ModelError(f"{refs[0].path}: expert tensor '{refs[0].name}' is not 2-D")
                gname = f"blk.{layer}.ffn_{kind}_exps.weight"
                shape = [n] + list(shape0)
                gt = self._ggml_type(gname, shape)

                def source(refs=refs, gt=gt):
                    for r in refs:
                        yield from numeric.convert_chunks(r.read(), r.dtype, gt)
                self._add(plan, gname, shape, gt, source, experts=n)
            else:
                ref, permute = mapped[item]
                gt = self._ggml_type(item, ref.shape)
                self._add(plan, item, ref.shape, gt, self._loader(ref, gt, permute))
        if not any(t[0] == "token_embd.weight" for t in plan.tensors):
            raise ModelError("checkpoint has no model.embed_tokens.weight")
        return plan

    def _add_kv_b(self, plan, layer, ref):
        """llama.cpp DeepseekV2Model: kv_b_proj [n_head * (nope + v), kv_lora] viewed per head, split
        into k_b (transposed to [n_head, kv_lora, nope]) and v_b ([n_head, v, kv_lora])."""
        nope, v = self.hp["qk_nope_head_dim"], self.hp["v_head_dim"]
        n_head = self.n_head
        rows, kv_lora = ref.shape if len(ref.shape) == 2 else (0, 0)
        if rows != n_head * (nope + v):
            raise ModelError(f"{ref.path}: '{ref.name}' has shape {ref.shape}, expected "
                             f"[{n_head * (nope + v)}, kv_lora_rank]")
        es = DTYPE_SIZE[ref.dtype]
        code = {2: "H", 4: "I"}[es]
        row_bytes = kv_lora * es

        def part(which):
            raw = ref.read()
            out = []
            for h in range(n_head):
                base = h * (nope + v) * row_bytes
                if which == "k":  # [nope, kv_lora] -> [kv_lora, nope]
                    a = array.array(code)
                    a.frombytes(raw[base:base + nope * row_bytes])
                    t = array.array(code)
                    for c in range(kv_lora):
                        t.extend(a[c::kv_lora])
                    out.append(t.tobytes())
                else:
                    out.append(raw[base + nope * row_bytes:base + (nope + v) * row_bytes])
            return b"".join(out)

        for which, gname, shape in (("k", f"blk.{layer}.attn_k_b.weight", [n_head, kv_lora, nope]),
                                    ("v", f"blk.{layer}.attn_v_b.weight", [n_head, v, kv_lora])):
            gt = self._ggml_type(gname, shape)
            self._add(plan, gname, shape, gt,
                      lambda which=which, gt=gt: numeric.convert_chunks(part(which), ref.dtype, gt))

    def _add_oss_experts(self, plan, layer, what, ref):
        """llama.cpp GptOssModel.modify_tensors for unquantized experts: gate_up_proj [E, n_embd, 2*n_ff]
        is transposed and de-interleaved (gate = even, up = odd outputs), down_proj [E, n_ff, n_embd]
        transposed; the biases de-interleaved / kept. Read one expert at a time."""
        if what.endswith(("_blocks", "_scales")):
            raise Unsupported(f"{ref.path}: '{ref.name}' is MXFP4-packed; only BF16/F16/F32 GPT-OSS checkpoints "
                              f"are converted (dequantized ones, e.g. *-BF16 repositories)")
        es = DTYPE_SIZE[ref.dtype]
        code = {2: "H", 4: "I"}[es]
        n_exp = ref.shape[0]

        def expert(e, per):
            a = array.array(code)
            a.frombytes(ref.read(e * per * es, per * es))
            return a

        if what == "gate_up_proj_bias":
            if len(ref.shape) != 2 or ref.shape[1] % 2:
                raise ModelError(f"{ref.path}: '{ref.name}' has shape {ref.shape}, expected [E, 2*n_ff]")
            ff = ref.shape[1] // 2
            for kind, start in (("gate", 0), ("up", 1)):
                def src(start=start):
                    a = array.array(code)
                    a.frombytes(ref.read())
                    return numeric.convert_chunks(a[start::2].tobytes(), ref.dtype, numeric.GGML_F32)
                self._add(plan, f"blk.{layer}.ffn_{kind}_exps.bias", [n_exp, ff], numeric.GGML_F32, src)
            return
        if what == "down_proj_bias":
            self._add(plan, f"blk.{layer}.ffn_down_exps.bias", list(ref.shape), numeric.GGML_F32,
                      self._loader(ref, numeric.GGML_F32))
            return
        if len(ref.shape) != 3:
            raise ModelError(f"{ref.path}: '{ref.name}' has shape {ref.shape}, expected [E, in, out]")
        _, n_in, n_out = ref.shape
        per = n_in * n_out
        if what == "gate_up_proj":
            ff = n_out // 2
            for kind, start in (("gate", 0), ("up", 1)):
                name = f"blk.{layer}.ffn_{kind}_exps.weight"
                gt = self._ggml_type(name, [n_exp, ff, n_in])

                def src(start=start, gt=gt):
                    for e in range(n_exp):
                        a = expert(e, per)  # [n_in][2*ff]; output row r = input column 2r + start
                        t = array.array(code)
                        for r in range(ff):
                            t.extend(a[2 * r + start::n_out])
                        yield from numeric.convert_chunks(t.tobytes(), ref.dtype, gt)
                self._add(plan, name, [n_exp, ff, n_in], gt, src, experts=n_exp)
            return
        if what == "down_proj":
            name = f"blk.{layer}.ffn_down_exps.weight"
            gt = self._ggml_type(name, [n_exp, n_out, n_in])

            def src(gt=gt):
                for e in range(n_exp):
                    a = expert(e, per)  # [n_ff][n_embd] -> [n_embd][n_ff]
                    t = array.array(code)
                    for r in range(n_out):
                        t.extend(a[r::n_out])
                    yield from numeric.convert_chunks(t.tobytes(), ref.dtype, gt)
            self._add(plan, name, [n_exp, n_out, n_in], gt, src, experts=n_exp)
            return
        raise ModelError(f"{ref.path}: cannot map tensor '{ref.name}' to a GGUF name for {self.hf_arch}")

    # llama.cpp LlamaModel.generate_extra_tensors (rope_type llama3).
    def rope_freqs(self):
        if str(self.rope.get("rope_type", "")).lower() != "llama3":
            return None
        hp = self.hp
        base = float(self.rope.get("rope_theta", 10000.0))
        dim = hp.get("head_dim") or hp["hidden_size"] // self.n_head
        factor = float(self.rope.get("factor", 8.0))
        low = float(self.rope.get("low_freq_factor", 1.0))
        high = float(self.rope.get("high_freq_factor", 4.0))
        old_ctx = self.rope.get("original_max_position_embeddings", hp.get("original_max_position_embeddings", 8192))
        low_wavelen = old_ctx / low
        high_wavelen = old_ctx / high
        # Computed in double and rounded once to f32 (llama.cpp computes in torch float32, whose
        # pow/division order can differ by an ulp or two in the interpolated band).
        out = []
        for i in range(0, dim, 2):
            freq = 1.0 / (base ** (i / dim))
            wavelen = 2 * math.pi / freq
            if wavelen < high_wavelen:
                out.append(1.0)
            elif wavelen > low_wavelen:
                out.append(factor)
            else:
                smooth = (old_ctx / wavelen - low) / (high - low)
                out.append(1 / ((1 - smooth) / factor + smooth))
        return out


def size_label(n_params, expert_params, n_experts):
    """gguf-py's size_label: "1.2B", or "8x7.0B" for MoE models."""
    def rounded(n):
        for limit, scale, suffix in ((1e12, 1e-12, "T"), (1e9, 1e-9, "B"), (1e6, 1e-6, "M")):
            if n > limit:
                break
        else:
            scale, suffix = 1e-3, "K"
        v = n * scale
        fix = max(2 - len(str(round(v)).lstrip("0")), 0)
        return f"{v:.{fix}f}{suffix}"
    if n_experts > 0:
        shared = n_params - expert_params * n_experts
        return f"{n_experts}x{rounded(shared + expert_params)}"
    return rounded(n_params)
