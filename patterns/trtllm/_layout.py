"""Which output layout a chain of layout ops spells, by simulating it on labelled axes.

The attention output is ``[B, H, S, D]``. Each op of the chain between attention and the
quant (transpose / permute / reshape / view / clone / flatten) is replayed on *groups of
labels*: a permutation reorders the groups, a reshape flattens them in order and regroups
by the sizes its output has (``meta["val"]``, so ``-1`` and symbolic sizes need no
arithmetic here). Size-1 labels carry no layout and are dropped. The result names one of
the fused op's layouts, or None.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

from graphfuse._dims import same_size

aten = torch.ops.aten
prims = torch.ops.prims
Groups = list[tuple[str, ...]]
# Ops of the chain that keep the layout (copies, aliases and casts).
_IDENTITY = frozenset(
    [
        aten.clone.default,
        aten.contiguous.default,
        aten.alias.default,
        aten.to.dtype,
        aten._to_copy.default,
        prims.convert_element_type.default,
    ]
)

LAYOUTS: dict[str, list[tuple[str, ...]]] = {
    "bhsd": [("B",), ("H",), ("S",), ("D",)],
    "bshd": [("B",), ("S",), ("H",), ("D",)],
    "bs(hd)": [("B",), ("S",), ("H", "D")],
    "(bs)(hd)": [("B", "S"), ("H", "D")],
}


def _regroup(labels: list[str], sizes: dict[str, Any], shape: Any) -> Groups | None:
    """Split ``labels`` (in memory order) into consecutive groups whose size products are
    ``shape``; None if a dim would split a label."""
    labels = [lb for lb in labels if not same_size(sizes[lb], 1)]
    out: Groups = []
    i = 0
    for dim in shape:
        group: list[str] = []
        prod: Any = 1
        while not same_size(prod, dim):
            if i == len(labels):
                return None
            group.append(labels[i])
            prod = prod * sizes[labels[i]]
            i += 1
        out.append(tuple(group))
    return out if i == len(labels) else None


def _strip(groups: Groups, sizes: dict[str, Any]) -> Groups:
    return [tuple(lb for lb in g if not same_size(sizes[lb], 1)) for g in groups]


# Results of output_layout for int sizes, keyed by everything the simulation reads: the
# start's shape, B / H / S / D, and per chain op how it moves the axes (its _kind) and what
# it reads: the dims of a transpose / permute, the output shape of a reshape (an identity
# op reads nothing and is left out). A rule firing on a thousand same-shaped blocks
# simulates once.
_CACHE: dict[tuple, str | None] = {}
_CACHE_MAX = 4096
STATS = {"hits": 0, "misses": 0}


_INT = frozenset((int,))
_MISS = object()
_TRANSPOSE, _PERMUTE, _RESHAPE = "transpose", "permute", "reshape"
_KINDS: dict[int, tuple[Any, str | None]] = {}  # id(target) -> (target, its kind)


def _kind(target: Any) -> str | None:
    """How a chain op of ``target`` moves the axes: ``_TRANSPOSE``, ``_PERMUTE``, None
    (an identity: copies, aliases, casts) or ``_RESHAPE`` (reshape, view, _unsafe_view,
    flatten: regrouped by the output's sizes). Remembered per target (an ``OpOverload``
    hashes in Python)."""
    hit = _KINDS.get(id(target))
    if hit is None or hit[0] is not target:
        if target is aten.transpose.int:
            kind: str | None = _TRANSPOSE
        elif target is aten.permute.default:
            kind = _PERMUTE
        elif target in _IDENTITY:
            kind = None
        else:
            kind = _RESHAPE
        hit = _KINDS[id(target)] = (target, kind)
    return hit[1]


def _ints(xs: Any) -> tuple | None:
    out = xs if isinstance(xs, tuple) else tuple(xs)  # (a torch.Size is a tuple)
    return out if _INT.issuperset(map(type, out)) else None


def _cache_key(
    start: fx.Node, chain: tuple[fx.Node, ...], names: tuple[str, ...], dims: tuple
) -> tuple | None:
    """The cache key of one simulation (``names``: the sizes' names, ``dims``: their
    values); None when a size is symbolic (not cached)."""
    shape = _ints(start.meta["val"].shape)
    if shape is None or not _INT.issuperset(map(type, dims)):
        return None
    if not chain:
        return (shape, names, dims)
    key: list = [shape, names, dims]
    for node in chain:
        kind = _kind(node.target)
        if kind is None:
            continue
        if kind is _RESHAPE:
            read: Any = node.meta["val"].shape  # (a torch.Size: hashed and compared as a tuple)
        elif kind is _TRANSPOSE:
            args = node.args
            read = (args[1], args[2])
        else:
            read = tuple(node.args[1])
        if not _INT.issuperset(map(type, read)):
            return None
        key.append((kind, read))
    return tuple(key)


def output_layout(start: fx.Node, chain: tuple[fx.Node, ...], sizes: dict[str, Any]) -> str | None:
    """The layout name the chain (outermost first) produces from ``start``'s value, where
    ``start`` holds ``[B, H, S, D]`` (possibly already flattened, e.g. ``[B*H, S, D]``)."""
    return _cached_layout(start, chain, tuple(sizes), tuple(sizes.values()))


_BHSD = ("B", "H", "S", "D")


def bhsd_layout(start: fx.Node, chain: tuple[fx.Node, ...], dims: tuple) -> str | None:
    """``output_layout`` with the sizes ``B, H, S, D = dims``."""
    if not chain:  # the common case, looked up inline: _cache_key's key for no chain
        shape = start.meta["val"].shape  # (a torch.Size: hashed and compared as a tuple)
        if _INT.issuperset(map(type, shape)) and _INT.issuperset(map(type, dims)):
            got = _CACHE.get((shape, _BHSD, dims), _MISS)
            if got is not _MISS:
                STATS["hits"] += 1
                return got  # type: ignore[return-value]
    return _cached_layout(start, chain, _BHSD, dims)


def _cached_layout(
    start: fx.Node, chain: tuple[fx.Node, ...], names: tuple[str, ...], dims: tuple
) -> str | None:
    key = _cache_key(start, chain, names, dims)
    if key is not None:
        got = _CACHE.get(key, _MISS)
        if got is not _MISS:
            STATS["hits"] += 1
            return got  # type: ignore[return-value]
    STATS["misses"] += 1
    out = _simulate(start, chain, dict(zip(names, dims)))
    if key is not None:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        _CACHE[key] = out
    return out


def _simulate(start: fx.Node, chain: tuple[fx.Node, ...], sizes: dict[str, Any]) -> str | None:
    groups = _regroup(["B", "H", "S", "D"], sizes, start.meta["val"].shape)
    for node in reversed(chain):
        if groups is None:
            return None
        kind, args = _kind(node.target), node.args
        if kind is _TRANSPOSE:
            rank = len(groups)
            d0, d1 = args[1] % rank, args[2] % rank
            groups[d0], groups[d1] = groups[d1], groups[d0]
        elif kind is _PERMUTE:
            groups = [groups[d % len(groups)] for d in args[1]]
        elif kind is None:
            continue
        else:  # reshape, view, _unsafe_view, flatten: regroup by the output's sizes
            flat = [lb for g in groups for lb in g]
            groups = _regroup(flat, sizes, node.meta["val"].shape)
    if groups is None:
        return None
    stripped = _strip(groups, sizes)
    for name, canon in LAYOUTS.items():
        if len(canon) == len(groups) and stripped == _strip(list(canon), sizes):
            return name
    return None
