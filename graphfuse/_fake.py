"""``meta["val"]`` for new nodes: run the op's fake impl on the inputs' fake values.

Results are cached by the inputs' metadata (dtype, device, shape, stride and the
non-tensor arguments), so a rule that fires a thousand times on same-shaped blocks
pays for fake propagation once.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx
from torch._guards import detect_fake_mode
from torch.utils._pytree import tree_flatten


def _tensor_key(v: torch.Tensor) -> Any:
    key = (v.dtype, v.device, tuple(v.shape), tuple(v.stride()))
    try:
        hash(key)
    except TypeError:  # symbolic sizes: key them by their expressions
        key = (v.dtype, v.device, tuple(map(str, v.shape)), tuple(map(str, v.stride())))
    return key


def _key_of(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return _tensor_key(v)
    if v is None or isinstance(v, (bool, int, float, str, torch.dtype)):
        return v
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return ("S", str(v))
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(_key_of(x) for x in v))
    if isinstance(v, dict):
        return ("D", tuple((k, _key_of(x)) for k, x in v.items()))
    try:
        hash(v)
    except TypeError:
        return ("R", repr(v))
    return v


_MISSING = object()


def _val_of(a: Any) -> Any:
    if isinstance(a, fx.Node):
        return a.meta.get("val", _MISSING)
    if isinstance(a, (list, tuple)):
        return type(a)(_val_of(x) for x in a)
    return a


def _has_missing(vals: Any) -> bool:
    return any(v is _MISSING or (isinstance(v, (list, tuple)) and _has_missing(v)) for v in vals)


class FakePropagator:
    """Computes (and caches) the fake value a new call node produces."""

    def __init__(self) -> None:
        self._cache: dict[Any, Any] = {}
        self.hits = 0
        self.misses = 0

    def __call__(self, target: Any, args: tuple, kwargs: dict) -> Any:
        vargs = tuple(_val_of(a) for a in args)
        vkwargs = {k: _val_of(v) for k, v in kwargs.items()}
        if _has_missing(vargs) or _has_missing(vkwargs.values()):
            return None
        key = (target, _key_of(vargs), _key_of(vkwargs))
        if key in self._cache:
            self.hits += 1
            return self._cache[key]
        self.misses += 1
        mode = detect_fake_mode(tree_flatten((vargs, vkwargs))[0])
        if mode is None:
            return None
        with mode:
            out = target(*vargs, **vkwargs)
        self._cache[key] = out
        return out
