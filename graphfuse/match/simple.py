"""The matchers that match in one way at most: captures, wildcards, literals, lists and
type tests. Each ``step(value, where, st, goals, choices)`` returns the goals left after
it (``goals`` itself, or more goals in front of it), or ``FAIL``; see :mod:`.machine`."""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

from .. import dsl as P
from . import args as A
from .dims import same_size
from .state import State

FAIL = object()  # what a step returns when its goal cannot be met

Goals = tuple | None  # (matcher, value, where, rest) or None


def is_call(value: Any) -> bool:
    """Whether ``value`` is a ``call_function`` node."""
    return isinstance(value, fx.Node) and value.op == "call_function"


class Capture:
    """``P.tensor`` / ``P.scalar`` / ``P.any``: bind the value to a name."""

    __slots__ = ("name", "kind")

    def __init__(self, pat: P.Capture) -> None:
        self.name, self.kind = pat.name, pat.kind

    def step(self, value: Any, where: Any, st: State, goals: Goals, choices: list) -> Goals:
        if self.kind == "tensor":
            val = value.meta.get("val") if isinstance(value, fx.Node) else None
            if not isinstance(value, fx.Node) or not (val is None or _is_tensor(val)):
                st.fail("kind", self.name, value, "a tensor", where)
                return FAIL
        elif self.kind == "scalar" and not _is_scalar(value):
            st.fail("kind", self.name, value, "a scalar", where)
            return FAIL
        return goals if st.bind(self.name, value, where) else FAIL


def _is_tensor(val: Any) -> bool:
    return isinstance(val, torch.Tensor)


def _is_scalar(value: Any) -> bool:
    if isinstance(value, (int, float, bool)):
        return True
    val = value.meta.get("val") if isinstance(value, fx.Node) else None
    return isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool))


class Wildcard:
    """``P._``: anything."""

    __slots__ = ()

    def step(self, value: Any, where: Any, st: State, goals: Goals, choices: list) -> Goals:
        return goals


class Literal:
    """A literal argument: equal to the value (a dim compared after canonicalisation)."""

    __slots__ = ("value",)

    def __init__(self, pat: P.Literal) -> None:
        self.value = pat.value

    def step(self, value: Any, where: Any, st: State, goals: Goals, choices: list) -> Goals:
        want = self.value
        if (type(value) is type(want) and value == want) or literal_equal(want, value, where):
            return goals
        st.fail("literal", where, value, self.value)
        return FAIL


def literal_equal(want: Any, got: Any, where: tuple | None) -> bool:
    """Whether a node's argument ``got`` is the literal ``want``: numbers compare across
    int and float, lists across list types; a negative dim in the pattern compares with
    the node's dims after both are made non-negative."""
    if isinstance(got, fx.Node):
        return False
    numbers = isinstance(want, (int, float)) and isinstance(got, (int, float))
    lists = isinstance(want, (list, tuple)) and isinstance(got, (list, tuple))
    if type(want) is not type(got) and not numbers and not lists:
        return False
    if want == got or (lists and list(want) == list(got)):
        return True
    if where is not None:
        node, i = where
        spec = A.arg_spec(node.target)
        if spec is not None and i in spec.dim_args:
            w = A.canonical_dim(want, A.first_rank(node))
            return w == got or (lists and list(w) == list(got))
    return False


class ListOf:
    """A list argument matched item by item."""

    __slots__ = ("pat", "items")

    def __init__(self, pat: P.ListOf, items: tuple) -> None:
        self.pat, self.items = pat, items

    def step(self, value: Any, where: Any, st: State, goals: Goals, choices: list) -> Goals:
        if not isinstance(value, (list, tuple)) or len(value) != len(self.items):
            st.fail("literal", where, value, self.pat)
            return FAIL
        for matcher, item in zip(reversed(self.items), reversed(value)):
            goals = (matcher, item, where, goals)
        return goals


class Typed:
    """``P.typed``: the inner pattern, then a test of the value's ``meta["val"]``."""

    __slots__ = ("pat", "inner", "test")

    def __init__(self, pat: P.Typed, inner: Any) -> None:
        self.pat, self.inner, self.test = pat, inner, _TypeTest(pat)

    def step(self, value: Any, where: Any, st: State, goals: Goals, choices: list) -> Goals:
        return (self.inner, value, where, (self.test, value, where, goals))


class _TypeTest:
    """The dtype / device / rank / named-dim test of a :class:`Typed` pattern."""

    __slots__ = ("pat",)

    def __init__(self, pat: P.Typed) -> None:
        self.pat = pat

    def step(self, value: Any, where: Any, st: State, goals: Goals, choices: list) -> Goals:
        pat = self.pat
        val = value.meta.get("val") if isinstance(value, fx.Node) else None
        if not isinstance(val, torch.Tensor):
            st.fail("no_meta", value)
            return FAIL
        if pat.dtype is not None and val.dtype not in pat.dtype:
            st.fail("dtype", value, val.dtype, pat.dtype)
            return FAIL
        if pat.device is not None and val.device.type != pat.device:
            st.fail("device", value, val.device.type, pat.device)
            return FAIL
        rank = pat.rank if pat.rank is not None else (len(pat.shape) if pat.shape else None)
        if rank is not None and val.dim() != rank:
            st.fail("rank", value, val.dim(), rank)
            return FAIL
        for name, size in zip(pat.shape or (), val.shape):
            if name == "*":
                continue
            if isinstance(name, int) or name in st.dims:
                want = name if isinstance(name, int) else st.dims[name]
                if not same_size(want, size):
                    st.fail("size", value, size, name, None if isinstance(name, int) else want)
                    return FAIL
            else:
                st.put(st.dims, name, size)
        return goals
