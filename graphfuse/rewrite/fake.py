"""``meta["val"]`` for new nodes: run the op's fake impl on the inputs' fake values.

Results are cached by the inputs' metadata (dtype, device, shape, stride and the
non-tensor arguments), so a rule that fires a thousand times on same-shaped blocks pays
for fake propagation once.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx
from torch._guards import detect_fake_mode
from torch.utils._pytree import tree_flatten

_MISSING = object()  # a node without a value: nothing to propagate


def _tensor_key(v: torch.Tensor) -> Any:
    key = (v.dtype, v.device, tuple(v.shape), tuple(v.stride()))
    try:
        hash(key)
    except TypeError:  # symbolic sizes: key them by their expressions
        key = (v.dtype, v.device, tuple(map(str, v.shape)), tuple(map(str, v.stride())))
    return key


_PLAIN = frozenset({int, str, type(None), torch.dtype, torch.device})


def _key_of(a: Any, tensor_keys: dict[int, tuple[torch.Tensor, Any]]) -> Any:
    """The cache key of one argument: its value's metadata (``_MISSING``: no value).
    ``tensor_keys`` remembers the key of each fake tensor seen (by identity)."""
    if isinstance(a, fx.Node):
        a = a.meta.get("val", _MISSING)
        if a is _MISSING:
            return _MISSING
    cls = type(a)
    if cls in _PLAIN:
        return a
    if cls is bool or cls is float:  # 2, 2.0 and True compare equal; their dtypes do not
        return (cls, a)
    if isinstance(a, torch.Tensor):
        hit = tensor_keys.get(id(a))
        if hit is None or hit[0] is not a:
            hit = tensor_keys[id(a)] = (a, _tensor_key(a))
        return hit[1]
    if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return ("sym", str(a))
    if isinstance(a, (list, tuple)):
        parts = tuple([_key_of(x, tensor_keys) for x in a])
        return _MISSING if _MISSING in parts else (type(a).__name__, parts)
    if isinstance(a, (bool, float, int, str)):  # subclasses (an IntEnum, a str enum)
        return (cls, a)
    return ("repr", repr(a))


def _val_of(a: Any) -> Any:
    if isinstance(a, fx.Node):
        return a.meta.get("val")
    if isinstance(a, (list, tuple)):
        return type(a)(_val_of(x) for x in a)
    return a


class FakePropagator:
    """Computes (and caches) the fake value a new call node produces."""

    def __init__(self) -> None:
        self._cache: dict[Any, tuple[Any, Any]] = {}  # key -> (target, fake value)
        self._tensor_keys: dict[int, tuple[torch.Tensor, Any]] = {}
        self.hits = 0
        self.misses = 0

    def __call__(self, target: Any, args: tuple, kwargs: dict) -> Any:
        """The fake value of ``target(*args, **kwargs)``; None where an input has none."""
        key = _key_of((args, tuple(kwargs.items())), self._tensor_keys)
        if key is _MISSING:
            return None
        key = (id(target), key)  # the entry holds the target: its id stays its own
        hit = self._cache.get(key)
        if hit is not None and hit[0] is target:
            self.hits += 1
            return hit[1]
        self.misses += 1
        vargs = tuple(_val_of(a) for a in args)
        vkwargs = {k: _val_of(v) for k, v in kwargs.items()}
        mode = detect_fake_mode(tree_flatten((vargs, vkwargs))[0])
        if mode is None:
            return None
        with mode:
            out = target(*vargs, **vkwargs)
        self._cache[key] = (target, out)
        return out
