#!/usr/bin/python3
"""An independent float64 GPTQ, and the golden codes of tests/data/quant/gptq_cases.json.

Run it with /usr/bin/python3 (Debian's numpy; torch is not needed):

    /usr/bin/python3 scripts/gptq_reference.py tests/data/quant/gptq_cases.json

It generates a small weight W [12, 64] and an input second moment H = X·X^T [64, 64] (correlated
features of unequal scales, feature 5 never active: a dead input), runs GPTQ on them for several
settings, and writes inputs and outputs to one JSON file, which tests/unit/test_gptq.cpp reads. The
C++ test needs no Python; rerun this only when the fixture changes.

What it transcribes
-------------------
GPTQ as the paper states it (Frantar et al. 2022, Algorithm 1 and Sec. 4), written without looking at
latentllm's C++ and in its plainest form: no lazy batches (every later column is updated right after
each column: the paper's batched updates are an exact rearrangement of this), the inverse from
numpy's Cholesky and a triangular inverse (not LAPACK's dpotri):
  * dead inputs (diag H = 0): H_jj = 1 and W[:, j] = 0;
  * act-order: columns sorted by decreasing diag H (ties by increasing index, a stable sort);
  * damping: lambda = percdamp * mean(diag H) added to the diagonal;
  * U = the upper Cholesky factor of (H + lambda I)^-1, i.e. (H + lambda I)^-1 = U^T U;
  * for each column j in sweep order: each row's code c = clip(rint(w/s + z), 0, maxq) on its
    group's grid, q = s (c - z), e = (w - q) / U_jj, and W[:, j+1:] -= e U[j, j+1:];
  * the loss is sum(e^2).
The grid of a group (docs/FORMAT.md "Quantized tensors", the spec this follows):
  * minmax (the latentllm paper's chunk-wise rule): the group's min and max, s = (max - min) / maxq,
    raised to max(|min|, |max|) / 2048 if smaller (1 for an all-zero group); z = -min / s;
  * integer-zero (GPTQ's reference quantizer): the range widened to contain 0 ([-1, 1] if all zero),
    s = (max - min) / maxq, z = clip(rint(-min / s), 0, maxq);
  * s is stored as float16 (the smallest subnormal if it rounds to 0) and z as float16, and the codes
    use the stored values. A group's grid is fitted when the sweep reaches its first column, on the
    columns as updated so far; with static groups every grid is fitted on W before the sweep.
For each code the script also writes t = w/s + z before rounding, so that the test can tell a rounding
tie (t within rounding of k + 1/2) from a real disagreement.
"""
import json
import sys

import numpy as np

ROWS, COLS = 12, 64

CASES = [
    # name, bits, group, grid, percdamp, act_order, static_groups
    ("q4-g32-minmax", 4, 32, "minmax", 0.01, False, False),
    ("q3-g16-minmax", 3, 16, "minmax", 0.01, False, False),
    ("q2-g64-integer-zero", 2, 64, "integer-zero", 0.01, False, False),
    ("q4-g16-actorder-static", 4, 16, "minmax", 0.01, True, True),
    ("q8-g24-minmax-damp0.1", 8, 24, "minmax", 0.1, False, False),
    ("q4-g32-static-integer-zero", 4, 32, "integer-zero", 0.01, False, True),
]


def inputs():
    rng = np.random.default_rng(2022)
    mix = np.eye(COLS) + 0.3 * rng.standard_normal((COLS, COLS))
    scales = np.exp(rng.uniform(-1.5, 1.5, COLS))
    x = scales[:, None] * (mix @ rng.standard_normal((COLS, 256)))
    x[5, :] = 0.0  # a dead input
    h = x @ x.T
    w = rng.standard_normal((ROWS, COLS)) * 0.05
    w[0, 3] = 0.4  # an outlier widens its group's range
    w[7, 40:48] = 0.02  # a constant run inside a group
    return w, h


def fit_grid(x, bits, grid):
    maxq = 2**bits - 1
    lo, hi = float(x.min()), float(x.max())
    if grid == "integer-zero":
        lo, hi = min(lo, 0.0), max(hi, 0.0)
        if lo == 0.0 and hi == 0.0:
            lo, hi = -1.0, 1.0
    s = (hi - lo) / maxq
    if grid == "minmax":
        s = max(s, max(abs(lo), abs(hi)) / 2048.0)
        if s == 0.0:
            s = 1.0
    sh = np.float16(s)
    assert np.isfinite(sh)
    if sh == 0:
        sh = np.frombuffer(np.uint16(1).tobytes(), dtype=np.float16)[0]
    s = float(sh)
    z = -lo / s
    if grid == "integer-zero":
        z = float(np.clip(np.rint(z), 0, maxq))
    zh = np.float16(z)
    return int(sh.view(np.uint16)), int(zh.view(np.uint16)), s, float(zh)


def gptq(w, h, bits, group, grid, percdamp, act_order, static_groups):
    maxq = 2**bits - 1
    rows, cols = w.shape
    n_g = (cols + group - 1) // group
    w0, h0 = w.copy(), h.copy()
    dead = np.diag(h0) == 0
    h0[dead, dead] = 1.0
    w0[:, dead] = 0.0
    grids = {}
    if static_groups:
        for r in range(rows):
            for g in range(n_g):
                grids[r, g] = fit_grid(w0[r, g * group:(g + 1) * group], bits, grid)
    perm = np.argsort(-np.diag(h0), kind="stable") if act_order else np.arange(cols)
    wp = w0[:, perm].copy()
    hp = h0[perm][:, perm].copy()
    damp = percdamp * np.mean(np.diag(hp))
    hp[np.arange(cols), np.arange(cols)] += damp
    l_inv = np.linalg.inv(np.linalg.cholesky(hp))  # (H + lambda I)^-1 = L^-T L^-1
    u = np.linalg.cholesky(l_inv.T @ l_inv).T
    codes = np.zeros((rows, cols), dtype=np.int64)
    t_all = np.zeros((rows, cols))
    loss = 0.0
    for j in range(cols):
        col = perm[j]
        for r in range(rows):
            if not static_groups and j % group == 0:
                grids[r, col // group] = fit_grid(wp[r, j:j + group], bits, grid)
        s = np.array([grids[r, col // group][2] for r in range(rows)])
        z = np.array([grids[r, col // group][3] for r in range(rows)])
        t = wp[:, j] / s + z
        c = np.clip(np.rint(t), 0, maxq)
        q = s * (c - z)
        e = (wp[:, j] - q) / u[j, j]
        wp[:, j + 1:] -= np.outer(e, u[j, j + 1:])
        loss += float(np.sum(e * e))
        codes[:, col] = c.astype(np.int64)
        t_all[:, col] = t
    scales = [[grids[r, g][0] for g in range(n_g)] for r in range(rows)]
    zeros = [[grids[r, g][1] for g in range(n_g)] for r in range(rows)]
    return codes, t_all, scales, zeros, loss, damp


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gptq_reference.py OUT.json")
    w, h = inputs()
    out = {"rows": ROWS, "cols": COLS, "w": w.ravel().tolist(), "h": h.ravel().tolist(), "cases": []}
    for name, bits, group, grid, percdamp, act_order, static_groups in CASES:
        codes, t, scales, zeros, loss, damp = gptq(w, h, bits, group, grid, percdamp, act_order, static_groups)
        out["cases"].append({
            "name": name, "bits": bits, "group": group, "grid": grid, "percdamp": percdamp,
            "act_order": act_order, "static_groups": static_groups,
            "codes": codes.ravel().tolist(), "t": t.ravel().tolist(),
            "scales": sum(scales, []), "zeros": sum(zeros, []), "loss": loss, "damping": damp,
        })
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
