"""Reference timing for bench/jsync: one power-method iteration of J-sync in
plain NumPy, the way the field's Python codes do it (every triplet's four
residuals recomputed at every product, vectorised over k for each pair i<j).

Usage: python3 bench/jsync_numpy_ref.py RIJS.npy
Prints: N, seconds for one iteration (w = S v), and the triplet count.
"""
import sys
import time

import numpy as np


def pair(n, i, j):
    return (2 * n - i - 1) * i // 2 + j - i - 1


def one_product(R, n, v):
    J = np.array([-1.0, -1.0, 1.0])
    JJ = J[:, None] * J[None, :]
    w = np.zeros_like(v)
    for i in range(n - 2):
        for j in range(i + 1, n - 1):
            ks = np.arange(j + 1, n)
            ij = pair(n, i, j)
            jk = pair(n, j, ks)
            ik = pair(n, i, ks)
            A, B, C = R[ij], R[jk], R[ik]
            AB = A @ B
            c = np.stack([
                ((AB - C) ** 2).sum((1, 2)),
                (((JJ * A) @ B - C) ** 2).sum((1, 2)),
                ((A @ (JJ * B) - C) ** 2).sum((1, 2)),
                ((AB - JJ * C) ** 2).sum((1, 2)),
            ])
            best = c.argmin(0)
            s1 = np.where((best == 1) | (best == 2), -1.0, 1.0)  # s_ij_jk
            s2 = np.where(best >= 2, -1.0, 1.0)                    # s_ik_jk
            s3 = np.where((best == 1) | (best == 3), -1.0, 1.0)    # s_ij_ik
            w[ij] += (s1 * v[jk] + s3 * v[ik]).sum()
            np.add.at(w, jk, s1 * v[ij] + s2 * v[ik])
            np.add.at(w, ik, s3 * v[ij] + s2 * v[jk])
    return w


def main():
    R = np.load(sys.argv[1])
    P = R.shape[0]
    n = int(round((1 + (1 + 8 * P) ** 0.5) / 2))
    v = np.random.default_rng(0).uniform(size=P)
    t = time.perf_counter()
    one_product(R, n, v)
    dt = time.perf_counter() - t
    print(n, dt, n * (n - 1) * (n - 2) // 6)


if __name__ == "__main__":
    main()
