"""Entries: the function that matches a compiled pattern at a value, by the value's target.

Generated code (:mod:`graphfuse._codegen`) reaches a child pattern through its entry for
the child value's target, looked up in a table per child matcher and made here on first
use.
"""

from __future__ import annotations

from typing import Any

from torch import fx

from . import dsl as P
from ._codegen import generate, label
from ._leafcode import _define, _leaf, _Source
from ._matcher import Keys, _ids_may


def leaf_entry(pat: P.Pattern, pre: tuple | None = None) -> Any:
    """The fast function of a single-way leaf pattern (a typed capture reached by an
    ``alt`` branch, say): the leaf inline, then ``k()``; ``pre``: as for
    :func:`generate`."""
    src = _Source()
    src.emit("trail = st.trail")
    src.emit("binds = st.binds")
    src.emit("mark = len(trail)")
    _wrappers(src, pre)
    src.emit("for _ in ONCE:")
    src.depth += 1
    _leaf(src, pat, "value", "where")
    src.flush()
    src.emit("if k():")
    src.emit("    return True")
    src.depth -= 1
    src.emit("st.undo(mark)")
    src.emit("return False")
    return _define(src, "leaf", f"<graphfuse leaf {label(pat)}>")


def _wrappers(src: _Source, pre: tuple | None) -> None:
    """What the wrappers of a resolution record before the final matcher (``pre``: its
    tags, empty chains and wrappers skipped; see ``_wrappers._resolution``), undone with
    the final matcher's own changes (after ``trail`` and ``mark``)."""
    if pre is None:
        return
    tags, chains, skipped = pre
    for table, pairs in (("st.tags", tags), ("st.chains", tuple((n, ()) for n in chains))):
        if pairs:
            src.emit(f"table = {table}")
        if len(pairs) > 1 and len(dict(pairs)) == len(pairs):  # one step, undone together
            src.emit(f"table.update({src.const(dict(pairs), 'TV')})")
            src.emit(f"trail.append((table, {src.const(Keys(n for n, _ in pairs), 'TK')}))")
            continue
        for name, value in pairs:
            src.emit(f"table[{name!r}] = {value!r}")
            src.emit(f"trail.append((table, {name!r}))")
    src.visit(skipped)


# --------------------------------------------------------------------------- entries
# The function that matches a compiled pattern at a call node depends on the node's
# target only: a call's generated function for that target; for an ``alt`` or ``maybe``
# resolved by the target (see ``_wrappers._resolution``), the final matcher's entry behind
# the tags, chains and visits the wrappers record; for an ``alt`` with several branches
# at the target, those branches' entries in turn. Cached per (matcher, target) in a
# table: the matcher's own (``matcher.table``, where a target the pattern cannot start at
# costs a visit, as walking into it would), or, for generated code, one per child
# matcher in ``_TABLES`` where such a target gives None (no visit: the first-set test).


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
    from ._engine import _CCall
    from ._wrappers import _FAIL, _CAlt, _CMaybe, _resolution

    kind = type(matcher)
    if not (isinstance(value, fx.Node) and value.op == "call_function"):
        # not a call: resolutions depend on that alone (``_resolution`` keys them by None)
        if kind is _CCall:
            return _failing(1)
    elif kind is _CCall:
        plan = matcher.plan_for(value.target)
        return _failing(1) if plan is None else plan.code()
    if kind is not _CAlt and kind is not _CMaybe:
        return getattr(matcher, "leaf", None) or matcher.fast
    final, tags, chains, skipped = _resolution(matcher, value)
    if final is _FAIL:
        return _failing(skipped)
    if final is not matcher:
        pre = (tags, chains, skipped)
        if type(final) is _CCall and isinstance(value, fx.Node) and value.op == "call_function":
            plan = final.plan_for(value.target)
            if plan is not None and plan.swapped is None:  # (a commutative call: not merged)
                return generate(final, plan, plan.pairs, None, pre)
        leaf = getattr(final, "leaf", None)
        if leaf is not None and hasattr(final, "pat"):
            return leaf_entry(final.pat, pre)
        if not tags and not chains:  # (the wrappers' visits with the final's own)
            if type(final) is _CAlt:
                return _branches(final, value, skipped)
            if type(final) is _CMaybe:
                return final.walker(True, 1 + skipped)
        return _resolved(_entry_for(final, value), tags, chains, skipped)
    if kind is _CMaybe:
        return matcher.walker(True, 1)  # (no Python trampoline)
    return _branches(matcher, value)


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
    src.emit("trail = st.trail")
    src.emit("mark = len(trail)")
    _wrappers(src, (tags, chains, skipped))
    src.flush()
    src.emit(f"if {fn_name}(value, st, where, k):")
    src.emit("    return True")
    src.emit("st.undo(mark)")
    src.emit("return False")
    return _define(src, "tagged", f"<graphfuse tags {tags!r:.40} {chains!r:.40}>")


def _branches(alt: Any, value: Any, skipped: int = 0) -> Any:
    """An ``alt`` with several branches that may start at ``value``'s target: each
    branch's entry in turn (tagged with its branch where the alt is named); ``skipped``:
    the visits of the wrappers resolved in front of it."""
    ways = tuple((tag, _entry_for(branch, value)) for tag, branch, _ in alt._fast_branches(value))
    name, visits = alt.name, 1 + skipped

    def branches(value: Any, st: Any, where: Any, k: Any) -> bool:
        st.visits += visits
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
