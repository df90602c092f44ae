"""Leaf matchers of the compiled engine (``_engine.py``): captures, wildcards, literals,
typed captures and lists. Each has ``m(value, st, where, k)`` (continuation style, as every
engine matcher) and, for patterns that match in at most one way, ``one(value, st, where)``:
match inline without a continuation (the fast path's leaves)."""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

from . import dsl as P
from ._entries import leaf_entry
from ._matcher import Cont, _bind, _first_set, _ids_may, _literal_equal, _State, _type_ok, _val


def _compiled(pat: P.Pattern) -> Any:
    from ._engine import compiled  # the registry lives with the engine (imports this module)

    return compiled(pat)


class _CCapture:
    __slots__ = ("name", "kind")

    def __init__(self, pat: P.Capture) -> None:
        self.name, self.kind = pat.name, pat.kind

    def one(self, value: Any, st: _State, where: tuple | None) -> bool:
        """Match without a continuation (a leaf matches in at most one way): extend the
        state and return True, or return False (the caller undoes)."""
        st.visits += 1
        if self.kind == "tensor":
            val = _val(value)
            if not isinstance(value, fx.Node) or (
                val is not None and not isinstance(val, torch.Tensor)
            ):
                st.fail("kind", self.name, value, "a tensor", where)
                return False
        elif self.kind == "scalar":
            ok = isinstance(value, (int, float, bool)) or isinstance(
                _val(value), (torch.SymInt, torch.SymFloat, torch.SymBool)
            )
            if not ok:
                st.fail("kind", self.name, value, "a scalar", where)
                return False
        return _bind(st, self.name, value, where)

    def m(self, value: Any, st: _State, where: tuple | None, k: Cont) -> bool:
        mark = len(st.trail)
        if self.one(value, st, where) and k():
            return True
        st.undo(mark)
        return False

    fast = m  # the fast path needs nothing else (calls inside dispatch)


class _CWildcard:
    __slots__ = ()

    def one(self, value: Any, st: _State, where: tuple | None) -> bool:
        st.visits += 1
        return True

    def m(self, value: Any, st: _State, where: tuple | None, k: Cont) -> bool:
        st.visits += 1
        return k()

    fast = m  # the fast path needs nothing else (calls inside dispatch)


class _CLiteral:
    __slots__ = ("value",)

    def __init__(self, pat: P.Literal) -> None:
        self.value = pat.value

    def one(self, value: Any, st: _State, where: tuple | None) -> bool:
        st.visits += 1
        if _literal_equal(self.value, value, where):
            return True
        st.fail("literal", where, value, self.value)
        return False

    def m(self, value: Any, st: _State, where: tuple | None, k: Cont) -> bool:
        return self.one(value, st, where) and k()

    fast = m  # the fast path needs nothing else (calls inside dispatch)


class _CTyped:
    __slots__ = ("pat", "inner", "leaf")

    def __init__(self, pat: P.Typed) -> None:
        self.pat, self.inner = pat, _compiled(pat.inner)
        # the fast path's generated function (a typed capture matched inline)
        simple = type(pat.inner) in (P.Capture, P.Wildcard)
        self.leaf = leaf_entry(pat) if simple else None

    def m(self, value: Any, st: _State, where: tuple | None, k: Cont) -> bool:
        st.visits += 1
        pat = self.pat

        def typed() -> bool:
            mark = len(st.trail)
            if _type_ok(pat, value, st) and k():
                return True
            st.undo(mark)
            return False

        return self.inner.m(value, st, where, typed)

    def fast(self, value: Any, st: _State, where: tuple | None, k: Cont) -> bool:
        if self.leaf is None:
            return self.m(value, st, where, k)
        return self.leaf(value, st, where, k)

    def one(self, value: Any, st: _State, where: tuple | None) -> bool:
        """For a simple inner pattern only (see ``_CCapture.one``)."""
        st.visits += 1
        return self.inner.one(value, st, where) and _type_ok(self.pat, value, st)


class _CListOf:
    __slots__ = ("pat", "items")

    def __init__(self, pat: P.ListOf) -> None:
        self.pat = pat
        self.items = tuple((_compiled(p), _first_set(p)) for p in pat.items)

    def m(self, value: Any, st: _State, where: tuple | None, k: Cont) -> bool:
        st.visits += 1
        if not isinstance(value, (list, tuple)) or len(value) != len(self.items):
            st.fail("literal", where, value, self.pat)
            return False
        if not self.items:
            return k()
        return _m_items(self.items, 0, value, st, where, k)

    fast = m  # the fast path needs nothing else (calls inside dispatch)

    def one(self, value: Any, st: _State, where: tuple | None) -> bool:
        """For simple items only (see ``_CCapture.one``)."""
        st.visits += 1
        if not isinstance(value, (list, tuple)) or len(value) != len(self.items):
            st.fail("literal", where, value, self.pat)
            return False
        return all(sub.one(v, st, where) for (sub, _), v in zip(self.items, value))


def _m_items(items: tuple, i: int, value: Any, st: _State, where: tuple | None, k: Cont) -> bool:
    sub, first = items[i]
    if st.fast and first is not None and not _ids_may(first, value[i]):
        return False
    if i + 1 == len(items):
        return sub.m(value[i], st, where, k)
    return sub.m(value[i], st, where, lambda: _m_items(items, i + 1, value, st, where, k))
