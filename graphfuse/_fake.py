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
    if isinstance(v, (bool, float)):  # 2, 2.0 and True compare equal
        return (type(v), v)
    if v is None or isinstance(v, (int, str, torch.dtype)):
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


class _Token:
    """Stands for one tensor metadata key (equal keys, the same token)."""

    __slots__ = ()


_INT = frozenset((int,))
_SCALARS = frozenset((type(None), bool, int, float, str, torch.dtype))
_NODE = fx.Node


class FakePropagator:
    """Computes (and caches) the fake value a new call node produces."""

    def __init__(self) -> None:
        self._cache: dict[Any, tuple[Any, Any]] = {}  # key -> (target, fake value)
        self._tensor_keys: dict[int, tuple[torch.Tensor, Any]] = {}  # id(val) -> (val, key)
        # a fake tensor's metadata key -> a token standing for it in cache keys (hashed by
        # identity: a nested tuple of dtype, device, sizes and strides is rehashed on
        # every lookup)
        self._tokens: dict[Any, _Token] = {}
        # id(out) -> (out, dtype, shape, whether every size is a plain int) for the fake
        # tensors this propagator made
        self._made: dict[int, tuple[torch.Tensor, torch.dtype, torch.Size, bool]] = {}
        self.hits = 0
        self.misses = 0

    def _token(self, key: Any) -> _Token:
        token = self._tokens.get(key)
        if token is None:
            token = self._tokens[key] = _Token()
        return token

    def _arg_key(self, a: Any) -> Any:
        """The cache key of one argument (its value's metadata); _MISSING when a node has
        no ``meta["val"]``."""
        t = type(a)
        if t in _SCALARS:
            return (t, a) if t is float or t is bool else a
        if t is fx.Node:
            v = a.meta.get("val", _MISSING)
            if isinstance(v, torch.Tensor):
                hit = self._tensor_keys.get(id(v))
                if hit is None or hit[0] is not v:
                    hit = self._tensor_keys[id(v)] = (v, self._token(_tensor_key(v)))
                return hit[1]
            return v if v is _MISSING else _key_of(v)
        if t is list or t is tuple:
            parts = tuple(self._arg_key(x) for x in a)
            return _MISSING if any(p is _MISSING for p in parts) else (t.__name__, parts)
        return _key_of(_val_of(a))

    def _key_parts(self, args: Any) -> tuple | None:
        """The keys of ``args`` (None when one is _MISSING). Inline fast paths for plain
        scalars and nodes whose fake tensor was keyed before; float and bool scalars are
        keyed with their type (``2``, ``2.0`` and ``True`` compare equal, but ``x * 2``
        and ``x * 2.0`` of an integer tensor have different dtypes)."""
        keys = self._tensor_keys
        parts: list = []
        append = parts.append
        for a in args:
            t = type(a)
            if t is _NODE:
                v = a.meta.get("val", _MISSING)
                hit = keys.get(id(v))
                if hit is not None and hit[0] is v:
                    append(hit[1])
                    continue
            elif t in _SCALARS:
                append((t, a) if t is float or t is bool else a)
                continue
            k = self._arg_key(a)
            if k is _MISSING:
                return None
            append(k)
        return tuple(parts)

    def scan(self, args: tuple, graph: fx.Graph) -> Any:
        """One pass over a call's positional ``args`` when each is a node of ``graph`` or a
        plain scalar (``_SCALARS``): their cache-key parts, as ``_key_parts(args)`` gives
        them (``_MISSING`` where that gives None: a node without a value). None when an
        argument is anything else (a node of another graph, a list, a device): the caller
        takes the general path (``Builder.call``: its foreign-node check, ``create_call``'s
        scan and :meth:`__call__`)."""
        keys = self._tensor_keys
        parts: list = []
        append = parts.append
        deferred = False
        for a in args:
            t = type(a)
            if t is _NODE:
                if a.graph is not graph:
                    return None
                v = a.meta.get("val", _MISSING)
                hit = keys.get(id(v))
                if hit is not None and hit[0] is v:
                    append(hit[1])
                    continue
                append(a)  # keyed below, once the whole call is known to be plain
                deferred = True
            elif t in _SCALARS:
                append((t, a) if t is float or t is bool else a)
            else:
                return None
        if not deferred:
            return tuple(parts)
        for i, a in enumerate(parts):
            if type(a) is _NODE:
                k = self._arg_key(a)
                if k is _MISSING:
                    return _MISSING
                parts[i] = k
        return tuple(parts)

    def __call__(self, target: Any, args: tuple, kwargs: dict) -> Any:
        kargs = self._key_parts(args)
        if kargs is None:
            return None
        kkwargs: tuple = ()
        if kwargs:
            kvals = self._key_parts(kwargs.values())
            if kvals is None:
                return None
            kkwargs = tuple(zip(kwargs, kvals))
        return self.keyed(target, args, kwargs, kargs, kkwargs)

    def keyed(self, target: Any, args: tuple, kwargs: dict, kargs: tuple, kkwargs: tuple) -> Any:
        """:meth:`__call__` given the key parts of ``args`` and of ``kwargs``' items."""
        # keyed by the target's id (``OpOverload.__hash__`` runs Python code); the entry
        # holds the target, so the id stays its own while the entry lives
        key = (id(target), kargs, kkwargs)
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
        if isinstance(out, torch.Tensor):
            shape = out.shape
            self._made[id(out)] = (out, out.dtype, shape, _INT.issuperset(map(type, shape)))
        return out

    def described(self, val: torch.Tensor) -> tuple[torch.dtype, torch.Size, bool | None]:
        """``(val.dtype, val.shape)``, remembered for the values this propagator made (a
        rewrite firing on same-shaped blocks gets the same cached value every time), and
        whether every size is a plain int (None: not known, for a value it did not make)."""
        hit = self._made.get(id(val))
        if hit is not None and hit[0] is val:
            return hit[1], hit[2], hit[3]
        return val.dtype, val.shape, None
