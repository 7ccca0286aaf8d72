#!/usr/bin/env python3
"""Writes tests/data/llava-next-tiny: a random-weight LlavaNextForConditionalGeneration checkpoint (hub
key layout, float32 safetensors written by hand) and REFERENCE.json, the model's packed image features
and logits computed in float64 by an independent transcription of transformers' modeling_llava_next.py
(get_image_features, pack_image_features, unpad_image), modeling_clip.py and modeling_llama.py.

Plain Python 3 only (no numpy, torch, transformers or safetensors): the weights come from
random.Random(27), rounded to float32 before the reference uses them; the pixel values of the tiles are
a formula the C++ test repeats (pixel(i) = float32(((i * 7919) % 2000) / 1000 - 1) over the flat
[n_tiles, 3, S, S] index), so the reference covers the model, not the image processor.

Sizes: CLIP S = 32, p = 8 (p_n = 4, P = 17), d_v = 16, 3 layers (vision_feature_layer -2 runs 2);
Llama d = 32, 2 layers, 4 heads, 2 KV heads, vocab 64, untied lm_head; pinpoints [[32,32],[32,64],[64,32],
[64,64]]; the image is 12 x 50 (height x width): best [32, 64], grid 1 x 2, a 4 x 8 map whose rows 1..3
survive unpadding, 16 + 2 * 9 = 34 image tokens.

Usage: python3 scripts/gen_llava_next_fixture.py [out_dir]   (default tests/data/llava-next-tiny)
"""
import json
import math
import os
import random
import struct
import sys

S, P_SIZE, DV, DV_INT, LV, HV = 32, 8, 16, 32, 3, 2
D, D_INT, L, H, KV, HD, VOCAB = 32, 64, 2, 4, 2, 8, 64
IMAGE_TOKEN = 63
PINPOINTS = [[32, 32], [32, 64], [64, 32], [64, 64]]
IMAGE_H, IMAGE_W = 12, 50
LN_EPS, RMS_EPS, THETA = 1e-5, 1e-6, 10000.0

rng = random.Random(27)
tensors = {}  # name -> (shape, flat list of float32-rounded floats)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def param(name, shape, std=0.1, mean=0.0):
    n = 1
    for s in shape:
        n *= s
    tensors[name] = (shape, [f32(rng.gauss(mean, std)) for _ in range(n)])
    return tensors[name][1]


def matrix(flat, rows, cols):
    return [flat[r * cols:(r + 1) * cols] for r in range(rows)]


def linear(x, w, b=None):  # x [n, in], w [out, in] -> [n, out]
    out = []
    for row in x:
        y = [sum(a * c for a, c in zip(row, wr)) for wr in w]
        if b is not None:
            y = [v + bb for v, bb in zip(y, b)]
        out.append(y)
    return out


def layer_norm(x, w, b, eps):
    out = []
    for row in x:
        m = sum(row) / len(row)
        var = sum((v - m) ** 2 for v in row) / len(row)
        out.append([(v - m) / math.sqrt(var + eps) * ww + bb for v, ww, bb in zip(row, w, b)])
    return out


def rms_norm(x, w, eps):
    return [[v / math.sqrt(sum(u * u for u in row) / len(row) + eps) * ww for v, ww in zip(row, w)] for row in x]


def softmax(v):
    m = max(v)
    e = [math.exp(a - m) for a in v]
    s = sum(e)
    return [a / s for a in e]


def attention(q, k, v, n_heads, n_kv, hd, causal):  # [T, n_heads*hd], [T, n_kv*hd] -> [T, n_heads*hd]
    T = len(q)
    out = [[0.0] * (n_heads * hd) for _ in range(T)]
    for h in range(n_heads):
        g = h // (n_heads // n_kv)
        for t in range(T):
            qs = q[t][h * hd:(h + 1) * hd]
            span = range(t + 1) if causal else range(T)
            scores = [sum(a * b for a, b in zip(qs, k[s][g * hd:(g + 1) * hd])) / math.sqrt(hd) for s in span]
            p = softmax(scores)
            for j in range(hd):
                out[t][h * hd + j] = sum(pp * v[s][g * hd + j] for pp, s in zip(p, span))
    return out


# ---- weights, in the hub layout ----
VT = "vision_tower.vision_model."
param(VT + "embeddings.patch_embedding.weight", [DV, 3, P_SIZE, P_SIZE], 0.05)
param(VT + "embeddings.class_embedding", [DV], 0.1)
param(VT + "embeddings.position_embedding.weight", [(S // P_SIZE) ** 2 + 1, DV], 0.1)
param(VT + "pre_layrnorm.weight", [DV], 0.1, 1.0)
param(VT + "pre_layrnorm.bias", [DV], 0.1)
for i in range(LV):
    pre = VT + f"encoder.layers.{i}."
    for m in ("q_proj", "k_proj", "v_proj", "out_proj"):
        param(pre + f"self_attn.{m}.weight", [DV, DV], 0.2)
        param(pre + f"self_attn.{m}.bias", [DV], 0.05)
    for n in ("layer_norm1", "layer_norm2"):
        param(pre + f"{n}.weight", [DV], 0.1, 1.0)
        param(pre + f"{n}.bias", [DV], 0.05)
    param(pre + "mlp.fc1.weight", [DV_INT, DV], 0.2)
    param(pre + "mlp.fc1.bias", [DV_INT], 0.05)
    param(pre + "mlp.fc2.weight", [DV, DV_INT], 0.2)
    param(pre + "mlp.fc2.bias", [DV], 0.05)
param(VT + "post_layernorm.weight", [DV], 0.1, 1.0)
param(VT + "post_layernorm.bias", [DV], 0.05)
param("multi_modal_projector.linear_1.weight", [D, DV], 0.2)
param("multi_modal_projector.linear_1.bias", [D], 0.05)
param("multi_modal_projector.linear_2.weight", [D, D], 0.2)
param("multi_modal_projector.linear_2.bias", [D], 0.05)
param("image_newline", [D], 1 / math.sqrt(D))
LM = "language_model.model."
param(LM + "embed_tokens.weight", [VOCAB, D], 0.5)
for i in range(L):
    pre = LM + f"layers.{i}."
    param(pre + "input_layernorm.weight", [D], 0.1, 1.0)
    param(pre + "post_attention_layernorm.weight", [D], 0.1, 1.0)
    param(pre + "self_attn.q_proj.weight", [H * HD, D], 0.2)
    param(pre + "self_attn.k_proj.weight", [KV * HD, D], 0.2)
    param(pre + "self_attn.v_proj.weight", [KV * HD, D], 0.2)
    param(pre + "self_attn.o_proj.weight", [D, H * HD], 0.2)
    param(pre + "mlp.gate_proj.weight", [D_INT, D], 0.2)
    param(pre + "mlp.up_proj.weight", [D_INT, D], 0.2)
    param(pre + "mlp.down_proj.weight", [D, D_INT], 0.2)
param(LM + "norm.weight", [D], 0.1, 1.0)
param("language_model.lm_head.weight", [VOCAB, D], 0.3)


def w(name, rows=None, cols=None):
    shape, flat = tensors[name]
    if rows is None:
        return flat
    return matrix(flat, rows, cols)


# ---- geometry (image_processing_utils.select_best_resolution, modeling_llava_next.unpad_image) ----
def select_best_resolution(h0, w0):
    best, max_eff, min_waste = None, 0, float("inf")
    for h, wd in PINPOINTS:
        scale = min(wd / w0, h / h0)
        eff = min(int(w0 * scale) * int(h0 * scale), w0 * h0)
        waste = wd * h - eff
        if eff > max_eff or (eff == max_eff and waste < min_waste):
            best, max_eff, min_waste = (h, wd), eff, waste
    return best


def unpad(rows, cols, h0, w0):  # -> (row0, row1, col0, col1)
    if w0 / h0 > cols / rows:
        new_h = int(round(h0 * (cols / w0), 7))
        pad = (rows - new_h) // 2
        return pad, rows - pad, 0, cols
    new_w = int(round(w0 * (rows / h0), 7))
    pad = (cols - new_w) // 2
    return 0, rows, pad, cols - pad


# ---- the vision tower (modeling_clip.py) ----
def clip_hidden_state(pixels, n_tiles, index):
    g = S // P_SIZE
    conv = w(VT + "embeddings.patch_embedding.weight")
    pos = w(VT + "embeddings.position_embedding.weight", g * g + 1, DV)
    cls = w(VT + "embeddings.class_embedding")
    hs = []
    for t in range(n_tiles):
        rows = [[c + p for c, p in zip(cls, pos[0])]]
        for py in range(g):
            for px in range(g):
                e = []
                for o in range(DV):
                    acc = 0.0
                    for ch in range(3):
                        for y in range(P_SIZE):
                            for x in range(P_SIZE):
                                pix = pixels[((t * 3 + ch) * S + py * P_SIZE + y) * S + px * P_SIZE + x]
                                acc += conv[((o * 3 + ch) * P_SIZE + y) * P_SIZE + x] * pix
                    e.append(acc + pos[1 + py * g + px][o])
                rows.append(e)
        h = layer_norm(rows, w(VT + "pre_layrnorm.weight"), w(VT + "pre_layrnorm.bias"), LN_EPS)
        k = index if index >= 0 else LV + 1 + index
        for i in range(k):
            pre = VT + f"encoder.layers.{i}."
            x = layer_norm(h, w(pre + "layer_norm1.weight"), w(pre + "layer_norm1.bias"), LN_EPS)
            q = linear(x, w(pre + "self_attn.q_proj.weight", DV, DV), w(pre + "self_attn.q_proj.bias"))
            kk = linear(x, w(pre + "self_attn.k_proj.weight", DV, DV), w(pre + "self_attn.k_proj.bias"))
            v = linear(x, w(pre + "self_attn.v_proj.weight", DV, DV), w(pre + "self_attn.v_proj.bias"))
            a = attention(q, kk, v, HV, HV, DV // HV, False)
            a = linear(a, w(pre + "self_attn.out_proj.weight", DV, DV), w(pre + "self_attn.out_proj.bias"))
            h = [[r + s for r, s in zip(hr, ar)] for hr, ar in zip(h, a)]
            x = layer_norm(h, w(pre + "layer_norm2.weight"), w(pre + "layer_norm2.bias"), LN_EPS)
            u = linear(x, w(pre + "mlp.fc1.weight", DV_INT, DV), w(pre + "mlp.fc1.bias"))
            u = [[z / (1 + math.exp(-1.702 * z)) for z in r] for r in u]  # quick_gelu
            u = linear(u, w(pre + "mlp.fc2.weight", DV, DV_INT), w(pre + "mlp.fc2.bias"))
            h = [[r + s for r, s in zip(hr, ur)] for hr, ur in zip(h, u)]
        hs.append(h)
    return hs  # [n_tiles][P][d_v]


def image_features(pixels, n_tiles):
    hs = clip_hidden_state(pixels, n_tiles, -2)
    feats = []
    for h in hs:  # "default": the CLS row dropped
        x = linear(h[1:], w("multi_modal_projector.linear_1.weight", D, DV), w("multi_modal_projector.linear_1.bias"))
        x = [[0.5 * z * (1 + math.erf(z / math.sqrt(2))) for z in r] for r in x]  # gelu (erf)
        feats.append(linear(x, w("multi_modal_projector.linear_2.weight", D, D), w("multi_modal_projector.linear_2.bias")))
    # pack_image_features
    p_n = S // P_SIZE
    best = select_best_resolution(IMAGE_H, IMAGE_W)
    g_h, g_w = best[0] // S, best[1] // S
    rows, cols = g_h * p_n, g_w * p_n
    r0, r1, c0, c1 = unpad(rows, cols, IMAGE_H, IMAGE_W)
    out = list(feats[0])
    newline = w("image_newline")
    for r in range(r0, r1):
        for c in range(c0, c1):
            tile = 1 + (r // p_n) * g_w + c // p_n
            out.append(feats[tile][(r % p_n) * p_n + c % p_n])
        out.append(list(newline))
    return out, 1 + g_h * g_w


# ---- the language model (modeling_llama.py) ----
def rope(x, n_heads):  # rotate_half on each head, positions 0..T-1
    out = []
    for t, row in enumerate(x):
        r = list(row)
        for h in range(n_heads):
            for j in range(HD // 2):
                f = t * (1.0 / THETA ** (2 * j / HD))
                c, s = math.cos(f), math.sin(f)
                a, b = row[h * HD + j], row[h * HD + j + HD // 2]
                r[h * HD + j] = a * c - b * s
                r[h * HD + j + HD // 2] = b * c + a * s
        out.append(r)
    return out


def llama_logits(h):
    for i in range(L):
        pre = LM + f"layers.{i}."
        x = rms_norm(h, w(pre + "input_layernorm.weight"), RMS_EPS)
        q = rope(linear(x, w(pre + "self_attn.q_proj.weight", H * HD, D)), H)
        k = rope(linear(x, w(pre + "self_attn.k_proj.weight", KV * HD, D)), KV)
        v = linear(x, w(pre + "self_attn.v_proj.weight", KV * HD, D))
        a = linear(attention(q, k, v, H, KV, HD, True), w(pre + "self_attn.o_proj.weight", D, H * HD))
        h = [[r + s for r, s in zip(hr, ar)] for hr, ar in zip(h, a)]
        x = rms_norm(h, w(pre + "post_attention_layernorm.weight"), RMS_EPS)
        gate = linear(x, w(pre + "mlp.gate_proj.weight", D_INT, D))
        up = linear(x, w(pre + "mlp.up_proj.weight", D_INT, D))
        u = [[gg / (1 + math.exp(-gg)) * uu for gg, uu in zip(gr, ur)] for gr, ur in zip(gate, up)]
        d = linear(u, w(pre + "mlp.down_proj.weight", D, D_INT))
        h = [[r + s for r, s in zip(hr, dr)] for hr, dr in zip(h, d)]
    h = rms_norm(h, w(LM + "norm.weight"), RMS_EPS)
    return linear(h, w("language_model.lm_head.weight", VOCAB, D))


def write_safetensors(path):
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name in sorted(tensors):
        shape, flat = tensors[name]
        data = struct.pack(f"<{len(flat)}f", *flat)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def config():
    return {
        "architectures": ["LlavaNextForConditionalGeneration"],
        "model_type": "llava_next",
        "image_token_index": IMAGE_TOKEN,
        "image_grid_pinpoints": PINPOINTS,
        "projector_hidden_act": "gelu",
        "vision_feature_layer": -2,
        "vision_feature_select_strategy": "default",
        "multimodal_projector_bias": True,
        "tie_word_embeddings": False,
        "text_config": {
            "model_type": "llama", "vocab_size": VOCAB, "hidden_size": D, "intermediate_size": D_INT,
            "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": KV, "head_dim": HD,
            "max_position_embeddings": 128, "rms_norm_eps": RMS_EPS, "rope_theta": THETA, "hidden_act": "silu",
            "tie_word_embeddings": False,
        },
        "vision_config": {
            "model_type": "clip_vision_model", "hidden_size": DV, "intermediate_size": DV_INT,
            "num_hidden_layers": LV, "num_attention_heads": HV, "num_channels": 3, "image_size": S,
            "patch_size": P_SIZE, "hidden_act": "quick_gelu", "layer_norm_eps": LN_EPS,
        },
    }


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "data",
                                                                  "llava-next-tiny")
    os.makedirs(out_dir, exist_ok=True)
    best = select_best_resolution(IMAGE_H, IMAGE_W)
    n_tiles = 1 + (best[0] // S) * (best[1] // S)
    pixels = [f32(((i * 7919) % 2000) / 1000 - 1) for i in range(n_tiles * 3 * S * S)]
    feats, _ = image_features(pixels, n_tiles)
    n_tok = len(feats)
    ids = [1, 5, 9] + [IMAGE_TOKEN] * n_tok + [7, 11, 13, 17, 19, 2]
    emb = w(LM + "embed_tokens.weight", VOCAB, D)
    h, j = [], 0
    for t in ids:
        if t == IMAGE_TOKEN:
            h.append(list(feats[j]))
            j += 1
        else:
            h.append(list(emb[t]))
    logits = llama_logits(h)
    write_safetensors(os.path.join(out_dir, "model.safetensors"))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config(), f, indent=1)
    ref = {
        "generator": "scripts/gen_llava_next_fixture.py (float64 transcription of transformers' LLaVA-NeXT)",
        "image_size": [IMAGE_H, IMAGE_W],
        "n_tiles": n_tiles,
        "pixel_formula": "float32(((i * 7919) % 2000) / 1000 - 1) over the flat [n_tiles, 3, S, S] index",
        "n_image_tokens": n_tok,
        "input_ids": ids,
        "features_rows": {str(r): feats[r] for r in (0, 15, 16, 24, 25, n_tok - 1)},
        "logits_rows": {str(t): logits[t] for t in (2, 3, len(ids) - 7, len(ids) - 1)},
    }
    with open(os.path.join(out_dir, "REFERENCE.json"), "w") as f:
        json.dump(ref, f, indent=1)
    print(f"{out_dir}: {n_tiles} tiles, {n_tok} image tokens, T = {len(ids)}")


if __name__ == "__main__":
    main()
