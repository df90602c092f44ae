"""A rule's pattern as an indented tree of plain lines (``patterns --show``, ``explain``).

Each line is one place of the pattern: a call (its target or targets), a capture, a
literal, an alternative and its tagged branches, a ``maybe`` chain, a type test. A
line's *key* is the place's index path (see :mod:`graphfuse.match.explain`), so what the
matcher reached can be written beside it. A sub-pattern used in several places (one
Python value) is written out once, numbered, and referred to after that.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from torch import fx

from .. import dsl as P

Key = tuple[int, ...]
_NONE = object()  # a place the matcher did not reach


@dataclass
class Line:
    """One place of a pattern: ``label`` (with ``prefix`` such as ``min=`` or ``div:``),
    its key, its children, and the keys it stands for (a tensor capture with type tests
    is one line for two places)."""

    key: Key
    prefix: str
    label: str
    pat: P.Pattern
    children: list[Line] = field(default_factory=list)
    keys: tuple[Key, ...] = ()


def _targets(targets: tuple) -> str:
    names = [P.target_repr(t) for t in targets]
    return names[0] if len(names) == 1 else "{" + ", ".join(names) + "}"


def _leaf(pat: P.Pattern) -> bool:
    return isinstance(pat, (P.Capture, P.Literal, P.Wildcard)) or (
        isinstance(pat, P.ListOf) and all(_leaf(i) for i in pat.items)
    )


def _label(pat: P.Pattern) -> str:
    if isinstance(pat, P.Call):
        extra = (f"  name={pat.name!r}" if pat.name else "") + (
            "  commutative" if pat.commutative else ""
        )
        return _targets(pat.targets) + extra
    if isinstance(pat, P.Alt):
        return f"alt {pat.name!r}" if pat.name else "alt"
    if isinstance(pat, P.Maybe):
        label = "maybe [" + ", ".join(P.target_repr(t) for t in pat.targets) + "]"
        if pat.name:
            label += f"  name={pat.name!r}"
        if pat.where is not None:
            label += f"  where={getattr(pat.where, '__name__', repr(pat.where))}"
        return label
    if isinstance(pat, P.Typed):
        tests = repr(P.Typed(P._, pat.dtype, pat.rank, pat.shape, pat.device))
        tests = tests[len("P.typed(P._, ") : -1]
        if _tensor_test(pat):
            return f"P.tensor({pat.inner.name!r}, {tests})"
        return f"typed {tests}"
    return repr(pat)  # captures, literals, the wildcard, lists of them


def _children(pat: P.Pattern) -> list[tuple[str, P.Pattern]]:
    if isinstance(pat, P.Call):
        return [("", a) for a in pat.args] + [(f"{k}=", v) for k, v in pat.kwargs]
    if isinstance(pat, P.Alt):
        unnamed = pat.name is None and all(t == str(i) for i, (t, _) in enumerate(pat.branches))
        return [("| " if unnamed else f"{t}: ", b) for t, b in pat.branches]
    if isinstance(pat, (P.Maybe, P.Typed)):
        return [("", pat.inner)]
    if isinstance(pat, P.ListOf) and not _leaf(pat):
        return [("", i) for i in pat.items]
    return []


def _tensor_test(pat: P.Pattern) -> bool:
    """A tensor capture with type tests (``P.tensor("x", dtype=...)``): one line."""
    return (
        isinstance(pat, P.Typed) and isinstance(pat.inner, P.Capture) and pat.inner.kind == "tensor"
    )


def build(pat: P.Pattern, key: Key, prefix: str = "") -> Line:
    """The tree of ``pat`` at ``key``."""
    if _tensor_test(pat):
        return Line(key, prefix, _label(pat), pat, keys=(key, key + (0,)))
    line = Line(key, prefix, _label(pat), pat, keys=(key,))
    line.children = [build(p, key + (j,), pre) for j, (pre, p) in enumerate(_children(pat))]
    return line


def rule_trees(patterns: tuple[P.Pattern, ...]) -> list[Line]:
    """One tree per root pattern of a rule."""
    return [build(p, (i,)) for i, p in enumerate(patterns)]


def repeated(patterns: tuple[P.Pattern, ...]) -> set[int]:
    """Ids of the sub-patterns with children that occur more than once."""
    counts: Counter[int] = Counter()

    def count(pat: P.Pattern) -> None:
        kids = _children(pat)
        if not kids or _tensor_test(pat):
            return
        counts[id(pat)] += 1
        if counts[id(pat)] == 1:
            for _, p in kids:
                count(p)

    for p in patterns:
        count(p)
    return {i for i, n in counts.items() if n > 1}


def wrap(text: str, width: int, start: int = 0) -> list[str]:
    """``text`` cut after ", " or before "  " (at or after ``start``) into pieces of at
    most ``width`` characters where it can be (a piece longer than that stays whole)."""
    if len(text) <= width:
        return [text]
    head, rest = text[:start], text[start:]
    out, cur = [], head
    for atom in re.split(r"(?<=, )|(?=  )", rest):
        if cur.strip() and len(cur + atom.rstrip()) > width:
            out.append(cur.rstrip())
            cur = atom.lstrip()
        else:
            cur += atom
    return out + [cur.rstrip()]


def show_value(value: Any) -> str:
    """A value the matcher met: a node's name, a literal's repr."""
    if isinstance(value, fx.Node):
        return value.name
    if isinstance(value, (list, tuple)):
        inner = ", ".join(show_value(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    return repr(value)


def _wrapped(indent: int, text: str, width: int) -> list[str]:
    pieces = wrap(text, max(width - indent, 20))
    return [" " * indent + pieces[0]] + [" " * (indent + 4) + p for p in pieces[1:]]


def shown(trees: list[Line], width: int, indent: int = 0) -> list[str]:
    """The whole tree as text, ``width`` columns; a repeated sub-pattern is written once
    with a number (``[1]``) and referred to by it after that."""
    reps = repeated(tuple(t.pat for t in trees))
    numbers: dict[int, int] = {}
    out: list[str] = []
    stack = [(t, indent) for t in reversed(trees)]
    while stack:
        line, depth = stack.pop()
        text = line.prefix + line.label
        kids = line.children
        if id(line.pat) in reps:
            if id(line.pat) in numbers:
                text += f"  [{numbers[id(line.pat)]}] as above"
                kids = []
            else:
                numbers[id(line.pat)] = len(numbers) + 1
                text += f"  [{numbers[id(line.pat)]}]"
        out += _wrapped(depth, text, width)
        stack += [(k, depth + 2) for k in reversed(kids)]
    return out


@dataclass
class Row:
    """One line of an explained tree: the pattern text, what it met, and how."""

    text: str
    value: str
    state: str  # "reached", "stop", "failed" (the node a check or escape names), "unreached"


def explained(
    trees: list[Line], located: Any, failure_node: fx.Node | None = None, indent: int = 0
) -> list[Row]:
    """The tree with what the matcher met beside each place it reached; the place where it
    stopped (or, after a full match, the first place that matched ``failure_node``) is
    marked. Places it never reached are shown one level deep, their insides elided."""
    reached, stop, chains = located.reached, located.stop, located.chains
    rows: list[Row] = []
    marked = False
    stack = [(t, indent) for t in reversed(trees)]
    while stack:
        line, depth = stack.pop()
        text = " " * depth + line.prefix + line.label
        got = next((reached[k] for k in reversed(line.keys) if k in reached), _NONE)
        if stop is not None and stop in line.keys:
            value = show_value(located.stop_value)
            rows.append(Row(text, value, "stop"))
            continue
        if got is _NONE:
            rows.append(Row(text + (" …" if line.children else ""), "", "unreached"))
            continue
        value = ""
        if isinstance(line.pat, P.Maybe):
            chain = chains.get(line.key, ())
            value = "through " + ", ".join(n.name for n in chain) if chain else "no chain"
        elif isinstance(line.pat, (P.Call, P.Capture, P.Typed)):
            value = show_value(got)
        else:  # an alternative, a literal, a list, the wildcard: met
            value = "✓"
        state = "reached"
        named = isinstance(line.pat, (P.Call, P.Capture, P.Typed))
        if failure_node is not None and not marked and named and got is failure_node:
            state, marked = "failed", True
        if line.key in located.same:
            value += " (met above)"
        rows.append(Row(text, value, state))
        if line.key not in located.same:
            stack += [(k, depth + 2) for k in reversed(line.children)]
    return rows
