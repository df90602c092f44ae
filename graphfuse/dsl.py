"""The pattern language: small immutable values that describe graph structure.

A pattern says *what the graph looks like*; it holds no matching code and no example
inputs. Patterns compose (a sub-pattern is an ordinary value that many rules reuse) and
their ``repr`` reads as the code that builds them::

    >>> import torch
    >>> from graphfuse import dsl as P
    >>> aten = torch.ops.aten
    >>> x, s = P.tensor("x"), P.tensor("s")
    >>> quant = P.op(aten.clamp, P.op(aten.div, x, s), -448, 448)
    >>> quant
    P.op(aten.clamp, P.op(aten.div, P.tensor('x'), P.tensor('s')), -448, 448)

Constructors: :func:`op` (a call, by overload, packet or a set of them), :func:`tensor`,
:func:`scalar`, :func:`any` (captures), ``_`` (wildcard), :func:`lit` (literals; plain
Python values are literals too), ``a | b`` and :func:`alt` (tagged alternatives),
:func:`maybe` (see-through chains), :func:`typed` (dtype / rank / device / named-dim
predicates) and :func:`getitem` (one output of a multi-output op).
"""

from __future__ import annotations

import builtins
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "Pattern",
    "Call",
    "Capture",
    "Wildcard",
    "Literal",
    "ListOf",
    "Alt",
    "Maybe",
    "Typed",
    "op",
    "tensor",
    "scalar",
    "any",
    "lit",
    "alt",
    "maybe",
    "typed",
    "getitem",
    "_",
]

Target = Any  # torch._ops.OpOverload | OpOverloadPacket | a Python callable


class Pattern:
    """Base of every pattern value. ``a | b`` builds an untagged :class:`Alt`."""

    __slots__ = ()

    def __or__(self, other: Pattern) -> Alt:
        left = self.branches if isinstance(self, Alt) and self.name is None else ((None, self),)
        right = (
            other.branches if isinstance(other, Alt) and other.name is None else ((None, other),)
        )
        branches = tuple(
            (tag if tag is not None else str(i), p) for i, (tag, p) in enumerate(left + right)
        )
        return Alt(branches, None)


def target_repr(target: Target) -> str:
    """How a target reads in patterns and messages: ``aten.softmax``, ``aten.add.Tensor``."""
    if isinstance(target, torch._ops.OpOverload):
        ns, name = target.namespace, target._schema.name.split("::")[-1]
        ovl = target._overloadname
        return f"{ns}.{name}" if ovl == "default" else f"{ns}.{name}.{ovl}"
    if isinstance(target, torch._ops.OpOverloadPacket):
        return f"{target._qualified_op_name.split('::')[0]}.{target.__name__}"
    if target is operator.getitem:
        return "operator.getitem"
    return getattr(target, "__qualname__", repr(target))


def _as_pattern(value: Any) -> Pattern:
    if isinstance(value, Pattern):
        return value
    if isinstance(value, (list, tuple)) and builtins.any(isinstance(v, Pattern) for v in value):
        return ListOf(tuple(_as_pattern(v) for v in value))
    return Literal(value)


@dataclass(frozen=True, repr=False)
class Call(Pattern):
    """A ``call_function`` node whose target is one of ``targets``.

    Arguments are matched after schema normalisation: ``args[i]`` is the schema's i-th
    argument, ``kwargs`` are by schema name, defaults are filled, negative dims are
    canonicalised. Arguments the pattern does not mention match anything.
    """

    targets: tuple[Target, ...]
    args: tuple[Pattern, ...] = ()
    kwargs: tuple[tuple[str, Pattern], ...] = ()
    commutative: bool = False
    name: str | None = None

    def __repr__(self) -> str:
        tgt = (
            target_repr(self.targets[0])
            if len(self.targets) == 1
            else "{" + ", ".join(target_repr(t) for t in self.targets) + "}"
        )
        parts = [tgt] + [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs]
        if self.commutative:
            parts.append("commutative=True")
        if self.name:
            parts.append(f"name={self.name!r}")
        return f"P.op({', '.join(parts)})"


@dataclass(frozen=True, repr=False)
class Capture(Pattern):
    """Binds whatever is at this position to ``name`` (a name bound twice binds one value).

    ``kind`` is ``"tensor"`` (a node producing a tensor), ``"scalar"`` (a Python number or
    a symbolic scalar) or ``"any"``.
    """

    name: str
    kind: str = "any"

    def __repr__(self) -> str:
        fn = {"tensor": "tensor", "scalar": "scalar"}.get(self.kind, "any")
        return f"P.{fn}({self.name!r})"


@dataclass(frozen=True, repr=False)
class Wildcard(Pattern):
    """Matches anything and binds nothing."""

    def __repr__(self) -> str:
        return "P._"


@dataclass(frozen=True, repr=False)
class Literal(Pattern):
    """A non-node argument equal to ``value`` (``-1`` and ``3`` agree for a dim of a 4-D x)."""

    value: Any

    def __repr__(self) -> str:
        v = self.value
        if isinstance(v, torch.dtype):
            return str(v)
        return repr(v)


@dataclass(frozen=True, repr=False)
class ListOf(Pattern):
    """A list/tuple argument matched element-wise (e.g. ``[B, S, P._]`` for a view size)."""

    items: tuple[Pattern, ...]

    def __repr__(self) -> str:
        return "[" + ", ".join(repr(i) for i in self.items) + "]"


@dataclass(frozen=True, repr=False)
class Alt(Pattern):
    """Alternatives tried in order; the tag of the branch that matched is recorded as
    ``match.tag(name)``."""

    branches: tuple[tuple[str, Pattern], ...]
    name: str | None = None

    def __repr__(self) -> str:
        if self.name is None and all(t == str(i) for i, (t, _) in enumerate(self.branches)):
            return "(" + " | ".join(repr(p) for _, p in self.branches) + ")"
        inner = ", ".join(f"{t}={p!r}" for t, p in self.branches)
        name = f"{self.name!r}, " if self.name else ""
        return f"P.alt({name}{inner})"


@dataclass(frozen=True, repr=False)
class Maybe(Pattern):
    """Zero or more calls of ``targets`` (each applied to its first argument) in front of
    ``inner``; the nodes passed through are bound to ``name`` (outermost first). With
    ``where``, the chain only passes through nodes for which ``where(node)`` is true."""

    targets: tuple[Target, ...]
    inner: Pattern
    name: str | None = None
    where: Any = None  # Callable[[fx.Node], bool] | None

    def __repr__(self) -> str:
        ops = ", ".join(target_repr(t) for t in self.targets)
        name = f", name={self.name!r}" if self.name else ""
        where = f", where={getattr(self.where, '__name__', self.where)}" if self.where else ""
        return f"P.maybe([{ops}], {self.inner!r}{name}{where})"


@dataclass(frozen=True, repr=False)
class Typed(Pattern):
    """``inner`` whose ``meta["val"]`` has the given dtype(s), rank, device type and shape.

    ``shape`` lists named dims (``"B"``), ints, or ``"*"`` (any size); a name used twice
    in one match must bind equal sizes (compared symbolically with sympy).
    """

    inner: Pattern
    dtype: tuple[torch.dtype, ...] | None = None
    rank: int | None = None
    shape: tuple[str | int, ...] | None = None
    device: str | None = None

    def __repr__(self) -> str:
        parts = [repr(self.inner)]
        if self.dtype is not None:
            ds = ", ".join(str(d) for d in self.dtype)
            parts.append(f"dtype={ds}" if len(self.dtype) == 1 else f"dtype=({ds},)")
        if self.rank is not None:
            parts.append(f"rank={self.rank}")
        if self.shape is not None:
            parts.append(f"shape={list(self.shape)!r}")
        if self.device is not None:
            parts.append(f"device={self.device!r}")
        return f"P.typed({', '.join(parts)})"


_ = Wildcard()


def _targets(target: Target | Iterable[Target]) -> tuple[Target, ...]:
    if isinstance(target, (set, frozenset, list, tuple)):
        out = tuple(target)
        if isinstance(target, (set, frozenset)):
            out = tuple(sorted(out, key=target_repr))
    else:
        out = (target,)
    for t in out:
        if isinstance(t, str) or not callable(t):
            hint = f" (write torch.ops.{t})" if isinstance(t, str) else ""
            raise TypeError(
                f"a pattern's target is an op (torch.ops.aten.x, an overload) or a Python "
                f"callable, not {t!r}{hint}"
            )
    return out


def op(
    target: Target | Iterable[Target],
    *args: Any,
    commutative: bool = False,
    name: str | None = None,
    **kwargs: Any,
) -> Call:
    """A call of ``target`` (an ``OpOverload``, an ``OpOverloadPacket`` meaning any of its
    overloads, a Python callable such as ``operator.getitem``, or a set of these).

    Example::

        P.op(aten.softmax, P.tensor("x"), dim=-1)        # matches softmax(x, 3) on 4-D x
        P.op({aten.mul.Tensor, aten.mul.Scalar}, a, b, commutative=True)
    """
    if commutative and len(args) < 2:
        raise ValueError("P.op(commutative=True) needs two positional arguments")
    return Call(
        _targets(target),
        tuple(_as_pattern(a) for a in args),
        tuple((k, _as_pattern(v)) for k, v in kwargs.items()),
        commutative,
        name,
    )


def tensor(
    name: str,
    *,
    dtype: torch.dtype | Sequence[torch.dtype] | None = None,
    rank: int | None = None,
    shape: Sequence[str | int] | None = None,
    device: str | None = None,
) -> Pattern:
    """Capture a tensor-producing node as ``name``, optionally with type predicates.

    Example: ``P.tensor("q", shape=["B", "Hq", "S", "D"])``.
    """
    cap = Capture(name, "tensor")
    if dtype is None and rank is None and shape is None and device is None:
        return cap
    return typed(cap, dtype=dtype, rank=rank, shape=shape, device=device)


def scalar(name: str) -> Capture:
    """Capture a scalar argument (a Python number or a symbolic scalar node) as ``name``."""
    return Capture(name, "scalar")


def any(name: str) -> Capture:  # noqa: A001  (the DSL reads P.any("x"))
    """Capture anything (node or literal) as ``name``."""
    return Capture(name, "any")


def lit(value: Any) -> Literal:
    """An explicit literal (plain Python values in ``op(...)`` are literals already)."""
    return Literal(value)


def alt(name: str | None = None, /, **branches: Pattern) -> Alt:
    """Tagged alternatives: ``P.alt("spelling", div=..., mul=...)``; the matched tag is
    ``match.tag("spelling")``."""
    if not branches:
        raise ValueError("P.alt needs at least one branch")
    return Alt(tuple((t, _as_pattern(p)) for t, p in branches.items()), name)


def maybe(
    targets: Target | Iterable[Target],
    inner: Pattern,
    *,
    name: str | None = None,
    where: Any = None,
) -> Maybe:
    """See through a chain of zero or more ``targets`` calls (views, casts) before ``inner``.

    ``where(node) -> bool`` limits which calls the chain passes through (e.g. only casts
    that widen), so the matcher never tries chains a check would reject.

    Example: ``P.maybe([aten.view, aten.reshape, aten.clone], P.tensor("x"), name="layout")``.
    """
    return Maybe(_targets(targets), _as_pattern(inner), name, where)


def typed(
    inner: Pattern,
    *,
    dtype: torch.dtype | Sequence[torch.dtype] | None = None,
    rank: int | None = None,
    shape: Sequence[str | int] | None = None,
    device: str | None = None,
) -> Typed:
    """Add predicates on ``meta["val"]`` of what ``inner`` matched."""
    dtypes = None if dtype is None else tuple(dtype) if isinstance(dtype, Sequence) else (dtype,)
    if shape is not None and rank is not None and len(shape) != rank:
        raise ValueError(f"P.typed: shape {list(shape)} disagrees with rank {rank}")
    return Typed(inner, dtypes, rank, None if shape is None else tuple(shape), device)


def getitem(source: Pattern, index: int, *, name: str | None = None) -> Call:
    """Output ``index`` of a multi-output op: ``P.getitem(P.op(graphfuse.nvfp4_quant, ...), 1)``."""
    return Call((operator.getitem,), (source, Literal(index)), (), False, name)
