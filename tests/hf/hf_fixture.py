"""Tiny Hugging Face Llama-layout directories and an fp64 NumPy forward that follows transformers' Llama code.

Used by tests/hf/test_hf_cpu.py (CI, no PyTorch). Nothing here imports torch or transformers: the safetensors
files are written by hand (8-byte header length, JSON header, raw little-endian bytes), and the reference
forward re-implements, in fp64, what transformers' LlamaForCausalLM computes:
  embed_tokens -> L x [x + o_proj(attn(rope(q_proj(n1)), rope(k_proj(n1)), v_proj(n1)))  with n1 = rms(x),
                        then x + down_proj(silu(gate_proj(n2)) * up_proj(n2))            with n2 = rms(x)]
  -> norm -> lm_head (or embed_tokens when tied)
with RoPE in the rotate-half form (cos, sin of cat(freqs, freqs), multiplied by the attention factor), the
inverse frequencies of modeling_rope_utils (default, linear, llama3, yarn; 5.x semantics), GQA by repeating
each KV head over its group of query heads, and a causal softmax(q k^T / sqrt(head_dim)).
"""
import json
import math
import os
import struct

import numpy as np

# ---- safetensors --------------------------------------------------------------------------------------------


def bf16_round(x):
    """fp32 array -> (uint16 bf16 bits, the fp32 values they represent), round to nearest even."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    widened = (rounded.astype(np.uint32) << 16).view(np.float32)
    return rounded, widened


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, dtype 'F32'|'F16'|'BF16', raw numpy array of matching itemsize, shape)."""
    header, blobs, offset = {}, [], 0
    for name, dtype, raw, shape in tensors:
        data = np.ascontiguousarray(raw).tobytes()
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """-> ({name: (dtype, shape, raw bytes)}, metadata)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, h in header.items():
        b, e = h["data_offsets"]
        out[name] = (h["dtype"], tuple(h["shape"]), data[b:e])
    return out, meta


def as_float64(dtype, shape, raw):
    if dtype == "F32":
        return np.frombuffer(raw, dtype="<f4").astype(np.float64).reshape(shape)
    if dtype == "F16":
        return np.frombuffer(raw, dtype="<f2").astype(np.float64).reshape(shape)
    if dtype == "BF16":
        u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return u.view(np.float32).astype(np.float64).reshape(shape)
    raise ValueError(dtype)


# ---- the fixture ---------------------------------------------------------------------------------------------

# name, config style, architecture, heads / kv heads, tied, weight dtype, shards, rope dict (5.x keys)
VARIANTS = {
    # GQA, untied, llama3 scaling, transformers 4.x config (rope_theta + rope_scaling), bf16, three shards + index
    "gqa_llama3": dict(style="4.x", arch="LlamaForCausalLM", heads=4, kv=2, tied=False, dtype="BF16", shards=3,
                       rope={"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 64}),
    # MHA, tied embeddings, no scaling, transformers 5.x config (rope_parameters), fp32, one model.safetensors
    "tied_mha": dict(style="5.x", arch="LlamaForCausalLM", heads=4, kv=4, tied=True, dtype="F32", shards=1,
                     rope={"rope_type": "default"}),
    # GQA, yarn (attention factor from the factor), 5.x, fp16, two shards
    "gqa_yarn": dict(style="5.x", arch="LlamaForCausalLM", heads=4, kv=1, tied=False, dtype="F16", shards=2,
                     rope={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 48,
                           "beta_fast": 32.0, "beta_slow": 1.0}),
    # Mistral without a sliding window, linear scaling with the old 'type' key (4.x), fp32
    "mistral_linear": dict(style="4.x", arch="MistralForCausalLM", heads=2, kv=1, tied=False, dtype="F32", shards=1,
                           rope={"type": "linear", "factor": 2.0}),
}

HIDDEN, LAYERS, FF, VOCAB, THETA, EPS, MAX_POS = 64, 2, 96, 300, 10000.0, 1e-5, 256


def make_config(v):
    c = {
        "architectures": [v["arch"]], "model_type": "mistral" if v["arch"].startswith("Mistral") else "llama",
        "hidden_size": HIDDEN, "intermediate_size": FF, "num_hidden_layers": LAYERS,
        "num_attention_heads": v["heads"], "num_key_value_heads": v["kv"], "vocab_size": VOCAB,
        "rms_norm_eps": EPS, "tie_word_embeddings": v["tied"], "hidden_act": "silu",
        "max_position_embeddings": MAX_POS, "attention_bias": False, "mlp_bias": False,
        "bos_token_id": 1, "eos_token_id": 2,
    }
    dtype_name = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[v["dtype"]]
    if v["arch"].startswith("Mistral"):
        c["sliding_window"] = None
    if v["style"] == "5.x":
        c["dtype"] = dtype_name
        c["rope_parameters"] = dict(v["rope"], rope_theta=THETA)
    else:
        c["torch_dtype"] = dtype_name
        c["rope_theta"] = THETA
        c["rope_scaling"] = None if v["rope"].get("rope_type") == "default" else dict(v["rope"])
    return c


def hf_tensor_shapes(v):
    d = HIDDEN // v["heads"]
    shapes = [("model.embed_tokens.weight", (VOCAB, HIDDEN))]
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        shapes += [(p + "input_layernorm.weight", (HIDDEN,)),
                   (p + "self_attn.q_proj.weight", (v["heads"] * d, HIDDEN)),
                   (p + "self_attn.k_proj.weight", (v["kv"] * d, HIDDEN)),
                   (p + "self_attn.v_proj.weight", (v["kv"] * d, HIDDEN)),
                   (p + "self_attn.o_proj.weight", (HIDDEN, v["heads"] * d)),
                   (p + "post_attention_layernorm.weight", (HIDDEN,)),
                   (p + "mlp.gate_proj.weight", (FF, HIDDEN)),
                   (p + "mlp.up_proj.weight", (FF, HIDDEN)),
                   (p + "mlp.down_proj.weight", (HIDDEN, FF))]
    shapes.append(("model.norm.weight", (HIDDEN,)))
    if not v["tied"]:
        shapes.append(("lm_head.weight", (VOCAB, HIDDEN)))
    return shapes


def write_model_dir(path, name, seed=0, config_edits=None, extra_tensors=None):
    """Writes the variant's directory; returns the weights as fp64 {hf name: array} (the stored values)."""
    v = VARIANTS[name]
    os.makedirs(path, exist_ok=True)
    cfg = make_config(v)
    for k, val in (config_edits or {}).items():
        if val is None and k in cfg and k != "sliding_window":
            del cfg[k]
        else:
            cfg[k] = val
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    rng = np.random.default_rng(seed)
    entries, weights = [], {}
    for tname, shape in hf_tensor_shapes(v):
        if tname.endswith("norm.weight"):
            x = 1.0 + 0.2 * rng.standard_normal(shape)
        else:
            x = 0.08 * rng.standard_normal(shape)
        x = x.astype(np.float32)
        if v["dtype"] == "BF16":
            raw, val = bf16_round(x)
        elif v["dtype"] == "F16":
            raw = x.astype(np.float16)
            val = raw.astype(np.float32)
        else:
            raw, val = x, x
        weights[tname] = val.astype(np.float64)
        entries.append((tname, v["dtype"], raw, shape))
    entries += extra_tensors or []
    if v["shards"] == 1:
        write_safetensors(os.path.join(path, "model.safetensors"), entries, {"format": "pt"})
    else:
        per = math.ceil(len(entries) / v["shards"])
        weight_map = {}
        for s in range(v["shards"]):
            fname = f"model-{s + 1:05d}-of-{v['shards']:05d}.safetensors"
            part = entries[s * per:(s + 1) * per]
            write_safetensors(os.path.join(path, fname), part, {"format": "pt"})
            for e in part:
                weight_map[e[0]] = fname
        with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)
    with open(os.path.join(path, "tokenizer.json"), "w") as f:
        json.dump({"version": "1.0", "fixture": name}, f)
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2}, f)
    return weights


# ---- RoPE frequencies (transformers modeling_rope_utils, 5.x) ----------------------------------------------------


def rope_inv_freq(rope, dim, base, max_pos):
    """-> (inv_freq (dim/2,) fp64, attention factor)."""
    kind = rope.get("rope_type", rope.get("type", "default"))
    inv = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    if kind == "default":
        return inv, 1.0
    factor = rope["factor"]
    if kind == "linear":
        return inv / factor, 1.0
    orig = rope.get("original_max_position_embeddings", max_pos)
    if kind == "llama3":
        low, high = rope["low_freq_factor"], rope["high_freq_factor"]
        low_wl, high_wl = orig / low, orig / high
        wavelen = 2 * math.pi / inv
        out = np.where(wavelen > low_wl, inv / factor, inv)
        smooth = (orig / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * out / factor + smooth * out
        medium = ~(wavelen < high_wl) & ~(wavelen > low_wl)
        return np.where(medium, smoothed, out), 1.0
    if kind == "yarn":
        att = rope.get("attention_factor")
        if att is None:
            att = 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0
        beta_fast, beta_slow = rope.get("beta_fast") or 32, rope.get("beta_slow") or 1

        def corr(rot):
            return dim * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))

        lo, hi = max(math.floor(corr(beta_fast)), 0), min(math.ceil(corr(beta_slow)), dim - 1)
        if lo == hi:
            hi += 0.001
        ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - lo) / (hi - lo), 0, 1)
        extra = 1 - ramp
        return (inv / factor) * (1 - extra) + inv * extra, att
    raise ValueError(kind)


# ---- the forward -------------------------------------------------------------------------------------------------


def rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def forward_logits(name, weights, tokens):
    """tokens (B, T) -> logits (B, T, V) fp64, as LlamaForCausalLM computes them."""
    v = VARIANTS[name]
    H, KV = v["heads"], v["kv"]
    D = HIDDEN // H
    inv, att = rope_inv_freq(v["rope"], D, THETA, MAX_POS)
    B, T = tokens.shape
    pos = np.arange(T, dtype=np.float64)
    freqs = np.outer(pos, inv)                     # (T, D/2)
    emb = np.concatenate([freqs, freqs], axis=-1)  # (T, D)
    cos, sin = np.cos(emb) * att, np.sin(emb) * att
    mask = np.triu(np.full((T, T), -np.inf), k=1)
    x = weights["model.embed_tokens.weight"][tokens]  # (B, T, C)
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        n1 = rms(x, weights[p + "input_layernorm.weight"], EPS)
        q = (n1 @ weights[p + "self_attn.q_proj.weight"].T).reshape(B, T, H, D).transpose(0, 2, 1, 3)
        k = (n1 @ weights[p + "self_attn.k_proj.weight"].T).reshape(B, T, KV, D).transpose(0, 2, 1, 3)
        val = (n1 @ weights[p + "self_attn.v_proj.weight"].T).reshape(B, T, KV, D).transpose(0, 2, 1, 3)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = np.repeat(k, H // KV, axis=1)  # repeat_kv: query head h reads KV head h // (H / KV)
        val = np.repeat(val, H // KV, axis=1)
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(D) + mask
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        a = (s / s.sum(axis=-1, keepdims=True)) @ val  # (B, H, T, D)
        x = x + a.transpose(0, 2, 1, 3).reshape(B, T, H * D) @ weights[p + "self_attn.o_proj.weight"].T
        n2 = rms(x, weights[p + "post_attention_layernorm.weight"], EPS)
        g = n2 @ weights[p + "mlp.gate_proj.weight"].T
        u = n2 @ weights[p + "mlp.up_proj.weight"].T
        x = x + ((g / (1 + np.exp(-g))) * u) @ weights[p + "mlp.down_proj.weight"].T
    x = rms(x, weights["model.norm.weight"], EPS)
    head = weights["model.embed_tokens.weight" if v["tied"] else "lm_head.weight"]
    return x @ head.T


def greedy_generate(name, weights, prompt, max_new, eos=None):
    """Greedy decoding by a full re-forward of the whole sequence per new token (no cache: an implementation
    independent of any KV cache). -> (new ids, smallest top-1 minus top-2 logit gap over the steps)."""
    ids = [int(t) for t in prompt]
    new, margin = [], float("inf")
    for _ in range(max_new):
        last = forward_logits(name, weights, np.asarray([ids], dtype=np.int64))[0, -1]
        order = np.argsort(-last, kind="stable")
        margin = min(margin, float(last[order[0]] - last[order[1]]))
        nxt = int(order[0])
        ids.append(nxt)
        new.append(nxt)
        if eos is not None and nxt == eos:
            break
    return new, margin


def read_weights_f64(path):
    """{name: fp64 array} of a safetensors file, or of a directory's shards."""
    files = [path] if os.path.isfile(path) else sorted(
        os.path.join(path, f) for f in os.listdir(path) if f.endswith(".safetensors"))
    out = {}
    for f in files:
        tensors, _ = read_safetensors(f)
        for k, (dtype, shape, raw) in tensors.items():
            out[k] = as_float64(dtype, shape, raw)
    return out


def mean_loss(logits, tokens):
    """Next-token cross-entropy over positions 0..T-2, fp64."""
    lg = logits[:, :-1, :]
    m = lg.max(axis=-1, keepdims=True)
    lse = (m + np.log(np.exp(lg - m).sum(axis=-1, keepdims=True)))[..., 0]
    tgt = tokens[:, 1:]
    picked = np.take_along_axis(lg, tgt[..., None], axis=-1)[..., 0]
    return float(np.mean(lse - picked))


def write_llmc_shard(path, tokens, uint32=False):
    """llm.c dev/data/data_common.py: 256 int32 header (magic, version, count), then the tokens."""
    header = np.zeros(256, dtype="<i4")
    header[0], header[1] = (20240801, 7) if uint32 else (20240520, 1)
    header[2] = len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype="<u4" if uint32 else "<u2").tobytes())


def load_npy(path):
    return np.load(path)
