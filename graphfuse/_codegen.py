"""The fast path of a call pattern at one target, compiled to Python source.

On the fast path (no tracer) the engine matches a :class:`P.Call` at a node of a given
target with one generated function per (pattern, target): the target's argument plan is
unrolled into straight-line code, single-way leaves (captures, wildcards, literals, typed
captures) are tested inline, and the arguments that walk into the graph follow in order.
One that matches in at most one way is matched straight on: a call of one exact target
is inlined (its own tests, nodes and arguments, recursively), anything else calls its
*entry* (the function matching its pattern at the argument's target, see
:mod:`graphfuse._entries`) with a continuation that accepts at once. Only an argument
that may match in several ways calls its entry with a continuation holding the
arguments after it. The generated function keeps the engine's contract (``fn(value, st,
where, k)``: ``k()`` per way, state undone on failure, True as soon as a ``k()``
accepts) and finds what the traced path (``m``) finds, in the same order: the same
bindings, tags, chains, dims, nodes and solutions, with no more visits (a way whose
first op cannot match the value is skipped unvisited;
``tests/fuzz/test_fast_path_equivalence.py`` compares the two).

A straight run of tests adds its visits in one step, before it calls out or where it
fails (:meth:`_Source.visit`: only a search's total is read); a node that spells the
arguments a plan reads positionally is read in place, its dims left as spelled where
only literals test them (:func:`_read_args`).

Example of what is generated, for ``P.op(aten.mul.Tensor, P.op(aten.neg, x), P.scalar("c"))``
at ``aten.mul.Tensor`` (simplified)::

    def fast(value, st, where, k):
        trail = st.trail
        mark = len(trail)
        <add value to st.nodes>
        args = value._args
        for _ in ONCE:          # a block that ``break`` leaves on failure
            a = args[1]
            <"c" must be a scalar (else: st.visits += 2; break); bind it>
            a = args[0]
            <f = the neg pattern's entry for a's target (else: st.visits += 2; break)>
            st.visits += 2      # the call's and the leaf's, before calling out
            if not f(a, st, (value, 0), TRUE):   # (one way: no continuation)
                break
            if k():
                return True
        st.undo(mark)
        return False

Each generated function keeps its source as ``fn.source``.
"""

from __future__ import annotations

from typing import Any

import torch

from . import dsl as P
from ._args import arg_spec
from ._leafcode import _ARGS, _KWARGS, _define, _leaf, _Source
from ._matcher import _first_set, _one_way, _simple
from .dsl import _target_repr


def _fetch(src: _Source, child: Any, first: Any, var: str, fail: str) -> None:
    """Statements setting ``f`` to the function that matches ``child`` at the value in
    ``var`` (its entry for the value's target, see :func:`entry`); ``fail`` (``break`` or
    ``return False``) where the child cannot start at the value (no visit, as the first-set
    test of the object path)."""
    table = _first_table(child)
    c, d = src.const(child, "C"), src.const(table, "D")
    fs = src.const(first, "F")
    call = f"({var}.__class__ is Node or isinstance({var}, Node)) and {var}.op == 'call_function'"
    lookup = [
        f"t = {var}.target",
        f"h = {d}.get(id(t))",
        "if h is None or h[0] is not t:",
        f"    h = ENTRY({c}, {d}, {var}, {fs})",
        "f = h[1]",
    ]
    if first is None:  # (a value that is no call: the entry for None, as ``fast`` finds)
        src.emit(f"t = {var}.target if {call} else None")
        for line in lookup[1:]:
            src.emit(line)
        return
    src.emit(f"if not ({call}):")
    src.leave([fail])
    for line in lookup:
        src.emit(line)
    src.emit("if f is None:")
    src.leave([fail])


def _variant(src: _Source, simple: list, rest: list, plan: Any, raw: Any) -> None:
    """One argument order: the leaves inline, then the other arguments in order (see
    :func:`_rest`). ``raw``: the dim arguments read as the node spells them (see
    :func:`_read_args`)."""
    src.emit("for _ in ONCE:")
    src.depth += 1
    for idx, pat in simple:
        src.emit(f"a = args[{idx}]")
        _leaf(src, pat, "a", f"(value, {idx})", ("rank", plan, "value") if idx in raw else None)
    _rest(src, rest, 0)
    src.depth -= 1


def _rest(src: _Source, rest: list, i: int) -> None:
    """Statements matching ``rest[i:]`` (arguments that walk into the graph), then
    ``k()``, inside a block that ``break`` leaves on failure. An argument that matches
    in at most one way is matched straight on (:func:`_one_way_arg`); one that may match
    in several ways calls its entry with a continuation holding the arguments after it
    (``k<n>``, which undoes its own changes on failure)."""
    from ._engine import compiled

    for j in range(i, len(rest)):
        idx, pat, first = rest[j]
        src.emit(f"a = args[{idx}]")
        if _one_way(pat):
            _one_way_arg(src, pat, first, f"(value, {idx})")
            continue
        nxt = "k"
        if j + 1 < len(rest):
            nxt = f"k{src.fresh()}"
            src.emit(f"def {nxt}():")
            src.depth += 1
            outer, src.pending = src.pending, 0  # (the continuation counts its own)
            src.emit("km = len(trail)")
            src.emit("for _ in ONCE:")
            src.depth += 1
            _rest(src, rest, j + 1)
            src.depth -= 1
            src.emit("st.undo(km)")
            src.emit("return False")
            src.depth -= 1
            src.pending = outer
        _fetch(src, compiled(pat), first, "a", "break")
        src.flush()
        src.emit(f"if f(a, st, (value, {idx}), {nxt}):")
        src.emit("    return True")
        src.emit("break")
        return
    src.flush()
    src.emit("if k():")
    src.emit("    return True")


# Calls inlined into one generated function: shared sub-patterns repeat, and a chain of
# shared calls nests one block per call (Python allows 100 levels of indentation).
_INLINE_BUDGET = 64


def _one_way_arg(src: _Source, pat: P.Pattern, first: Any, where: str) -> None:
    """Statements matching ``pat`` (at most one way) at ``a``; ``break`` on failure,
    leaving what it added for the enclosing block's undo. A call of one exact target is
    inlined (:func:`_inline`); anything else calls its entry with a continuation that
    accepts at once (its one way, if any, then stays in the state)."""
    from ._engine import compiled

    target = _inline_target(pat)
    if target is not None and src.inlined < _INLINE_BUDGET:
        src.inlined += 1
        _inline(src, compiled(pat), target, "a")
        return
    _fetch(src, compiled(pat), first, "a", "break")
    src.flush()
    src.emit(f"if not f(a, st, {where}, TRUE):")
    src.emit("    break")


def _inline_target(pat: P.Pattern) -> Any:
    """The target of a call pattern that can be inlined: one way, one exact target (the
    plan, and so the code, is known before the node is), every argument present."""
    if type(pat) is not P.Call or len(pat.targets) != 1 or not _one_way(pat):
        return None
    target = pat.targets[0]
    if isinstance(target, torch._ops.OpOverloadPacket):
        return None
    from ._engine import compiled

    plan = compiled(pat).plan_for(target)
    return target if plan is not None and plan.missing is None else None


def _inline(src: _Source, call: Any, target: Any, var: str) -> None:
    """The code of ``call``'s generated function at ``target`` (see :func:`generate`),
    inline at the value in ``var``: the same tests, bindings, nodes and visits in the
    same order, ``break`` on failure. The pattern matches in at most one way, so its
    arguments follow straight on; the first-set test (``target`` alone) fails without a
    visit, as the entry lookup does."""
    plan = call.plan_for(target)
    n = src.fresh()
    v, args, rank = f"v{n}", f"args{n}", f"rank{n}"
    node = f"({var}.__class__ is Node or isinstance({var}, Node))"
    tg = src.const(target, "TG")
    # (a node whose target is no string is a call: fx checks it)
    op = "" if not isinstance(target, str) else f" and {var}.op == 'call_function'"
    src.emit(f"if not ({node}{op} and {var}.target is {tg}):")
    src.leave(["break"])
    src.emit(f"{v} = {var}")
    src.visit()
    depth = src.depth
    if call.shared:
        ca = src.const(call, "CA")
        src.flush()  # (the block below counts visits the other path does not)
        src.emit(f"if ({ca}, {v}) not in st.done:")  # met before: matched at once
        src.depth += 1
    _prologue(src, call, v, ["break"])
    _read_args(src, plan, v, args, rank, ["break"])
    simple = [(i, p) for i, p in plan.pairs if _simple(p)]
    raw = _dims_read(plan)[0]
    for idx, p in simple:
        src.emit(f"a = {args}[{idx}]")
        _leaf(src, p, "a", f"({v}, {idx})", (rank, plan, v) if idx in raw else None)
    for idx, p in plan.pairs:
        if not _simple(p):
            src.emit(f"a = {args}[{idx}]")
            _one_way_arg(src, p, _first_set(p), f"({v}, {idx})")
    if call.shared:
        src.flush()
    src.depth = depth


def _prologue(src: _Source, call: Any, v: str, fail: list[str]) -> None:
    """A call's own bindings: its name, its shared-call entry, its node."""
    if call.name is not None:
        name = repr(call.name)
        src.emit(f"if {name} in binds:")
        src.emit(f"    if binds[{name}] is not {v}:")
        src.leave(fail, 2)
        src.emit("else:")
        src.emit(f"    binds[{name}] = {v}")
        src.emit(f"    trail.append((binds, {name}))")
    if call.shared:
        ca = src.const(call, "CA")
        src.emit(f"st.done[({ca}, {v})] = True")
        src.emit(f"trail.append((st.done, ({ca}, {v})))")
    src.emit(f"if {v} not in ns:")
    src.emit(f"    st.nodes.append({v})")
    src.emit(f"    ns.add({v})")
    src.emit("    trail.append((None, None))")


def _read_args(src: _Source, plan: Any, v: str, args: str, rank: str, fail: list[str]) -> None:
    """``args`` = the node's arguments as the plan reads them (``rank``: the rank its
    dims were made non-negative with, where it reads dims); ``fail`` where too few."""
    pc = src.const(plan, "PL")
    read = f"{pc}.read({v})" if plan.reads is not None else f"normalized({v}, st.norm)"
    if plan.direct:
        src.emit(f"{args} = {v}.{_ARGS}")
        if plan.need:
            src.emit(f"if {plan.need} > len({args}):")
            if plan.reads is not None:  # (``plan.read`` inline: no dims to make non-negative)
                src.depth += 1
                _read_inline(src, plan, v, args)
                src.depth -= 1
                return
            src.emit(f"    {args} = {read}")
            src.emit(f"    if {plan.need} > len({args}):")
            src.leave(fail, 2)
        return
    if plan.reads is None:
        src.emit(f"{args} = {read}")
        if plan.need:
            src.emit(f"if {plan.need} > len({args}):")
            src.leave(fail)
        return
    # A node spelling every argument the plan reads positionally: its own arguments
    # (no copy), the dims that only literals test left as spelled (``_leaf`` compares
    # them as they are first), the others made non-negative here; else read_ranked
    # (which fills the plan's length: no failure).
    made = _dims_read(plan)[1]
    src.emit(f"{args} = {v}.{_ARGS}")
    src.emit(f"{rank} = NORANK")
    src.emit(f"if {plan.need} > len({args}):")
    src.emit(f"    {args}, {rank} = {pc}.read_ranked({v})")
    if made:
        src.emit("else:")
        src.depth += 1
        for i in made:
            src.emit(f"d = {args}[{i}]")
            src.emit("if not (d.__class__ is int and d >= 0) and needs_rank(d):")
            src.emit(f"    if {rank} is NORANK:")
            src.emit(f"        {rank} = {pc}.rank({v})")
            src.emit(f"    if {args}.__class__ is not list:")
            src.emit(f"        {args} = list({args})")
            src.emit(f"    {args}[{i}] = canonical_dim(d, {rank})")
        src.depth -= 1


def _read_inline(src: _Source, plan: Any, v: str, args: str) -> None:
    """``args = plan.read(v)`` for a plan that reads no dims, as one list display: per
    argument read, the keyword, else the positional argument, else the schema default
    (the other positions None); ``args`` holds the node's positional arguments."""
    kw = f"kw{src.fresh()}"
    src.emit(f"{kw} = {v}.{_KWARGS}")
    items = ["None"] * plan.need
    for i, name, default, is_dim in plan.reads:
        assert not is_dim
        fill = src.const(default, "DF")
        items[i] = (
            f"{kw}[{name!r}] if {name!r} in {kw} else {args}[{i}] if {i} < len({args}) else {fill}"
        )
    src.emit(f"{args} = [{', '.join(items)}]")


def _dims_read(plan: Any) -> tuple[frozenset, tuple]:
    """(the dim arguments that a plan reading dims with a known rank leaves as the node
    spells them: those only literals (or wildcards) test, in every way; the others)."""
    spec = arg_spec(plan.target)
    if spec is None or plan.direct or not plan.reads:
        return frozenset(), ()
    ways = [plan.pairs] + ([plan.swapped_pairs] if plan.swapped_pairs else [])
    read = sorted({i for i, _ in plan.pairs} & spec.dim_args)
    raw = frozenset(
        i
        for i in read
        if all(type(p) in (P.Literal, P.Wildcard) for w in ways for j, p in w if j == i)
    )
    return raw, tuple(i for i in read if i not in raw)


# Generated code's entry tables, one per child matcher: id(target) -> (target, entry, or
# None where the child cannot start at the target; see graphfuse._entries)
_TABLES: dict[int, tuple[Any, dict]] = {}  # id(matcher) -> (matcher, {id(target): entry})


def _first_table(matcher: Any) -> dict:
    hit = _TABLES.get(id(matcher))
    if hit is None:
        hit = _TABLES[id(matcher)] = (matcher, {})
    return hit[1]


def generate(
    call: Any, plan: Any, pairs: list, swapped: list | None, pre: tuple | None = None
) -> Any:
    """The fast function of ``call`` (a ``_CCall``) at ``plan``'s target. ``pairs``:
    (argument index, pattern) in pattern order; ``swapped``: the other order of a
    commutative call, or None. ``pre``: the wrappers of a resolution in front of the
    call (see :func:`_wrappers`), recorded by the same function (one call, not two)."""
    from ._engine import _normalized
    from ._entries import _wrappers, entry

    src = _Source()
    src.consts.update(CALL=call, normalized=_normalized, ENTRY=entry, TRUE=_true)
    if pre is None:
        src.visit()
        if call.shared:
            src.emit("if (CALL, value) in st.done:")
            src.leave(["return k()"])
    src.emit("trail = st.trail")
    src.emit("binds = st.binds")
    src.emit("ns = st.node_set")
    src.emit("mark = len(trail)")
    if pre is not None:
        _wrappers(src, pre)
        src.visit()
        if call.shared:
            src.emit("if (CALL, value) in st.done:")
            src.leave(["if k():", "    return True", "st.undo(mark)", "return False"])
    _prologue(
        src, call, "value", ["return False"] if pre is None else ["st.undo(mark)", "return False"]
    )
    if plan.missing is not None:
        src.leave(["st.undo(mark)", "return False"], 0)
    else:
        _read_args(src, plan, "value", "args", "rank", ["st.undo(mark)", "return False"])
        raw = _dims_read(plan)[0]
        ways = [pairs] + ([swapped] if swapped is not None else [])
        if len(ways) > 1:
            src.flush()  # (each way starts from here)
        for n, ps in enumerate(ways):
            if n:
                src.emit("st.undo(inner)")
            elif len(ways) > 1:
                src.emit("inner = len(trail)")
            simple = [(i, p) for i, p in ps if _simple(p)]
            rest = [(i, p, _first_set(p)) for i, p in ps if not _simple(p)]
            _variant(src, simple, rest, plan, raw)
            assert not src.pending  # every way ends in a call or a failure's exit
        src.emit("st.undo(mark)")
        src.emit("return False")
    name = "fast" if pre is None else "tagged"
    return _define(src, name, f"<graphfuse {name} {label(call.pat)}>")


def _true() -> bool:
    """The continuation that accepts at once (see :func:`_one_way_arg`)."""
    return True


def label(pat: Any, depth: int = 2) -> str:
    """A short description of ``pat`` for generated code's file name: its outer levels
    only. ``repr`` of a whole pattern is not used here: it spells out every branch of
    every nested alternative, which for the bundled rules is megabytes of text (about
    1.5 s the first time a program is rewritten, when it was built per function)."""
    if depth < 0:
        return "…"
    if isinstance(pat, P.Call):
        head = _target_repr(pat.targets[0]) + ("|…" if len(pat.targets) > 1 else "")
        return f"P.op({', '.join([head, *(label(a, depth - 1) for a in pat.args)])})"
    if isinstance(pat, P.Alt):
        return f"P.alt({pat.name!r}, {len(pat.branches)} branches)"
    if isinstance(pat, P.Maybe):
        return f"P.maybe({label(pat.inner, depth)})"
    if isinstance(pat, P.Typed):
        return f"P.typed({label(pat.inner, depth)})"
    if isinstance(pat, P.ListOf):
        return "[" + ", ".join(label(i, depth - 1) for i in pat.items) + "]"
    text = repr(pat)
    return text if len(text) <= 40 else text[:39] + "…"
