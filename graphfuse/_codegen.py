"""The fast path of a call pattern at one target, compiled to Python source.

On the fast path (no tracer) the engine matches a :class:`P.Call` at a node of a given
target with one generated function per (pattern, target): the target's argument plan is
unrolled into straight-line code, single-way leaves (captures, wildcards, literals, typed
captures) are tested inline, and only the arguments that may match in several ways call
a sub-matcher: the *entry* of the argument's pattern for the argument's target (see
"entries" below), chained by continuations. The generated function keeps the engine's
contract (``fn(value, st, where, k)``: ``k()`` per way, state undone on failure, True as
soon as a ``k()`` accepts) and finds what the traced path (``m``) finds, in the same
order: the same bindings, tags, chains, dims and solutions, with no more visits (a way
whose first op cannot match the value is skipped unvisited;
``tests/fuzz/test_fast_path_equivalence.py`` compares the two).

Example of what is generated, for ``P.op(aten.mul.Tensor, P.op(aten.neg, x), P.scalar("c"))``
at ``aten.mul.Tensor`` (simplified)::

    def fast(value, st, where, k):
        st.visits += 1
        trail = st.trail
        mark = len(trail)
        <add value to st.nodes>
        args = value._args
        for _ in ONCE:          # a block that ``break`` leaves on failure
            a = args[1]
            st.visits += 1
            <"c" must be a scalar; bind it>
            a = args[0]
            <f = the neg pattern's entry for a's target; break if a cannot start it>
            if f(a, st, (value, 0), k):
                return True
        st.undo(mark)
        return False

Each generated function keeps its source as ``fn.source``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

from . import dsl as P
from ._matcher import _first_set, _ids_may, _literal_equal, _type_ok
from .dsl import _target_repr

_ONCE = (None,)
# fx.Node.args is a Python property returning ``_args``: read the slot where it is only that
_ARGS = (
    "_args"
    if getattr(getattr(fx.Node, "args", None), "fget", None) is not None
    and fx.Node.args.fget.__code__.co_names == ("_args",)
    else "args"
)
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
            type_ok=_type_ok,
        )
        self.depth = 1

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def const(self, value: Any, stem: str = "K") -> str:
        name = f"{stem}{len(self.consts)}"
        self.consts[name] = value
        return name


def _leaf(src: _Source, pat: P.Pattern, var: str, where: str) -> None:
    """Statements matching the single-way leaf ``pat`` at ``var``; ``break`` on failure."""
    kind = type(pat)
    if kind is P.Wildcard:
        src.emit("st.visits += 1")
    elif kind is P.Capture:
        src.emit("st.visits += 1")
        if pat.kind == "tensor":  # type: ignore[attr-defined]
            src.emit(f"if not isinstance({var}, Node):")
            src.emit("    break")
            src.emit(f"v = {var}.meta.get('val')")
            src.emit("if v is not None and not isinstance(v, Tensor):")
            src.emit("    break")
        elif pat.kind == "scalar":  # type: ignore[attr-defined]
            src.emit(
                f"if not (isinstance({var}, (int, float, bool)) or (isinstance({var}, Node) "
                f"and isinstance({var}.meta.get('val'), SYMS))):"
            )
            src.emit("    break")
        name = repr(pat.name)  # type: ignore[attr-defined]
        src.emit(f"if {name} in binds:")
        src.emit(f"    o = binds[{name}]")
        src.emit(
            f"    if not (o is {var} if isinstance(o, Node) or isinstance({var}, Node) "
            f"else o == {var}):"
        )
        src.emit("        break")
        src.emit("else:")
        src.emit(f"    binds[{name}] = {var}")
        src.emit(f"    trail.append((binds, {name}))")
    elif kind is P.Literal:
        src.emit("st.visits += 1")
        lit = pat.value  # type: ignore[attr-defined]
        c = src.const(lit, "L")
        if isinstance(lit, (list, tuple)):
            # fx holds lists as immutable_list: equal items are equal lists (literal_equal)
            items = src.const(list(lit), "LL")
            quick = f"isinstance({var}, (list, tuple)) and list({var}) == {items}"
        else:
            quick = f"{var}.__class__ is {src.const(type(lit), 'LC')} and {var} == {c}"
        src.emit(f"if not ({quick}) and not literal_equal({c}, {var}, {where}):")
        src.emit("    break")
    elif kind is P.Typed and type(pat.inner) in (P.Capture, P.Wildcard):  # type: ignore[attr-defined]
        src.emit("st.visits += 1")
        _leaf(src, pat.inner, var, where)  # type: ignore[attr-defined]
        _typed(src, pat, var)  # type: ignore[arg-type]
    else:  # lists, typed literals: the leaf object's own single-way match
        from ._engine import compiled

        c = src.const(compiled(pat), "C")
        src.emit(f"if not {c}.one({var}, st, {where}):")
        src.emit("    break")


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
    if first is None:
        src.emit(f"if {call}:")
        for line in lookup:
            src.emit("    " + line)
        src.emit("else:")
        src.emit(f"    f = {c}.fast")
        return
    src.emit(f"if not ({call}):")
    src.emit(f"    {fail}")
    for line in lookup:
        src.emit(line)
    src.emit("if f is None:")
    src.emit(f"    {fail}")


def _typed(src: _Source, pat: P.Typed, var: str) -> None:
    """``_type_ok`` inline for dtype and rank; shapes and devices through it."""
    if pat.shape or pat.device is not None:
        src.emit(f"if not type_ok({src.const(pat, 'T')}, {var}, st):")
        src.emit("    break")
        return
    src.emit(f"v = {var}.meta.get('val') if isinstance({var}, Node) else None")
    src.emit("if not isinstance(v, Tensor):")
    src.emit("    break")
    if pat.dtype is not None:
        src.emit(f"if v.dtype not in {src.const(pat.dtype, 'DT')}:")
        src.emit("    break")
    if pat.rank is not None:
        src.emit(f"if v.dim() != {pat.rank!r}:")
        src.emit("    break")


def leaf_entry(pat: P.Pattern) -> Any:
    """The fast function of a single-way leaf pattern (a typed capture reached by an
    ``alt`` branch, say): the leaf inline, then ``k()``."""
    src = _Source()
    src.emit("trail = st.trail")
    src.emit("binds = st.binds")
    src.emit("mark = len(trail)")
    src.emit("for _ in ONCE:")
    src.depth += 1
    _leaf(src, pat, "value", "where")
    src.emit("if k():")
    src.emit("    return True")
    src.depth -= 1
    src.emit("st.undo(mark)")
    src.emit("return False")
    return _define(src, "leaf", f"<graphfuse leaf {label(pat)}>")


def _variant(src: _Source, simple: list, rest: list) -> None:
    """One argument order: the leaves inline, then the multi-way arguments chained by
    continuations (each through its entry for the argument's target)."""
    from ._engine import compiled

    src.emit("for _ in ONCE:")
    src.depth += 1
    for idx, pat in simple:
        src.emit(f"a = args[{idx}]")
        _leaf(src, pat, "a", f"(value, {idx})")
    # continuations, innermost first: k_i matches rest[i:]
    for i in range(len(rest) - 1, 0, -1):
        idx, pat, first = rest[i]
        nxt = "k" if i == len(rest) - 1 else f"k{i + 1}"
        src.emit(f"def k{i}():")
        src.depth += 1
        src.emit(f"a = args[{idx}]")
        _fetch(src, compiled(pat), first, "a", "return False")
        src.emit(f"return f(a, st, (value, {idx}), {nxt})")
        src.depth -= 1
    if not rest:
        src.emit("if k():")
        src.emit("    return True")
    else:
        idx, pat, first = rest[0]
        nxt = "k" if len(rest) == 1 else "k1"
        src.emit(f"a = args[{idx}]")
        _fetch(src, compiled(pat), first, "a", "break")
        src.emit(f"if f(a, st, (value, {idx}), {nxt}):")
        src.emit("    return True")
    src.depth -= 1


# --------------------------------------------------------------------------- entries
# The function that matches a compiled pattern at a call node depends on the node's
# target only: a call's generated function for that target; for an ``alt`` or ``maybe``
# resolved by the target (see ``_engine._resolution``), the final matcher's entry behind
# the tags, chains and visits the wrappers record; for an ``alt`` with several branches
# at the target, those branches' entries in turn. Cached per (matcher, target) in a
# table: the matcher's own (``matcher.table``, where a target the pattern cannot start at
# costs a visit, as walking into it would), or, for generated code, one per child
# matcher in ``_TABLES`` where such a target gives None (no visit: the first-set test).

_TABLES: dict[int, tuple[Any, dict]] = {}  # id(matcher) -> (matcher, {id(target): entry})


def _first_table(matcher: Any) -> dict:
    hit = _TABLES.get(id(matcher))
    if hit is None:
        hit = _TABLES[id(matcher)] = (matcher, {})
    return hit[1]


def entry(matcher: Any, table: dict, value: Any, first: Any = None) -> tuple:
    """(target, function or None) for ``matcher`` at ``value``, cached in ``table`` under
    the id of the value's target (of None for a value that is no call); None where
    ``first`` (a first set) is given and excludes the value."""
    t = value.target if isinstance(value, fx.Node) and value.op == "call_function" else None
    if first is not None and not _ids_may(first, value):
        fn = None
    else:
        fn = _entry_for(matcher, value)
    hit = table[id(t)] = (t, fn)
    return hit


def _entry_for(matcher: Any, value: Any) -> Any:
    """The function matching ``matcher`` at ``value`` (a call node: for its target; any
    other value: for values that are no call), uncached."""
    from ._engine import _FAIL, _CAlt, _CCall, _CMaybe, _resolution

    kind = type(matcher)
    if not (isinstance(value, fx.Node) and value.op == "call_function"):
        # not a call: resolutions depend on that alone (``_resolution`` keys them by None)
        if kind is _CCall:
            return _failing(1)
    elif kind is _CCall:
        plan = matcher.plan_for(value.target)
        return _failing(1) if plan is None else plan.fast
    if kind is not _CAlt and kind is not _CMaybe:
        return getattr(matcher, "leaf", None) or matcher.fast
    final, tags, chains, skipped = _resolution(matcher, value)
    if final is _FAIL:
        return _failing(skipped)
    if final is not matcher:
        inner = _entry_for(final, value)
        return _resolved(inner, tags, chains, skipped)
    if kind is _CMaybe:
        return matcher.walk_fast
    ways = tuple(
        (tag, _entry_for(branch, value)) for tag, branch, _ in matcher._fast_branches(value)
    )
    return _branches(ways, matcher.name)


def _failing(skipped: int) -> Any:
    def fail(value: Any, st: Any, where: Any, k: Any) -> bool:
        st.visits += skipped
        return False

    return fail


def _resolved(fn: Any, tags: tuple, chains: tuple, skipped: int) -> Any:
    """``fn`` behind the wrappers a resolution passed through (their visits, tags and
    empty chains)."""
    if not tags and not chains:

        def plain(value: Any, st: Any, where: Any, k: Any) -> bool:
            st.visits += skipped
            return fn(value, st, where, k)

        return plain

    src = _Source()
    fn_name = src.const(fn, "FN")
    src.emit(f"st.visits += {skipped}")
    src.emit("trail = st.trail")
    src.emit("mark = len(trail)")
    for table, pairs in (("st.tags", tags), ("st.chains", tuple((n, ()) for n in chains))):
        if pairs:
            src.emit(f"table = {table}")
        for name, value in pairs:
            src.emit(f"table[{name!r}] = {value!r}")
            src.emit(f"trail.append((table, {name!r}))")
    src.emit(f"if {fn_name}(value, st, where, k):")
    src.emit("    return True")
    src.emit("st.undo(mark)")
    src.emit("return False")
    return _define(src, "tagged", f"<graphfuse tags {tags!r:.40} {chains!r:.40}>")


def _branches(ways: tuple, name: str | None) -> Any:
    """An ``alt`` with several branches that may start at the target: each branch's
    entry in turn (tagged with its branch where the alt is named)."""

    def branches(value: Any, st: Any, where: Any, k: Any) -> bool:
        st.visits += 1
        trail = st.trail
        for tag, fn in ways:
            mark = len(trail)
            if name is not None:
                st.tags[name] = tag
                trail.append((st.tags, name))
            if fn(value, st, where, k):
                return True
            st.undo(mark)
        return False

    return branches


def generate(call: Any, plan: Any, pairs: list, swapped: list | None) -> Any:
    """The fast function of ``call`` (a ``_CCall``) at ``plan``'s target. ``pairs``:
    (argument index, pattern) in pattern order; ``swapped``: the other order of a
    commutative call, or None."""
    from ._engine import _normalized, _simple

    src = _Source()
    src.consts.update(CALL=call, PLAN=plan, normalized=_normalized, ENTRY=entry)
    src.emit("st.visits += 1")
    if call.shared:
        src.emit("if (CALL, value) in st.done:")
        src.emit("    return k()")
    src.emit("trail = st.trail")
    src.emit("binds = st.binds")
    src.emit("mark = len(trail)")
    if call.name is not None:
        name = repr(call.name)
        src.emit(f"if {name} in binds:")
        src.emit(f"    if binds[{name}] is not value:")
        src.emit("        return False")
        src.emit("else:")
        src.emit(f"    binds[{name}] = value")
        src.emit(f"    trail.append((binds, {name}))")
    if call.shared:
        src.emit("st.done[(CALL, value)] = True")
        src.emit("trail.append((st.done, (CALL, value)))")
    src.emit("ns = st.node_set")
    src.emit("if value not in ns:")
    src.emit("    st.nodes.append(value)")
    src.emit("    ns.add(value)")
    src.emit("    trail.append((None, None))")
    if plan.missing is not None:
        src.emit("st.undo(mark)")
        src.emit("return False")
    else:
        read = "PLAN.read(value)" if plan.reads is not None else "normalized(value, st.norm)"
        if plan.direct:
            src.emit(f"args = value.{_ARGS}")
            if plan.need:
                src.emit(f"if {plan.need} > len(args):")
                src.emit(f"    args = {read}")
                src.emit(f"    if {plan.need} > len(args):")
                src.emit("        st.undo(mark)")
                src.emit("        return False")
        else:
            src.emit(f"args = {read}")
            if plan.need:
                src.emit(f"if {plan.need} > len(args):")
                src.emit("    st.undo(mark)")
                src.emit("    return False")
        ways = [pairs] + ([swapped] if swapped is not None else [])
        for n, ps in enumerate(ways):
            if n:
                src.emit("st.undo(inner)")
            elif len(ways) > 1:
                src.emit("inner = len(trail)")
            simple = [(i, p) for i, p in ps if _simple(p)]
            rest = [(i, p, _first_set(p)) for i, p in ps if not _simple(p)]
            _variant(src, simple, rest)
        src.emit("st.undo(mark)")
        src.emit("return False")
    return _define(src, "fast", f"<graphfuse fast {label(call.pat)}>")


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


def _define(src: _Source, name: str, filename: str) -> Any:
    """The function ``name(value, st, where, k)`` whose body ``src`` holds."""
    body = "\n".join(src.lines)
    code = f"def {name}(value, st, where, k):\n{body}\n"
    scope = dict(src.consts)
    exec(compile(code, filename, "exec"), scope)
    fn = scope[name]
    fn.source = code
    return fn
