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

from graphfuse.match.dims import same_size

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
    """Split ``labels`` (in memory order, size-1 labels left out) into consecutive groups
    whose size products are ``shape``; None if a dim would split a label."""
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


def _strip(groups: Groups, ones: frozenset[str]) -> Groups:
    return [tuple(lb for lb in g if lb not in ones) for g in groups]


_TRANSPOSE, _PERMUTE, _RESHAPE = "transpose", "permute", "reshape"


def _kind(target: Any) -> str | None:
    """How a chain op of ``target`` moves the axes: ``_TRANSPOSE``, ``_PERMUTE``, None
    (an identity: copies, aliases, casts) or ``_RESHAPE`` (reshape, view, _unsafe_view,
    flatten: regrouped by the output's sizes)."""
    if target is aten.transpose.int:
        return _TRANSPOSE
    if target is aten.permute.default:
        return _PERMUTE
    if target in _IDENTITY:
        return None
    return _RESHAPE


def output_layout(start: fx.Node, chain: tuple[fx.Node, ...], sizes: dict[str, Any]) -> str | None:
    """The layout name the chain (outermost first) produces from ``start``'s value, where
    ``start`` holds ``[B, H, S, D]`` (possibly already flattened, e.g. ``[B*H, S, D]``)."""
    return _simulate(start, chain, sizes)


def bhsd_layout(start: fx.Node, chain: tuple[fx.Node, ...], dims: tuple) -> str | None:
    """``output_layout`` with the sizes ``B, H, S, D = dims``."""
    return _simulate(start, chain, dict(zip(("B", "H", "S", "D"), dims)))


def _simulate(start: fx.Node, chain: tuple[fx.Node, ...], sizes: dict[str, Any]) -> str | None:
    ones = frozenset(lb for lb, size in sizes.items() if same_size(size, 1))
    labels = [lb for lb in ("B", "H", "S", "D") if lb not in ones]
    groups = _regroup(labels, sizes, start.meta["val"].shape)
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
    for name, canon in LAYOUTS.items():
        if len(canon) == len(groups) and groups == _strip(canon, ones):
            return name
    return None
