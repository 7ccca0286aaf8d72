#!/usr/bin/python3
"""An independent float64 check of `latentllm eval --task mc`'s scores: a plain numpy transcription of the
Llama forward (HF LlamaForCausalLM: RMSNorm, RoPE with rotate_half, GQA, SwiGLU, tied or separate head)
scores the same (context ids, continuation ids) pairs in float64 and recomputes acc and acc_norm (by the
choices' lengths in characters) with lm-eval's rule (numpy.argmax).

Input: the checkpoint directory, the task's jsonl (for gold and the choices' lengths) and the JSON that
`latentllm eval --task mc --json` printed for it (only its context_ids / continuation_ids are read: the
tokenization is checked elsewhere against reference tokenizers). Output (stdout or --out): per item the ids,
the float64 log-likelihoods and the predictions; tests/unit/test_mc.cpp checks the library against the
committed tests/data/mc/float64_stories260K.json.

Usage: /usr/bin/python3 scripts/mc_float64_check.py MODEL_DIR TASK.jsonl CLI_OUTPUT.json [--out FILE]
(needs Debian's python3-numpy)
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_np  # noqa: E402


def load_safetensors(path):
    return {k: v.astype(np.float64) for k, v in safetensors_np.read(path, ("F32",)).items()}


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def forward(cfg, w, ids):
    """logits [T, V] in float64."""
    d, H, Hkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    dh = cfg.get("head_dim") or d // H
    eps = cfg["rms_norm_eps"]
    T = len(ids)
    inv_freq = 1.0 / (cfg["rope_theta"] ** (np.arange(0, dh, 2, dtype=np.float64) / dh))
    ang = np.outer(np.arange(T, dtype=np.float64), inv_freq)
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
    mask = np.triu(np.full((T, T), -np.inf), 1)
    x = w["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, H, dh).transpose(1, 0, 2)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, Hkv, dh).transpose(1, 0, 2)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, Hkv, dh).transpose(1, 0, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        heads = []
        for hh in range(H):
            kv = hh // (H // Hkv)
            s = q[hh] @ k[kv].T / np.sqrt(dh) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            heads.append((s / s.sum(-1, keepdims=True)) @ v[kv])
        x = x + np.concatenate(heads, -1) @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        g = h @ w[p + "mlp.gate_proj.weight"].T
        x = x + ((g / (1 + np.exp(-g))) * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return x @ head.T


def loglik(cfg, w, ctx, cont):
    inp = (ctx + cont)[-(cfg["max_position_embeddings"] + 1):][:-1]
    logits = forward(cfg, w, inp)[len(inp) - len(cont):]
    m = logits.max(-1, keepdims=True)
    logp = logits - m - np.log(np.exp(logits - m).sum(-1, keepdims=True))
    return float(sum(logp[j, t] for j, t in enumerate(cont)))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--out")]
    out_path = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--out=")), None)
    model, task, cli = args[:3]
    cfg = json.load(open(f"{model}/config.json"))
    w = load_safetensors(f"{model}/model.safetensors")
    docs = [json.loads(line) for line in open(task) if line.strip()]
    run = json.load(open(cli))
    items, acc, acc_norm = [], [], []
    for doc, it in zip(docs, run["items"]):
        lls = [loglik(cfg, w, c, t) for c, t in zip(it["context_ids"], it["continuation_ids"])]
        lengths = np.array([float(len(c)) for c in doc["choices"]])
        pred, pred_norm = int(np.argmax(lls)), int(np.argmax(np.array(lls) / lengths))
        acc.append(float(pred == doc["gold"]))
        acc_norm.append(float(pred_norm == doc["gold"]))
        items.append({"context_ids": it["context_ids"], "continuation_ids": it["continuation_ids"], "loglik": lls,
                      "pred": pred, "pred_norm": pred_norm})
    doc = {"generator": "scripts/mc_float64_check.py (numpy float64)", "model": "/".join(model.rstrip("/").split("/")[-2:]),
           "task": task.split("/")[-1], "acc": float(np.mean(acc)), "acc_norm": float(np.mean(acc_norm)),
           "items": items}
    text = json.dumps(doc, indent=1) + "\n"
    if out_path:
        open(out_path, "w").write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
