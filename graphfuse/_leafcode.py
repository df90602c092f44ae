"""Generated code's building blocks: Python source with its constants (:class:`_Source`),
the statements that test single-way leaf patterns inline (captures, wildcards, literals,
typed captures), and turning a source into a function. The call functions
(:mod:`graphfuse._codegen`) and entries (:mod:`graphfuse._entries`) are made of them."""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx.immutable_collections import immutable_list

from . import dsl as P
from ._args import _NO_DEFAULT, canonical_dim, needs_rank
from ._matcher import _literal_equal, _type_ok, exact_literal

_ONCE = (None,)


def _slot(prop: str) -> str:
    """The slot behind ``fx.Node.<prop>`` (``_args`` for ``args``) where the property only
    returns it, else the property: generated code reads it directly."""
    fget = getattr(getattr(fx.Node, prop, None), "fget", None)
    return f"_{prop}" if fget is not None and fget.__code__.co_names == (f"_{prop}",) else prop


_ARGS = _slot("args")
_KWARGS = _slot("kwargs")
_SYMS = (torch.SymInt, torch.SymFloat, torch.SymBool)


class _Source:
    """Lines of Python with indentation, plus the constants they name."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        # what leaf tests name (see _leaf)
        self.consts: dict[str, Any] = dict(
            Node=fx.Node,
            Tensor=torch.Tensor,
            SYMS=_SYMS,
            ONCE=_ONCE,
            literal_equal=_literal_equal,
            NORANK=_NO_DEFAULT,
            FAKE=FakeTensor,
            canonical_dim=canonical_dim,
            needs_rank=needs_rank,
            type_ok=_type_ok,
            ILIST=immutable_list,
        )
        self.depth = 1
        self.names = 0  # suffixes handed out by fresh()
        self.inlined = 0  # calls inlined so far (see _INLINE_BUDGET)
        self.pending = 0  # visits counted, not yet added to ``st.visits`` (see visit)

    def fresh(self) -> int:
        self.names += 1
        return self.names

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def visit(self, n: int = 1) -> None:
        """Count ``n`` visits here. Only a search's total is read (``_search`` adds
        ``st.visits`` to ``VISITS`` when it ends), so the visits of a straight run of tests
        are added in one step, before the run calls out (:meth:`flush`) or where it fails
        (:meth:`leave`): the same totals as one increment per test, fewer statements."""
        self.pending += n

    def flush(self) -> None:
        """Add the pending visits to ``st.visits`` here (before a call, or where paths
        that counted different visits meet)."""
        if self.pending:
            self.emit(f"st.visits += {self.pending}")
            self.pending = 0

    def leave(self, lines: list[str], indent: int = 1) -> None:
        """``lines`` (a failure's exit: ``break``, ``return False``), ``indent`` levels in,
        after adding the visits this path counted (still pending on the other path)."""
        pad = "    " * indent
        if self.pending:
            self.emit(f"{pad}st.visits += {self.pending}")
        for line in lines:
            self.emit(pad + line)

    def const(self, value: Any, stem: str = "K") -> str:
        name = f"{stem}{len(self.consts)}"
        self.consts[name] = value
        return name


def _leaf(src: _Source, pat: P.Pattern, var: str, where: str, dim: tuple | None = None) -> None:
    """Statements matching the single-way leaf ``pat`` at ``var``; ``break`` on failure.
    ``dim``: ``var`` is a dim argument of a node, read by a plan: (the local holding the
    rank it was made non-negative with, see ``_Plan.read_ranked``; the plan; the local
    holding the node)."""
    kind = type(pat)
    if kind is P.Wildcard:
        src.visit(1)
    elif kind is P.Capture:
        src.visit(1)
        if pat.kind == "tensor":  # type: ignore[attr-defined]
            src.emit(f"if not isinstance({var}, Node):")
            src.leave(["break"])
            src.emit(f"v = {var}.meta.get('val')")
            src.emit("if v is not None and not (v.__class__ is FAKE or isinstance(v, Tensor)):")
            src.leave(["break"])
        elif pat.kind == "scalar":  # type: ignore[attr-defined]
            src.emit(
                f"if not (isinstance({var}, (int, float, bool)) or (isinstance({var}, Node) "
                f"and isinstance({var}.meta.get('val'), SYMS))):"
            )
            src.leave(["break"])
        _bind(src, pat.name, var)  # type: ignore[attr-defined]
    elif kind is P.Literal:
        src.visit(1)
        lit = pat.value  # type: ignore[attr-defined]
        c = src.const(lit, "L")
        if isinstance(lit, (list, tuple)):
            # fx holds lists as immutable_list: equal items are equal lists (literal_equal)
            items = src.const(list(lit), "LL")
            # (fx's immutable_list first: a list itself, compared in place, where
            # copying it to a list costs about 0.2 us)
            quick = (
                f"{var}.__class__ is ILIST and {var} == {items} or "
                f"isinstance({var}, (list, tuple)) and list({var}) == {items}"
            )
        else:
            quick = f"{var}.__class__ is {src.const(type(lit), 'LC')} and {var} == {c}"
        if dim is None:
            if exact_literal(lit):  # (literal_equal would add nothing to the test)
                src.emit(f"if not ({quick}):")
            else:
                src.emit(f"if not ({quick}) and not literal_equal({c}, {var}, {where}):")
            src.leave(["break"])
            return
        # A dim argument, as read: the node's own where it spells the plan's arguments
        # positionally (see ``_codegen._read_args``), else made non-negative. Equal as
        # spelled is equal once made non-negative (the same rank for both); else both
        # are made non-negative with the node's rank (the literal's cached per rank)
        # before literal_equal, which would normalize the whole node.
        rank, plan, node = dim
        src.emit(f"if not ({quick}):")
        src.emit(f"    if {rank} is NORANK:")  # (the node's dims needed none: look it up)
        src.emit(f"        {rank} = {src.const(plan, 'PL')}.rank({node})")
        if _negative_dim(lit):
            canon = src.const({}, "CD")
            src.emit(f"    c = {canon}.get({rank})")
            src.emit("    if c is None:")
            src.emit(f"        c = {canon}[{rank}] = canonical_dim({c}, {rank})")
        else:
            src.emit(f"    c = {c}")
        src.emit(f"    {var} = canonical_dim({var}, {rank})")
        # For a value of the literal's kind, this is literal_equal's own last test (it
        # makes the literal non-negative with the same rank); other kinds go through it.
        if isinstance(lit, (list, tuple)):
            kind, differ = f"isinstance({var}, (list, tuple))", f"list({var}) != list(c)"
        else:
            kind, differ = f"{var}.__class__ is {src.const(type(lit), 'LC')}", f"{var} != c"
        src.emit(f"    if {kind}:")
        src.emit(f"        if {differ}:")
        src.leave(["break"], 3)
        src.emit(f"    elif not literal_equal({c}, {var}, {where}):")
        src.leave(["break"], 2)
    elif kind is P.Typed and type(pat.inner) in (P.Capture, P.Wildcard):  # type: ignore[attr-defined]
        inner = pat.inner  # type: ignore[attr-defined]
        if type(inner) is P.Capture and inner.kind == "tensor" and _inline_typed(pat):
            # the type test (a node whose value is a tensor) implies the capture's: the
            # test, then the binding (undone on failure: the order is not observable)
            src.visit(2)
            _typed(src, pat, var)  # type: ignore[arg-type]
            _bind(src, inner.name, var)
            return
        src.visit(1)
        _leaf(src, inner, var, where)
        _typed(src, pat, var)  # type: ignore[arg-type]
    else:  # lists, typed literals: the leaf object's own single-way match
        from ._engine import compiled

        c = src.const(compiled(pat), "C")
        src.emit(f"if not {c}.one({var}, st, {where}):")
        src.leave(["break"])


def _negative_dim(lit: Any) -> bool:
    """A dim literal that canonical_dim changes (a negative int, or a list with one)."""
    if type(lit) is int:
        return lit < 0
    return isinstance(lit, (list, tuple)) and any(type(x) is int and x < 0 for x in lit)


def _bind(src: _Source, name: str, var: str) -> None:
    """Bind the capture ``name`` to ``var`` (``break`` where it holds something else)."""
    name = repr(name)
    src.emit(f"if {name} in binds:")
    src.emit(f"    o = binds[{name}]")
    src.emit(
        f"    if not (o is {var} if isinstance(o, Node) or isinstance({var}, Node) "
        f"else o == {var}):"
    )
    src.leave(["break"], 2)
    src.emit("else:")
    src.emit(f"    binds[{name}] = {var}")
    src.emit(f"    trail.append((binds, {name}))")


def _inline_typed(pat: P.Typed) -> bool:
    """Whether :func:`_typed` tests ``pat`` inline (dtype and rank only)."""
    return not pat.shape and pat.device is None


def _typed(src: _Source, pat: P.Typed, var: str) -> None:
    """``_type_ok`` inline for dtype and rank; shapes and devices through it."""
    if not _inline_typed(pat):
        src.emit(f"if not type_ok({src.const(pat, 'T')}, {var}, st):")
        src.leave(["break"])
        return
    src.emit(f"v = {var}.meta.get('val') if isinstance({var}, Node) else None")
    # (``isinstance`` walks FakeTensor's class hierarchy: about 0.1 us, its class test less)
    src.emit("if not (v.__class__ is FAKE or isinstance(v, Tensor)):")
    src.leave(["break"])
    if pat.dtype is not None:
        src.emit(f"if v.dtype not in {src.const(pat.dtype, 'DT')}:")
        src.leave(["break"])
    if pat.rank is not None:
        src.emit(f"if v.dim() != {pat.rank!r}:")
        src.leave(["break"])


_PROLOGUE = tuple(
    ("    " + f"{name} = st.{attr}", re.compile(rf"(?<![\w.]){name}\b"))
    for name, attr in (("binds", "binds"), ("ns", "node_set"))
)


def _define(src: _Source, name: str, filename: str) -> Any:
    """The function ``name(value, st, where, k)`` whose body ``src`` holds (less the
    prologue's locals that nothing reads)."""
    lines = src.lines
    for line, local in _PROLOGUE:
        if line in lines and not any(local.search(x) for x in lines if x != line):
            lines = [x for x in lines if x != line]
    body = "\n".join(lines)
    code = f"def {name}(value, st, where, k):\n{body}\n"
    scope = dict(src.consts)
    exec(compile(code, filename, "exec"), scope)
    fn = scope[name]
    fn.source = code
    return fn
