#!/usr/bin/python3
"""Golden logits for two architectures: Llama-3 with "llama3" RoPE scaling, and Qwen3.

Run it with /usr/bin/python3, which has Debian's python3-torch 1.13 and numpy. The `python3` on
PATH is a pyenv build without torch. `transformers` is not needed and not used.

What it transcribes
-------------------
The Hugging Face forward, written out by hand in plain PyTorch float64. It follows the eager path of
transformers' modeling_llama.py (LlamaForCausalLM) and modeling_qwen3.py (Qwen3ForCausalLM). It was
written independently of latentllm's C++:
  * embedding lookup;
  * RMSNorm as HF computes it: variance = mean(x^2) over the last dim; x * rsqrt(variance + eps);
    then weight * x;
  * RoPE in the rotate_half convention: inv_freq = 1 / theta^(arange(0, d_h, 2) / d_h);
    freqs = pos x inv_freq; emb = cat(freqs, freqs); q' = q*cos + rotate_half(q)*sin, where
    rotate_half(x) = cat(-x[d_h/2:], x[:d_h/2]);
  * rope_scaling {"rope_type": "llama3"}, as in HF's _compute_llama3_parameters. Let
    wavelen = 2*pi / inv_freq. Components with wavelen > orig/low_freq_factor are divided by factor.
    Components with wavelen < orig/high_freq_factor are kept. Components in between are smoothed:
    smooth = (orig/wavelen - low) / (high - low), and
    inv = (1 - smooth) * inv/factor + smooth * inv. The attention factor is 1;
  * Qwen3 only: q_norm and k_norm, an RMSNorm over each head's d_h entries of q and k. It is applied
    after the projection and BEFORE RoPE. Qwen3 also has head_dim != hidden_size / num_heads;
  * GQA: kv head j serves query heads j*n_rep .. (j+1)*n_rep - 1 (HF repeat_kv);
  * causal softmax attention scaled by d_h^-1/2;
  * the SwiGLU MLP down(silu(gate(x)) * up(x)), pre-norm residual blocks, the final norm, and the
    tied head (logits = h @ embed_tokens^T).
One difference from HF: HF computes inv_freq, cos and sin in float32. This script computes them in
float64. Computing them in float32 instead moves these logits by at most 4e-6 (measured).

The weights
-----------
They come from the presets `llama3-tiny` and `qwen3-tiny` of tools/synth (latentllm-synth). The
script regenerates them with the same counter-based RNG, specified in tools/synth/synth.hpp:
  * key = mix64(seed ^ fnv1a64(name)), where mix64 is the splitmix64 finalizer;
  * element i: z = mix64(key + (i+1) * 0x9e3779b97f4a7c15);
  * u = float32(z >> 40) * 2^-24;
  * value = center + scale * (2u - 1), computed in float32.
The value is then rounded to the preset's dtype (bfloat16, round to nearest even). numpy uint64 does
this vectorized, and the values match the C++ bit for bit. `--checkpoint DIR` checks that: every
tensor of a checkpoint written by `latentllm-synth --preset <name>` must be byte-identical to the
values regenerated here, and its config.json must equal this preset's config.

The golden files
----------------
tests/data/golden/<preset>.json holds the following keys:
  * preset, architecture, seed, dtype, config (the config.json), and generator (a note on how the
    file was made);
  * input_ids: the first 64 ids of WikiText-2 test with that tokenizer. They come from
    ../shared/data/tokenizers/<llama3|qwen3>/REFERENCE.json, eval.wikitext2_test.first_64, and
    have no BOS;
  * vocab_ids: fixed ids, namely the distinct input ids plus a spread of others;
  * logits[t][j]: the logit of vocab_ids[j] at position t;
  * logsumexp[t]: the log-sum-exp over the FULL vocabulary;
  * argmax[t] and max_logit[t]: the top id and its logit.
The llama3-tiny file also holds "without_rope_scaling": the same numbers with rope_scaling removed,
and the largest differences from the scaled numbers. A test can use them to assert that the scaling
is really exercised.

Regenerate
----------
  /usr/bin/python3 scripts/gen_arch_golden.py                  # writes tests/data/golden/*.json
  build/tools/synth/latentllm-synth --preset llama3-tiny --out /tmp/l3 --force
  /usr/bin/python3 scripts/gen_arch_golden.py --preset llama3-tiny --checkpoint /tmp/l3 --no-write
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")

# ---- the RNG (tools/synth/synth.hpp) -------------------------------------------------------------

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def fnv1a64(s):
    h = 0xCBF29CE484222325
    for b in s.encode("utf-8"):
        h = ((h ^ b) * 0x100000001B3) & M64
    return h


def mix64_int(z):
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & M64
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def mix64_np(z):
    """The splitmix64 finalizer on a uint64 array (numpy wraps mod 2^64)."""
    z = z ^ (z >> np.uint64(30))
    z = z * np.uint64(0xBF58476D1CE4E5B9)
    z = z ^ (z >> np.uint64(27))
    z = z * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def tensor_key(seed, name):
    return mix64_int((seed ^ fnv1a64(name)) & M64)


def synth_values(seed, name, n, center, scale):
    """float32 values of elements 0..n-1 (before the dtype rounding)."""
    key = np.uint64(tensor_key(seed, name))
    with np.errstate(over="ignore"):
        i = np.arange(1, n + 1, dtype=np.uint64)
        z = mix64_np(key + i * np.uint64(GOLDEN))
    u = (z >> np.uint64(40)).astype(np.float32) * np.float32(2.0 ** -24)  # exact
    t = np.float32(2.0) * u - np.float32(1.0)  # exact
    return np.float32(center) + np.float32(scale) * t  # float32: product rounded, then the sum


def to_storage(values, dtype):
    """(raw little-endian bytes, float64 values) of float32 `values` stored as dtype (RNE)."""
    if dtype == "float32":
        return values.astype("<f4").tobytes(), values.astype(np.float64)
    if dtype == "float16":
        h = values.astype(np.float16)
        return h.astype("<f2").tobytes(), h.astype(np.float64)
    bits = values.view(np.uint32).astype(np.uint64)
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
    rounded = np.where(nan, (bits >> 16) | 0x40, rounded).astype(np.uint16)
    widened = (rounded.astype(np.uint32) << 16).view(np.float32)
    return rounded.astype("<u2").tobytes(), widened.astype(np.float64)


# ---- the two presets (tools/synth/presets.cpp) ---------------------------------------------------

LLAMA3_TINY = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 16, "hidden_act": "silu",
    "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 128, "max_position_embeddings": 128,
    "mlp_bias": False, "model_type": "llama", "num_attention_heads": 4, "num_hidden_layers": 2,
    "num_key_value_heads": 2, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 32},
    "rope_theta": 10000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0", "use_cache": True, "vocab_size": 128256,
}
QWEN3_TINY = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 32, "hidden_act": "silu", "hidden_size": 64,
    "initializer_range": 0.02, "intermediate_size": 128, "max_position_embeddings": 128,
    "max_window_layers": 2, "model_type": "qwen3", "num_attention_heads": 4, "num_hidden_layers": 2,
    "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000,
    "sliding_window": None, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
}
PRESETS = {"llama3-tiny": (LLAMA3_TINY, "llama3"), "qwen3-tiny": (QWEN3_TINY, "qwen3")}


def head_dim(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def tensor_plan(cfg):
    """[(name, shape, center, scale)] in state-dict order, with the Tiny init scheme of synth.hpp."""
    d, f, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    dh, nh, nkv = head_dim(cfg), cfg["num_attention_heads"], cfg["num_key_value_heads"]
    qk_norm = cfg["model_type"] == "qwen3"
    lin = lambda name, out, inp: (name + ".weight", (out, inp), 0.0, float(np.float32(math.sqrt(3.0 / inp))))
    norm = lambda name, n: (name + ".weight", (n,), 1.0, float(np.float32(0.2)))
    plan = [("model.embed_tokens.weight", (V, d), 0.0, float(np.float32(math.sqrt(3.0))))]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        plan += [lin(p + "self_attn.q_proj", nh * dh, d), lin(p + "self_attn.k_proj", nkv * dh, d),
                 lin(p + "self_attn.v_proj", nkv * dh, d), lin(p + "self_attn.o_proj", d, nh * dh)]
        if qk_norm:
            plan += [norm(p + "self_attn.q_norm", dh), norm(p + "self_attn.k_norm", dh)]
        plan += [lin(p + "mlp.gate_proj", f, d), lin(p + "mlp.up_proj", f, d), lin(p + "mlp.down_proj", d, f),
                 norm(p + "input_layernorm", d), norm(p + "post_attention_layernorm", d)]
    plan.append(norm("model.norm", d))
    assert cfg["tie_word_embeddings"]
    return plan


def make_weights(cfg, seed):
    """{name: (raw bytes as stored, float64 tensor)}."""
    out = {}
    for name, shape, center, scale in tensor_plan(cfg):
        raw, w = to_storage(synth_values(seed, name, int(np.prod(shape)), center, scale), cfg["torch_dtype"])
        out[name] = (raw, torch.from_numpy(w.reshape(shape)))
    return out


# ---- the forward (HF eager path, float64) --------------------------------------------------------

def rms_norm(x, w, eps):
    variance = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(variance + eps))


def rope_inv_freq(cfg, scaling=True):
    dh, base = head_dim(cfg), float(cfg["rope_theta"])
    inv_freq = 1.0 / (base ** (torch.arange(0, dh, 2, dtype=torch.float64) / dh))
    rs = cfg.get("rope_scaling")
    if not scaling or rs is None:
        return inv_freq
    assert rs["rope_type"] == "llama3"
    factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old_context_len = rs["original_max_position_embeddings"]
    low_freq_wavelen, high_freq_wavelen = old_context_len / low, old_context_len / high
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
    is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, inv_freq_llama)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def forward(cfg, W, ids, rope_scaling=True):
    """logits [T, V] (float64) of one sequence."""
    T, d = len(ids), cfg["hidden_size"]
    dh, nh, nkv = head_dim(cfg), cfg["num_attention_heads"], cfg["num_key_value_heads"]
    eps, n_rep = cfg["rms_norm_eps"], nh // nkv
    w = lambda name: W[name][1]
    freqs = torch.arange(T, dtype=torch.float64)[:, None] * rope_inv_freq(cfg, rope_scaling)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()  # [T, d_h]
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    h = w("model.embed_tokens.weight")[torch.tensor(ids)]  # [T, d]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = rms_norm(h, w(p + "input_layernorm.weight"), eps)
        q = (x @ w(p + "self_attn.q_proj.weight").T).view(T, nh, dh)
        k = (x @ w(p + "self_attn.k_proj.weight").T).view(T, nkv, dh)
        v = (x @ w(p + "self_attn.v_proj.weight").T).view(T, nkv, dh)
        if cfg["model_type"] == "qwen3":  # per-head RMSNorm, before RoPE
            q = rms_norm(q, w(p + "self_attn.q_norm.weight"), eps)
            k = rms_norm(k, w(p + "self_attn.k_norm.weight"), eps)
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # [heads, T, d_h]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k[:, None].expand(nkv, n_rep, T, dh).reshape(nh, T, dh)  # repeat_kv
        v = v[:, None].expand(nkv, n_rep, T, dh).reshape(nh, T, dh)
        scores = (q @ k.transpose(1, 2)) * dh ** -0.5
        probs = torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1)
        attn = (probs @ v).transpose(0, 1).reshape(T, nh * dh)
        h = h + attn @ w(p + "self_attn.o_proj.weight").T
        x = rms_norm(h, w(p + "post_attention_layernorm.weight"), eps)
        gate, up = x @ w(p + "mlp.gate_proj.weight").T, x @ w(p + "mlp.up_proj.weight").T
        h = h + (torch.nn.functional.silu(gate) * up) @ w(p + "mlp.down_proj.weight").T
    h = rms_norm(h, w("model.norm.weight"), eps)
    return h @ w("model.embed_tokens.weight").T  # tied head


# ---- checkpoint cross-check ----------------------------------------------------------------------

DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    return {k: (e["dtype"], tuple(e["shape"]), data[base + e["data_offsets"][0]:base + e["data_offsets"][1]])
            for k, e in header.items()}


def check_checkpoint(cfg, W, directory):
    with open(os.path.join(directory, "config.json")) as f:
        disk_cfg = json.load(f)
    if disk_cfg != cfg:
        sys.exit(f"{directory}/config.json differs from this preset's config:\n{disk_cfg}\n{cfg}")
    index = os.path.join(directory, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    tensors = {}
    for f in files:
        tensors.update(read_safetensors(os.path.join(directory, f)))
    if set(tensors) != set(W):
        sys.exit(f"{directory}: tensor names differ: {sorted(set(tensors) ^ set(W))}")
    for name, (raw, w) in W.items():
        dtype, shape, data = tensors[name]
        if dtype != DTYPES[cfg["torch_dtype"]] or shape != tuple(w.shape) or data != raw:
            sys.exit(f"{directory}: tensor {name} differs ({dtype} {shape} vs {tuple(w.shape)})")
    print(f"{directory}: all {len(W)} tensors bit-identical to the regenerated weights; config.json equal")


# ---- golden files --------------------------------------------------------------------------------

def rounded(x, digits=10):
    return [float(f"{v:.{digits}g}") for v in x]


def summary(logits, vocab_ids):
    return {
        "logits": [rounded(row) for row in logits[:, vocab_ids].tolist()],
        "logsumexp": rounded(torch.logsumexp(logits, dim=-1).tolist()),
        "argmax": logits.argmax(dim=-1).tolist(),
        "max_logit": rounded(logits.max(dim=-1).values.tolist()),
    }


def golden(name, seed, checkpoint):
    cfg, tokenizer = PRESETS[name]
    W = make_weights(cfg, seed)
    if checkpoint:
        check_checkpoint(cfg, W, checkpoint)
    with open(os.path.join(SHARED, "data", "tokenizers", tokenizer, "REFERENCE.json")) as f:
        ids = json.load(f)["eval"]["wikitext2_test"]["first_64"]
    V = cfg["vocab_size"]
    vocab_ids = list(dict.fromkeys(ids))  # distinct, first-seen order
    for extra in (0, 1, 2, 13, 100, 1000, 10000, 50000, 100000, cfg["bos_token_id"], cfg["eos_token_id"], V - 1):
        if extra not in vocab_ids:
            vocab_ids.append(extra)
    logits = forward(cfg, W, ids)
    out = {
        "preset": name, "architecture": cfg["architectures"][0], "seed": seed, "dtype": cfg["torch_dtype"],
        "generator": "scripts/gen_arch_golden.py: float64 PyTorch transcription of the HF forward, weights "
                     "regenerated with tools/synth's RNG (see the script's docstring)",
        "config": cfg, "input_ids": ids, "vocab_ids": vocab_ids,
    }
    out.update(summary(logits, vocab_ids))
    print(f"{name}: T={len(ids)}, {len(vocab_ids)} vocab ids, logsumexp {out['logsumexp'][0]:.4f} .. "
          f"{out['logsumexp'][-1]:.4f}, logit std {logits.std().item():.3f}, "
          f"{len(set(out['argmax']))} distinct argmax ids")
    if cfg.get("rope_scaling"):
        plain = forward(cfg, W, ids, rope_scaling=False)
        unscaled = summary(plain, vocab_ids)
        d_logits = (logits[:, vocab_ids] - plain[:, vocab_ids]).abs().max().item()
        d_all = (logits - plain).abs().max().item()
        d_lse = (torch.logsumexp(logits, -1) - torch.logsumexp(plain, -1)).abs().max().item()
        unscaled["max_abs_diff_vs_scaled"] = {"logits_at_vocab_ids": d_logits, "logits_full_vocab": d_all,
                                             "logsumexp": d_lse}
        out["without_rope_scaling"] = unscaled
        changed = (rope_inv_freq(cfg) != rope_inv_freq(cfg, False)).sum().item()
        print(f"{name}: rope_scaling changes {changed} of {head_dim(cfg) // 2} frequencies; scaled vs unscaled: "
              f"max |d logit| {d_logits:.4f} at the vocab ids ({d_all:.4f} over the full vocabulary), "
              f"max |d logsumexp| {d_lse:.4f}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), action="append", help="default: both")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--checkpoint", help="a latentllm-synth output of the (single) preset to cross-check")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "tests", "data", "golden"))
    ap.add_argument("--no-write", action="store_true", help="check only, write no golden file")
    ap.add_argument("--print-rng-vectors", action="store_true", help="RNG values for tests/unit/test_synth.cpp")
    a = ap.parse_args()
    if a.print_rng_vectors:
        key = tensor_key(0, "model.embed_tokens.weight")
        v = synth_values(0, "model.embed_tokens.weight", 3, 0.0, float(np.float32(math.sqrt(3.0))))
        print(f"key 0x{key:016x}; values {[f'{x:.9g}' for x in v.tolist()]} bits {[hex(b) for b in v.view(np.uint32)]}")
        return
    presets = a.preset or sorted(PRESETS)
    if a.checkpoint and len(presets) != 1:
        sys.exit("--checkpoint needs exactly one --preset")
    torch.set_grad_enabled(False)
    for name in presets:
        g = golden(name, a.seed, a.checkpoint)
        if a.no_write:
            continue
        os.makedirs(a.out_dir, exist_ok=True)
        path = os.path.join(a.out_dir, f"{name}.json")
        with open(path, "w") as f:
            json.dump(g, f, separators=(",", ":"))
            f.write("\n")
        print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
