#!/usr/bin/python3
"""An independent float64 check of joint Q-K-V and split-head compression, and the golden losses of
tests/data/joint_qkv/qkv_cases.json.

Run it with /usr/bin/python3 (Debian's numpy; torch is not needed):

    /usr/bin/python3 scripts/check_joint_qkv.py tests/data/joint_qkv/qkv_cases.json

It generates one attention layer's projections with GQA shapes (d = 32, H = 4 query heads and H_kv = 2
KV heads of d_h = 8: W_q [32, 32], W_k and W_v [16, 32], of unequal scales as in trained models) and the
layer's input second moment C = X X^T [32, 32] (correlated features of unequal scales, feature 5 never
active), then writes inputs and results to one JSON file, which tests/unit/test_joint_qkv.cpp reads: the
C++ solvers (compress/math/joint_qkv.hpp, split_heads.hpp) must reach the same layer-wise losses within
1e-6 relative. Rerun this only when the fixture or an algorithm changes.

What it transcribes (latentllm's paper, appendix "Activation-Aware Joint QKV Compression" and
"Split-Head Compression"), in its plainest form:
  * P = (C + lambda I)^(1/2), lambda = lambda_rel mean(diag C), from numpy's eigh, eigenvalues at or below
    1e-12 of the largest dropped from P and P^+;
  * joint QKV at rank r: W = [W_q; W_k; W_v]; U S V^T = svd(W P); B = U_r S_r, A = V_r^T P^+;
    B_q, B_k, B_v the rows of B; the loss sum_i tr((W_i - B_i A) C (W_i - B_i A)^T) = tr(E C E^T);
  * separate (the local ASVD of each module at its own rank): the same with W_i alone;
  * split heads at rank r = h r_h: each head's rows W_j [d_h, d] by the same formula at rank r_h, the
    loss summed over heads (the module's tr(E C E^T)).
The layer-wise loss is measured with the undamped C.
"""
import json
import sys

import numpy as np

LAMBDA_REL = 1e-4


def root_cov(c):
    lam = LAMBDA_REL * np.mean(np.diag(c))
    e, v = np.linalg.eigh(c + lam * np.eye(c.shape[0]))
    keep = e > 1e-12 * e.max()
    p = (v[:, keep] * np.sqrt(e[keep])) @ v[:, keep].T
    pinv = (v[:, keep] / np.sqrt(e[keep])) @ v[:, keep].T
    return p, pinv


def asvd(w, c, r):
    p, pinv = root_cov(c)
    u, s, vt = np.linalg.svd(w @ p, full_matrices=False)
    return u[:, :r] * s[:r], vt[:r] @ pinv


def loss(e, c):
    return float(np.trace(e @ c @ e.T))


def main(path):
    rng = np.random.default_rng(40)
    d, h, hkv, dh, n = 32, 4, 2, 8, 400
    mix = rng.standard_normal((d, d)) * (1.0 + 3.0 * (rng.random(d) < 0.15))
    x = mix @ rng.standard_normal((d, n))
    x[5, :] = 0.0
    c = x @ x.T
    wq = rng.standard_normal((h * dh, d)) * 0.3
    wk = rng.standard_normal((hkv * dh, d)) * 0.8
    wv = rng.standard_normal((hkv * dh, d)) * 0.1
    ws = [wq, wk, wv]
    stacked = np.vstack(ws)
    cases = []
    for r in (4, 12, 24, 31):
        b, a = asvd(stacked, c, r)
        cases.append({"kind": "joint", "rank": r, "loss": loss(stacked - b @ a, c),
                      "module_losses": [loss(w - bi @ a, c) for w, bi in
                                        zip(ws, np.split(b, [h * dh, h * dh + hkv * dh]))]})
    for r in (4, 8, 16):
        total = 0.0
        for w in ws:
            b, a = asvd(w, c, r)
            total += loss(w - b @ a, c)
        cases.append({"kind": "separate", "rank": r, "loss": total})
    for name, w, heads in (("q", wq, h), ("k", wk, hkv), ("v", wv, hkv)):
        for rh in (1, 3, dh):
            total = 0.0
            for j in range(heads):
                wj = w[j * dh:(j + 1) * dh]
                b, a = asvd(wj, c, rh)
                total += loss(wj - b @ a, c)
            cases.append({"kind": "split", "module": name, "heads": heads, "rank": heads * rh, "loss": total})
    out = {"lambda_rel": LAMBDA_REL, "heads": h, "kv_heads": hkv, "head_dim": dh, "n": n,
           "wq": wq.tolist(), "wk": wk.tolist(), "wv": wv.tolist(), "xtx": c.tolist(),
           "sum": x.sum(axis=1).tolist(), "abs_sum": np.abs(x).sum(axis=1).tolist(), "cases": cases}
    with open(path, "w") as f:
        json.dump(out, f)
    for cs in cases:
        print(cs["kind"], cs.get("module", ""), cs["rank"], "%.10e" % cs["loss"])


if __name__ == "__main__":
    main(sys.argv[1])
