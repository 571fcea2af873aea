"""Choosing the next token from a model's logits, as llama.cpp's server does by default
(top-k, top-p and min-p at temperature 1, then the temperature), and the first
token's alternatives with their log-probabilities (OpenAI's ``top_logprobs``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

TOP_K, TOP_P, MIN_P = 40, 0.95, 0.05
"""llama.cpp server's default sampling, before the temperature."""


def sample(logits: np.ndarray, temperature: float, sampling: tuple[int, float, float], rng: np.random.Generator) -> int:
    """The next token: the likeliest at temperature 0; else drawn from those top-k, top-p
    and min-p (``sampling``) keep, at ``temperature``."""
    if temperature <= 0:
        return int(np.argmax(logits))
    top_k, top_p, min_p = sampling
    k = min(top_k, logits.size - 1) if top_k > 0 else logits.size - 1
    top = np.argpartition(-logits, k)[:k]
    top = top[np.argsort(-logits[top])]
    p = np.exp(logits[top] - logits[top[0]])
    p /= p.sum()
    keep = max(1, int(np.searchsorted(np.cumsum(p), top_p)) + 1)
    keep = min(keep, max(1, int((p >= min_p * p[0]).sum())))
    top = top[:keep]
    q = np.exp((logits[top] - logits[top[0]]) / temperature)
    return int(rng.choice(top, p=q / q.sum()))


def logprobs(logits: np.ndarray, token: int, n: int, text: Callable[[int], str]) -> dict[str, Any]:
    """``token``'s log-probability and the ``n`` likeliest alternatives (OpenAI's shape)."""
    finite = np.where(np.isfinite(logits), logits, -np.inf)
    top = float(finite.max())
    log_z = float(np.log(np.exp(finite - top).sum()) + top)
    best = np.argsort(-finite)[:n]
    alt = [{"token": text(int(t)), "logprob": float(finite[t] - log_z)} for t in best]
    return {"token": text(token), "logprob": float(finite[token] - log_z), "top_logprobs": alt}
