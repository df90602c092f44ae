"""Schema normalisation of a node's arguments.

``normalize(node)`` returns the node's arguments as one list in schema order (positional
and keyword-only alike), with defaults filled, so that ``softmax(x, -1)``,
``softmax(x, dim=3)`` and ``softmax(self=x, dim=-1)`` all read ``[x, 3, False]`` for a 4-D
``x``. Negative dims are canonicalised with the rank of the op's first tensor argument.
"""

from __future__ import annotations

from functools import cache
from typing import Any, NamedTuple

import torch
from torch import fx
from torch.fx.immutable_collections import immutable_list

_DIM_NAMES = frozenset({"dim", "dims", "dim0", "dim1", "start_dim", "end_dim", "source"})
_NO_DEFAULT = object()


class ArgSpec(NamedTuple):
    """The argument names of a target, their defaults, and which ones are dims."""

    names: tuple[str, ...]
    defaults: tuple[Any, ...]  # _NO_DEFAULT where the schema has none
    dim_args: frozenset[int]


@cache
def arg_spec(target: Any) -> ArgSpec | None:
    """The schema-derived :class:`ArgSpec` of an ``OpOverload`` (None for other targets)."""
    if not isinstance(target, torch._ops.OpOverload):
        return None
    names, defaults, dims = [], [], set()
    for i, a in enumerate(target._schema.arguments):
        names.append(a.name)
        defaults.append(a.default_value if a.has_default_value() else _NO_DEFAULT)
        tname = str(a.type)
        # test-suite fix: "Optional[List[int]]" (sum/mean/var_mean's ``int[1]? dim``) was
        # missing, so their negative dims were never canonicalised.
        dim_types = ("int", "Optional[int]", "List[int]", "Optional[List[int]]")
        if a.name in _DIM_NAMES and tname.startswith(dim_types):
            dims.add(i)
    return ArgSpec(tuple(names), tuple(defaults), frozenset(dims))


def arg_index(target: Any, name: str) -> int | None:
    """Schema position of argument ``name`` of ``target`` (None if it has no such one)."""
    spec = arg_spec(target)
    if spec is None:
        return None
    try:
        return spec.names.index(name)
    except ValueError:
        return None


def _rank(value: Any) -> int | None:
    # test-suite fix: a tensor-list first argument (aten.cat / aten.stack) has the rank of
    # its first tensor; before, cat(xs, -1) and cat(xs, 3) on 4-D xs did not agree.
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
    if isinstance(d, int) and not isinstance(d, bool):
        return d + rank if d < 0 else d
    if isinstance(d, (list, tuple)):
        kind = type(d)
        if _INT.issuperset(map(type, d)):  # plain ints (the common case): no generator
            if not d or min(d) >= 0:
                return d  # nothing to change: the object itself
            if kind not in _IMMUTABLE:
                return kind([x + rank if x < 0 else x for x in d])
            # fx's immutable_list is slow to build (about 2 us): one per value and rank
            key = (kind, tuple(d), rank)
            got = _CANONICAL.get(key)
            if got is None:
                got = _CANONICAL[key] = kind([x + rank if x < 0 else x for x in d])
            return got
        if all(isinstance(x, int) for x in d):
            return kind(x + rank if x < 0 else x for x in d)
    return d


def needs_rank(d: Any) -> bool:
    """Whether ``canonical_dim(d, rank)`` may differ from ``d`` (a negative dim in it):
    where not, the rank need not be looked up."""
    t = type(d)
    if t is int:
        return d < 0
    if d is None:
        return False
    if (t is list or t is tuple or t is immutable_list) and _INT.issuperset(map(type, d)):
        return bool(d) and min(d) < 0
    return True


_INT = frozenset((int,))
_IMMUTABLE = frozenset((tuple, immutable_list))
_CANONICAL: dict[tuple, Any] = {}  # (type, dims, rank) -> immutable canonical dims


def normalize(node: fx.Node) -> list[Any]:
    """The node's arguments in schema order with defaults filled (see module docstring).

    For targets without a schema (Python callables) this is ``list(node.args)``.
    """
    spec = arg_spec(node.target)
    if spec is None:
        return list(node.args)
    out = list(node.args) + [_NO_DEFAULT] * (len(spec.names) - len(node.args))
    if node.kwargs:
        for k, v in node.kwargs.items():
            if k in spec.names:
                out[spec.names.index(k)] = v
    for i, v in enumerate(out):
        if v is _NO_DEFAULT:
            out[i] = spec.defaults[i] if spec.defaults[i] is not _NO_DEFAULT else None
    if spec.dim_args:
        rank = _rank(out[0]) if out else None
        for i in spec.dim_args:
            out[i] = canonical_dim(out[i], rank)
    return out


def first_tensor_rank(node: fx.Node) -> int | None:
    """Rank of the node's first argument's tensor value, if known (for pattern dims)."""
    # test-suite fix: read the first argument after normalisation (it may be a kwarg)
    args = normalize(node)
    return _rank(args[0]) if args else None
