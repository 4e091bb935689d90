"""The A/B pairing every side-by-side bench shares: A and B run in alternating order (A B, B A,
A B, ...), so that a burst of load from other processes on a shared machine hits both alike, and
a median over the pairs discards the pairs a burst did hit."""

from __future__ import annotations

import statistics
from typing import Callable, Iterator, TypeVar

A = TypeVar("A")
B = TypeVar("B")


def alternating(a_fn: Callable[[], A], b_fn: Callable[[], B], rounds: int) -> Iterator[tuple[A, B]]:
    """(a, b) for each of `rounds` pairs, A first in even rounds and B first in odd ones; lazily,
    so that what the caller does between two pairs runs between them."""
    for r in range(rounds):
        if r % 2 == 0:
            a, b = a_fn(), b_fn()
        else:
            b, a = b_fn(), a_fn()
        yield a, b


def pairs(a_fn: Callable[[], float], b_fn: Callable[[], float], rounds: int) -> list[float]:
    """a/b ratios of `rounds` pairs of blocks (each fn returns its wall time), alternating."""
    return [a / b for a, b in alternating(a_fn, b_fn, rounds)]


def describe(ratios: list[float]) -> str:
    """The median ratio and its interquartile range."""
    q = statistics.quantiles(ratios, n=4)
    return f"{statistics.median(ratios):.4f} (IQR {q[0]:.4f}-{q[2]:.4f})"
