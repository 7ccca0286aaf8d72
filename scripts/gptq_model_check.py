#!/usr/bin/python3
"""GPTQ on a whole model, independently of latentllm: codes and perplexity against `compress --method gptq`.

Run it with /usr/bin/python3 (Debian's python3-torch and numpy) from the repository root:

    [BITS=4] [GROUP=32] /usr/bin/python3 scripts/gptq_model_check.py [BIN] [OUT.md]

It quantizes stories260K (../shared/models/stories260K/hf, a LlamaForCausalLM) with GPTQ layer by layer
in float64, on the same calibration tokens as

    BIN compress --method gptq --bits BITS --group GROUP --calib text --calib-sampling contiguous ...

and compares the two quantized models: the codes of every module, and the perplexity of each on held-out
text, both computed by this script's own float64 forward (so that the comparison is of the two GPTQ runs,
not of two forwards). The dense model's perplexity under this forward is checked against `BIN ppl` first.

What is independent here: the forward (a plain transcription of HF's LlamaForCausalLM: RMSNorm, rotate-half
RoPE, grouped-query attention, SwiGLU, tied head), the sequential protocol and the GPTQ column sweep
(scripts/gptq_reference.py, written from Frantar et al. 2022, Algorithm 1, in float64). What is shared:
the token ids (this script asks latentllm's tokenizer for them through `eval --task mc --json`, which
prints them, so that both runs calibrate on the same ids) and the storage spec of docs/FORMAT.md
"Quantized tensors" (F16 scales and zero points, integer zero points for GPTQ's grid).

The sequential protocol is latentllm's `--method gptq` (docs/QUANT.md): each site's modules are quantized
as soon as that site's inputs are known, on H = sum of x x^T over the calibration tokens, and installed
at once, so later sites and layers see the quantized modules: q/k/v on the attention input, o_proj on
the attention output, gate/up on the MLP input, down_proj on the MLP's hidden activations. This is the
reference GPTQ code's "true sequential" order.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gptq_reference import gptq  # noqa: E402
from safetensors_np import read as read_safetensors  # noqa: E402

torch.set_default_dtype(torch.float64)

SHARED = os.environ.get("LATENTLLM_SHARED", "../shared")
MODEL = os.path.join(SHARED, "models/stories260K/hf")
STORIES = os.path.join(SHARED, "data/tinystories/TinyStories-valid.stories0001-0232.txt")
BITS, GROUP = int(os.environ.get("BITS", 4)), int(os.environ.get("GROUP", 32))
NSAMPLES, SEQLEN, EVAL_SEQLEN = 16, 256, 256
SITES = [("self_attn", ["q_proj", "k_proj", "v_proj"]), ("self_attn", ["o_proj"]),
         ("mlp", ["gate_proj", "up_proj"]), ("mlp", ["down_proj"])]

def token_ids(bin_path, text):
    """latentllm's ids of `text` (BOS first): eval --task mc prints each item's context ids."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        json.dump({"context": text, "choices": ["a", "b"], "gold": 0}, f)
        f.write("\n")
    out = subprocess.run([bin_path, "eval", "--task", "mc", "--format", "generic", "--data", f.name, "--model", MODEL,
                          "--json"], check=True, capture_output=True, text=True).stdout
    os.unlink(f.name)
    return json.loads(out)["items"][0]["context_ids"][0]


class Llama:
    def __init__(self, weights, config):
        self.w = {k: torch.from_numpy(v.astype(np.float64)) for k, v in weights.items() if v.dtype != np.uint8}
        self.c = config
        self.h, self.hkv, self.dh = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
        inv = 1.0 / (config["rope_theta"] ** (torch.arange(0, self.dh, 2) / self.dh))
        pos = torch.arange(config["max_position_embeddings"])
        ang = torch.outer(pos, inv)
        self.cos, self.sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()

    def lin(self, name, x):
        return x @ self.w[name + ".weight"].T

    def norm(self, name, x):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.c["rms_norm_eps"]) * self.w[name + ".weight"]

    def rope(self, x):  # x [N, heads, L, dh]
        L = x.shape[2]
        half = torch.cat([-x[..., self.dh // 2:], x[..., :self.dh // 2]], -1)
        return x * self.cos[:L] + half * self.sin[:L]

    def attention(self, p, x):  # x [N, L, d] the normalized input; returns the o_proj input [N, L, H·dh]
        N, L, _ = x.shape
        q = self.lin(p + "q_proj", x).view(N, L, self.h, self.dh).transpose(1, 2)
        k = self.lin(p + "k_proj", x).view(N, L, self.hkv, self.dh).transpose(1, 2)
        v = self.lin(p + "v_proj", x).view(N, L, self.hkv, self.dh).transpose(1, 2)
        q, k = self.rope(q), self.rope(k)
        rep = self.h // self.hkv
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        s = q @ k.transpose(-1, -2) / self.dh ** 0.5
        s = s.masked_fill(torch.triu(torch.ones(L, L, dtype=torch.bool), 1), float("-inf"))
        return (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(N, L, self.h * self.dh)

    def mlp_mid(self, p, x):
        return torch.nn.functional.silu(self.lin(p + "gate_proj", x)) * self.lin(p + "up_proj", x)

    def site_input(self, i, site, x):
        """The input of site `site` (0..3) of layer i given the layer's input x, and x after the site's block."""
        p = f"model.layers.{i}."
        n1 = self.norm(p + "input_layernorm", x)
        if site == 0:
            return n1
        a = self.attention(p + "self_attn.", n1)
        if site == 1:
            return a
        x = x + self.lin(p + "self_attn.o_proj", a)
        n2 = self.norm(p + "post_attention_layernorm", x)
        return n2 if site == 2 else self.mlp_mid(p + "mlp.", n2)

    def layer(self, i, x):
        p = f"model.layers.{i}."
        x = x + self.lin(p + "self_attn.o_proj", self.attention(p + "self_attn.", self.norm(p + "input_layernorm", x)))
        return x + self.lin(p + "mlp.down_proj", self.mlp_mid(p + "mlp.", self.norm(p + "post_attention_layernorm", x)))

    def embed(self, ids):
        return self.w["model.embed_tokens.weight"][ids]

    def nll(self, ids, seqlen):
        """Mean negative log-likelihood over non-overlapping windows (the GPTQ protocol)."""
        n = len(ids) // seqlen
        x = self.embed(torch.tensor(ids[:n * seqlen]).view(n, seqlen))
        for i in range(self.c["num_hidden_layers"]):
            x = self.layer(i, x)
        logits = self.norm("model.norm", x) @ self.w["model.embed_tokens.weight"].T
        t = torch.tensor(ids[:n * seqlen]).view(n, seqlen)
        return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), t[:, 1:].reshape(-1)).item()


def unpack_codes(q, cols):
    """docs/FORMAT.md: [rows, n_g, G·q/8] bytes, each row a little-endian bit stream, low bits first."""
    rows = q.shape[0]
    bits = np.unpackbits(q.reshape(rows, -1), axis=1, bitorder="little")
    codes = bits.reshape(rows, -1, BITS) @ (1 << np.arange(BITS))
    return codes[:, :cols]


def dequantize(codes, scales, zeros):
    s = np.repeat(scales.astype(np.float64), GROUP, axis=1)[:, :codes.shape[1]]
    z = np.repeat(zeros.astype(np.float64), GROUP, axis=1)[:, :codes.shape[1]]
    return s * (codes - z)


def main():
    bin_path = sys.argv[1] if len(sys.argv) > 1 else "build/latentllm"
    out_md = sys.argv[2] if len(sys.argv) > 2 else None
    config = json.load(open(os.path.join(MODEL, "config.json")))
    dense = read_safetensors(os.path.join(MODEL, "model.safetensors"))
    text = open(STORIES).read()
    stories = text.split("<|endoftext|>\n")
    calib_text = "<|endoftext|>\n".join(stories[:116]) + "<|endoftext|>\n"  # validation stories 1-116
    test_text = "<|endoftext|>\n".join(stories[116:])                       # test stories 117-232
    tmp = tempfile.mkdtemp()
    calib_file = os.path.join(tmp, "calib.txt")
    open(calib_file, "w").write(calib_text)
    calib_ids = token_ids(bin_path, calib_text)[:NSAMPLES * SEQLEN]
    test_ids = token_ids(bin_path, test_text)

    # latentllm's run and its perplexity of the dense model.
    ckpt = os.path.join(tmp, "gptq")
    subprocess.run([bin_path, "compress", "--model", MODEL, "--method", "gptq", "--bits", str(BITS), "--group",
                    str(GROUP), "--calib", "text", "--calib-data", calib_file, "--calib-sampling", "contiguous", "--nsamples",
                    str(NSAMPLES), "--seqlen", str(SEQLEN), "--out", ckpt, "-q"], check=True, capture_output=True)
    test_file = os.path.join(tmp, "test.txt")
    open(test_file, "w").write(test_text)
    ppl_bin = json.loads(subprocess.run([bin_path, "ppl", "--model", MODEL, "--dataset", "text", "--data", test_file,
                                         "--seqlen", str(EVAL_SEQLEN), "--json"], check=True, capture_output=True,
                                        text=True).stdout)["ppl"]

    # This script's run: sequential GPTQ in float64.
    model = Llama(dense, config)
    ppl_dense = float(np.exp(model.nll(test_ids, EVAL_SEQLEN)))
    x = model.embed(torch.tensor(calib_ids).view(NSAMPLES, SEQLEN))
    ours = {}
    for i in range(config["num_hidden_layers"]):
        for site, (block, names) in enumerate(SITES):
            inp = model.site_input(i, site, x)
            inp = inp.reshape(-1, inp.shape[-1]).numpy()
            h = inp.T @ inp
            for n in names:
                name = f"model.layers.{i}.{block}.{n}"
                w = model.w[name + ".weight"].numpy()
                codes, _, scales, zeros, _, _ = gptq(w, h, BITS, GROUP, "integer-zero", 0.01, False, False)
                s = np.array(scales, dtype=np.uint16).view(np.float16)
                z = np.array(zeros, dtype=np.uint16).view(np.float16)
                ours[name] = codes
                model.w[name + ".weight"] = torch.from_numpy(dequantize(codes, s, z))
        x = model.layer(i, x)
    ppl_ours = float(np.exp(model.nll(test_ids, EVAL_SEQLEN)))

    # latentllm's codes, dequantized into the same forward.
    q = read_safetensors(os.path.join(ckpt, "model.safetensors"))
    theirs = Llama(dense, config)
    rows = []
    total = same = 0
    for name, codes in ours.items():
        c = unpack_codes(q[name + ".qweight"], codes.shape[1])
        theirs.w[name + ".weight"] = torch.from_numpy(dequantize(c, q[name + ".scales"], q[name + ".qzeros"]))
        eq = int((c == codes).sum())
        rows.append((name, codes.size, eq, int(np.abs(c - codes).max())))
        total += codes.size
        same += eq
    ppl_theirs = float(np.exp(theirs.nll(test_ids, EVAL_SEQLEN)))

    rel = abs(ppl_theirs - ppl_ours) / ppl_ours
    lines = [
        f"- calibration: {NSAMPLES} contiguous windows of {SEQLEN} tokens of the validation stories 1-116; "
        f"perplexity on the test stories 117-232 ({len(test_ids)} tokens, windows of {EVAL_SEQLEN});",
        f"- dense perplexity: this forward {ppl_dense:.4f}, `latentllm ppl` {ppl_bin:.4f} "
        f"(relative difference {abs(ppl_dense - ppl_bin) / ppl_bin:.2e});",
        f"- {BITS}-bit GPTQ (groups of {GROUP}, integer zero points, damping 0.01, no act-order), perplexity under "
        f"this forward: this script's codes {ppl_ours:.4f}, latentllm's codes {ppl_theirs:.4f}: relative "
        f"difference {rel:.2e} (target 5e-3);",
        f"- codes: {same} of {total} equal ({100.0 * same / total:.3f} %), largest difference "
        f"{max(r[3] for r in rows)} steps.",
        "", "| module | codes | equal | largest difference |", "|---|---:|---:|---:|"]
    lines += [f"| {n} | {t} | {e} | {d} |" for n, t, e, d in rows]
    report = "\n".join(lines) + "\n"
    print(report)
    if out_md:
        open(out_md, "w").write(report)
    sys.exit(0 if rel <= 5e-3 else 1)


if __name__ == "__main__":
    main()
