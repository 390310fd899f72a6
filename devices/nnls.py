"""Non-negative least squares (Lawson and Hanson 1974), in numpy, for the profile fit.

    >>> import numpy as np
    >>> nnls(np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([2.0, -1.0]))
    array([2., 0.])
"""

from __future__ import annotations

import numpy as np


def nnls(a: np.ndarray, b: np.ndarray, max_iter: int | None = None,
         tol: float = 1e-10) -> np.ndarray:
    """``argmin ||a x - b||`` subject to ``x >= 0``."""
    n = a.shape[1]
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    for _ in range(max_iter or 3 * n + 10):
        gradient = a.T @ (b - a @ x)
        candidates = ~passive & (gradient > tol)
        if not candidates.any():
            break
        passive[np.argmax(np.where(candidates, gradient, -np.inf))] = True
        x = _inner_loop(a, b, x, passive)
    return x


def _inner_loop(a: np.ndarray, b: np.ndarray, x: np.ndarray, passive: np.ndarray
                ) -> np.ndarray:
    """Solve on the passive set, stepping back towards x while any value turns negative."""
    while True:
        z = np.zeros_like(x)
        z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
        if (z[passive] > 0).all():
            return z
        negative = passive & (z <= 0)
        alpha = np.min(x[negative] / (x[negative] - z[negative]))
        x = x + alpha * (z - x)
        passive &= x > 1e-12
        x[~passive] = 0.0
        if not passive.any():
            return x
