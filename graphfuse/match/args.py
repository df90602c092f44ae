"""Schema normalisation of a node's arguments.

``normalize(node)`` returns the node's arguments as one list in schema order (positional
and keyword-only alike), with defaults filled, so that ``softmax(x, -1)``,
``softmax(x, dim=3)`` and ``softmax(self=x, dim=-1)`` all read ``[x, 3, False]`` for a 4-D
``x``. Negative dims are made non-negative with the rank of the op's first argument (the
first tensor of a tensor list, for ``cat`` and ``stack``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import fx

_DIM_NAMES = frozenset({"dim", "dims", "dim0", "dim1", "start_dim", "end_dim", "source"})
_DIM_TYPES = ("int", "Optional[int]", "List[int]", "Optional[List[int]]")


class ArgSpec(NamedTuple):
    """The argument names of a target, their defaults, and which ones are dims."""

    names: tuple[str, ...]
    defaults: tuple[Any, ...]  # None where the schema has none
    dim_args: frozenset[int]
    index: dict[str, int]  # name -> position


_SPECS: dict[int, tuple[Any, ArgSpec | None]] = {}  # id(target) -> (target, spec)


def arg_spec(target: Any) -> ArgSpec | None:
    """The schema-derived :class:`ArgSpec` of an ``OpOverload`` (None for other targets)."""
    hit = _SPECS.get(id(target))
    if hit is None or hit[0] is not target:
        hit = _SPECS[id(target)] = (target, _make_spec(target))
    return hit[1]


def _make_spec(target: Any) -> ArgSpec | None:
    if not isinstance(target, torch._ops.OpOverload):
        return None
    names, defaults, dims = [], [], set()
    for i, a in enumerate(target._schema.arguments):
        names.append(a.name)
        defaults.append(a.default_value if a.has_default_value() else None)
        if a.name in _DIM_NAMES and str(a.type).startswith(_DIM_TYPES):
            dims.add(i)
    index = {name: i for i, name in enumerate(names)}
    return ArgSpec(tuple(names), tuple(defaults), frozenset(dims), index)


def arg_index(target: Any, name: str) -> int | None:
    """Schema position of argument ``name`` of ``target`` (None if it has no such one)."""
    spec = arg_spec(target)
    return None if spec is None else spec.index.get(name)


def rank_of(value: Any) -> int | None:
    """The rank of a node's tensor value (of the first node of a list), if known."""
    if isinstance(value, (list, tuple)) and value:
        value = value[0]
    if isinstance(value, fx.Node):
        val = value.meta.get("val")
        if isinstance(val, torch.Tensor):
            return val.dim()
    return None


def canonical_dim(d: Any, rank: int | None) -> Any:
    """``d`` (an int or a list of ints) with negative dims made non-negative."""
    if rank is None:
        return d
    if type(d) is int:
        return d + rank if d < 0 else d
    if isinstance(d, (list, tuple)) and all([type(x) is int for x in d]):
        if not d or min(d) >= 0:
            return d
        return type(d)(x + rank if x < 0 else x for x in d)
    return d


def normalize(node: fx.Node) -> list[Any]:
    """The node's arguments in schema order with defaults filled (see module docstring).

    For targets without a schema (Python callables) this is ``list(node.args)``.
    """
    spec = arg_spec(node.target)
    args = node.args
    if spec is None:
        return list(args)
    out = list(args)
    out += spec.defaults[len(args) :]
    for k, v in node.kwargs.items():
        i = spec.index.get(k)
        if i is not None:
            out[i] = v
    if spec.dim_args:
        rank = rank_of(out[0]) if out else None
        for i in spec.dim_args:
            out[i] = canonical_dim(out[i], rank)
    return out


def first_rank(node: fx.Node) -> int | None:
    """The rank that makes ``node``'s dims non-negative (its normalized first argument's)."""
    if node.args:  # the normalized first argument is the node's own
        return rank_of(node.args[0])
    args = normalize(node)
    return rank_of(args[0]) if args else None
