"""What jax_rank.py and tf_rank.py share: the data every rank contributes, as a float64
reference, and the check that a call fails with an error carrying given words."""

import numpy as np


def reference(rank, n):
    """What rank `rank` contributes: small integers, exact in every dtype and in their sums
    over 4 ranks."""
    return ((np.arange(n) + 3 * rank) % 23).astype(np.float64)


def raises(kind, words, fn):
    """fn() raises `kind` with every one of `words` in its message."""
    try:
        fn()
    except kind as e:
        assert all(w in str(e) for w in words), f"{words} not in: {e}"
        return
    raise AssertionError(f"no {kind.__name__} with {words}")
