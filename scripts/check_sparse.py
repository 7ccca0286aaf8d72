#!/usr/bin/python3
"""An independent float64 check of the sparse solvers and of low rank + sparse, and the golden losses of
tests/data/sparse/sparse_cases.json.

Run it with /usr/bin/python3 (Debian's numpy; torch is not needed):

    /usr/bin/python3 scripts/check_sparse.py tests/data/sparse/sparse_cases.json

It generates a small weight W [16, 32] and an input second moment C = X X^T [32, 32] (correlated
features of unequal scales, feature 3 never active: a dead input), runs every solver on them for
several targets, and writes inputs and results (the layer-wise loss tr((W - D) C (W - D)^T) and the
non-zero count of D) to one JSON file, which tests/unit/test_sparse.cpp reads: the C++ solvers must
reach the same losses within 1e-6 relative. The C++ test needs no Python; rerun this only when the
fixture or an algorithm changes.

What it transcribes (latentllm's paper, appendix "Sparse Matrix", and the baselines as published),
written in its plainest form (loops over rows and groups, numpy's eigvalsh and Cholesky):
  * pruned per row p = floor(s * d) (2:4: d / 2); every unstructured method keeps kappa = d' (d - p);
  * wanda: score |W_ij| sqrt(C_jj); in each row (2:4: each group of 4) the p (2) lowest scores are
    pruned, among equal scores the higher column first;
  * hard shrinkage S_kappa: the kappa entries of largest magnitude of the whole matrix kept (ties: the
    lower row-major index), 2:4: the 2 largest of each group of 4 (ties: the lower column);
  * hard: D = wanda(W); L = lambda_max(C); repeat at most `iters` times: D' = S_kappa[D - (D - W) C / L],
    stop before a step that does not lower the loss, and after one that lowers it by <= 1e-12 of it;
    then conjugate gradients on the support, each row its own quadratic, at most `iters` steps
    (a row stops once its residual norm^2 is <= 1e-24 of its start or p^T C p <= 0);
  * fista: L = lambda_max(C); theta in [hi 1e-9, hi], hi = max|W C| / L; 40 bisection steps on
    log theta (theta = sqrt(lo hi)), each `iters` FISTA steps D_k = T_theta[Y - (Y - W) C / L],
    t' = (1 + sqrt(1 + 4 t^2)) / 2, Y = D_k + (t - 1) / t' (D_k - D_{k-1}) from the previous probe's
    result (the first from W); a probe with nnz <= kappa lowers hi and is kept (stop at nnz == kappa),
    otherwise it raises lo;
  * sparsegpt: dead inputs (C_jj = 0) get H_jj = 1 and W[:, j] = 0; H = C + lambda mean(diag C) I;
    U = upper Cholesky factor of H^-1; blocks of 128 columns; unstructured: the block's
    floor(s d' n) lowest w^2 / U_jj^2 (ties: the higher row-major index) pruned when the sweep enters
    it; 2:4: at each group's first column, the 2 lowest of the group in each row; then column by
    column q = w masked, e = (w - q) / U_ii, later columns -= e U[i, i+1:].
  * lowrank-sparse (W ~ B A + D): the budget of --ratio S is the bytes of pure sparse at S (16-bit values plus
    the cheaper of a d' d-bit mask and ceil(log2(d' d)) bits per value, in whole bytes); a split f gives the
    factors r = min(floor(f budget / (2 (d' + d))), d', d) and D the most entries per row k whose bytes fit
    beside them (D's target: floor(s d) = d - k pruned per row). The alternation: D = hard(W) from Wanda,
    B A = 0; then `alternations` times: B A' = the rank-r truncated SVD of (W - D) P times P^+ with
    P = (C + lambda I)^(1/2), lambda = lambda_rel mean(diag C) (eigh; eigenvalues <= 1e-12 of the largest
    dropped), taken if the loss does not rise; D' = hard(W - B A) started from the current D instead of
    Wanda's, taken if the loss does not rise. The losses after the start and each alternation are recorded;
    the budget's choice is the split of lowest final loss (ties: the first, the smaller rank).
"""
import json
import math
import sys

import numpy as np

ROWS, COLS, DEAD = 16, 32, 3


def fixture():
    rng = np.random.default_rng(40)
    mix = np.eye(COLS) + 0.4 * rng.standard_normal((COLS, COLS))
    scale = np.exp(np.sin(0.7 * np.arange(COLS)))
    x = (scale[:, None] * mix) @ rng.standard_normal((COLS, 200))
    x[DEAD, :] = 0.0
    w = rng.standard_normal((ROWS, COLS))
    return w, x @ x.T


def loss(w, d, c):
    e = w - d
    return float(np.sum((e @ c) * e))


def pruned_per_row(cols, s, pattern):
    return cols // 2 if pattern == "2:4" else int(math.floor(s * cols))


def row_mask(score, s, pattern):
    rows, cols = score.shape
    mask = np.ones_like(score)
    group = 4 if pattern == "2:4" else cols
    prune = 2 if pattern == "2:4" else pruned_per_row(cols, s, pattern)
    for i in range(rows):
        for g in range(0, cols, group):
            order = sorted(range(g, g + group), key=lambda j: (score[i, j], -j))
            for j in order[:prune]:
                mask[i, j] = 0.0
    return mask


def wanda(w, c, s, pattern):
    score = np.abs(w) * np.sqrt(np.maximum(np.diag(c), 0.0))[None, :]
    return w * row_mask(score, s, pattern)


def hard_shrink(v, s, pattern):
    if pattern == "2:4":
        return v * row_mask(np.abs(v), s, pattern)
    rows, cols = v.shape
    keep = rows * (cols - pruned_per_row(cols, s, pattern))
    order = sorted(range(rows * cols), key=lambda k: (-abs(v[k // cols, k % cols]), k))
    out = np.zeros_like(v)
    for k in order[:keep]:
        out[k // cols, k % cols] = v[k // cols, k % cols]
    return out


def refit(w, c, mask, d, iters):
    d = d.copy()
    for i in range(d.shape[0]):
        m = mask[i]
        r = ((w[i] - d[i]) @ c) * m
        p = r.copy()
        rr = r @ r
        rr0 = rr
        for _ in range(iters):
            if rr <= 1e-24 * rr0:
                break
            q = (p @ c) * m
            pq = p @ q
            if not pq > 0:
                break
            alpha = rr / pq
            d[i] += alpha * p
            r -= alpha * q
            nxt = r @ r
            p = r + (nxt / rr) * p
            rr = nxt
    return d


def hard(w, c, s, pattern, iters, start=None):
    d = wanda(w, c, s, pattern) if start is None else start.copy()
    lmax = np.linalg.eigvalsh(c)[-1]
    cur = loss(w, d, c)
    for _ in range(iters):
        nxt = hard_shrink(d - (d - w) @ c / lmax, s, pattern)
        nl = loss(w, nxt, c)
        if not nl < cur:
            break
        settled = cur - nl <= 1e-12 * cur
        d, cur = nxt, nl
        if settled:
            break
    return refit(w, c, (d != 0).astype(float), d, iters)


def fista(w, c, s, iters):
    lmax = np.linalg.eigvalsh(c)[-1]
    keep = w.shape[0] * (w.shape[1] - pruned_per_row(w.shape[1], s, "unstructured"))
    hi = np.max(np.abs(w @ c)) / lmax
    lo = hi * 1e-9
    best = np.zeros_like(w)
    start = w.copy()
    for _ in range(40):
        theta = math.sqrt(lo * hi)
        d, y, t = start.copy(), start.copy(), 1.0
        for _ in range(iters):
            v = y - (y - w) @ c / lmax
            nxt = np.sign(v) * np.maximum(np.abs(v) - theta, 0.0)
            tn = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t * t))
            y = nxt + ((t - 1.0) / tn) * (nxt - d)
            d, t = nxt, tn
        nnz = int(np.count_nonzero(d))
        if nnz <= keep:
            hi, best = theta, d
            if nnz == keep:
                break
        else:
            lo = theta
        start = d
    return best


def sparsegpt(w0, c, s, pattern, lam):
    rows, cols = w0.shape
    w, h = w0.copy(), c.copy()
    for j in range(cols):
        if h[j, j] == 0:
            h[j, j] = 1.0
            w[:, j] = 0.0
    h += lam * np.mean(np.diag(h)) * np.eye(cols)
    u = np.linalg.cholesky(np.linalg.inv(h)).T  # H^-1 = L L^T = U^T U with U = L^T upper
    q = np.zeros_like(w)
    for i1 in range(0, cols, 128):
        n = min(128, cols - i1)
        mask = np.ones((rows, n))
        if pattern == "unstructured":
            score = w[:, i1:i1 + n] ** 2 / np.diag(u)[i1:i1 + n][None, :] ** 2
            k = int(math.floor(s * rows * n))
            order = sorted(range(rows * n), key=lambda x: (score[x // n, x % n], -x))
            for x in order[:k]:
                mask[x // n, x % n] = 0.0
        for i in range(n):
            j = i1 + i
            if pattern == "2:4" and i % 4 == 0:
                score = w[:, j:j + 4] ** 2 / np.diag(u)[j:j + 4][None, :] ** 2
                mask[:, i:i + 4] = row_mask(score, 0.5, "2:4")
            col = w[:, j].copy()
            q[:, j] = col * mask[:, i]
            e = (col - q[:, j]) / u[j, j]
            w[:, j:] -= np.outer(e, u[j, j:])
    return q


def storage_bytes(nnz, rows, cols, value_bytes=2):
    entries = rows * cols
    index_bits = math.ceil(math.log2(max(entries, 2)))
    return nnz * value_bytes + (min(entries, nnz * index_bits) + 7) // 8


def split(rows, cols, s, fraction):
    budget = storage_bytes(rows * (cols - pruned_per_row(cols, s, "unstructured")), rows, cols)
    rank = min(int(math.floor(fraction * budget / (2 * (rows + cols)))), rows, cols)
    keep = max([k for k in range(cols + 1) if storage_bytes(rows * k, rows, cols) + 2 * rank * (rows + cols) <= budget])
    return rank, keep


def root_cov(c, lam_rel):
    lam = lam_rel * np.mean(np.diag(c))
    ev, v = np.linalg.eigh(c + lam * np.eye(c.shape[0]))
    k = ev > 1e-12 * ev.max()
    return (v[:, k] * np.sqrt(ev[k])) @ v[:, k].T, (v[:, k] / np.sqrt(ev[k])) @ v[:, k].T


def lowrank_sparse(w, c, rank, keep, iters, alternations, lam_rel):
    s = (w.shape[1] - keep + 0.5) / w.shape[1]
    d = hard(w, c, s, "unstructured", iters)
    ba = np.zeros_like(w)
    cur = loss(w, d, c)
    losses = [cur]
    if rank == 0:
        return losses
    p, p_pinv = root_cov(c, lam_rel)
    for _ in range(alternations):
        u, sv, vt = np.linalg.svd((w - d) @ p)
        nba = (u[:, :rank] * sv[:rank]) @ vt[:rank] @ p_pinv
        nl = loss(w, nba + d, c)
        if nl <= cur:
            ba, cur = nba, nl
        nd = hard(w - ba, c, s, "unstructured", iters, d)
        nl = loss(w - ba, nd, c)
        if nl <= cur:
            d, cur = nd, nl
        losses.append(cur)
    return losses


def main(out):
    w, c = fixture()
    iters = 100
    cases = []
    for s, pattern in [(0.5, "unstructured"), (0.3, "unstructured"), (0.5, "2:4")]:
        results = {"wanda": wanda(w, c, s, pattern), "hard": hard(w, c, s, pattern, iters),
                   "sparsegpt": sparsegpt(w, c, s, pattern, 0.01)}
        if pattern == "unstructured":
            results["fista"] = fista(w, c, s, iters)
        for name, d in results.items():
            cases.append({"method": name, "sparsity": s, "pattern": pattern, "iters": iters,
                          "loss": loss(w, d, c), "nnz": int(np.count_nonzero(d))})
            print(f"{name:10s} {pattern:12s} s={s:.2f} nnz={cases[-1]['nnz']:4d} loss={cases[-1]['loss']:.9e}")
    lowrank = []
    for s in [0.5, 0.3]:
        for fraction in [0.0, 0.25, 0.5, 0.75]:
            rank, keep = split(ROWS, COLS, s, fraction)
            losses = lowrank_sparse(w, c, rank, keep, iters, 4, 1e-4)
            lowrank.append({"sparsity": s, "fraction": fraction, "rank": rank, "keep_per_row": keep, "iters": iters,
                            "alternations": 4, "lambda_rel": 1e-4, "losses": losses})
            print(f"lowrank-sparse s={s:.2f} f={fraction:.2f} rank={rank:2d} keep={keep:2d} "
                  f"losses={' '.join(f'{x:.6e}' for x in losses)}")
    with open(out, "w") as f:
        json.dump({"rows": ROWS, "cols": COLS, "w": w.ravel().tolist(), "c": c.ravel().tolist(), "cases": cases,
                   "lowrank_sparse": lowrank}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/sparse/sparse_cases.json")
