"""Why a match failed, as a cheap record turned into a sentence only when asked."""

from __future__ import annotations

from typing import Any

from torch import fx

from .. import dsl
from . import args, dims


def _name(value: Any) -> str:
    return value.name if isinstance(value, fx.Node) else repr(value)


def _what(value: Any) -> str:
    if isinstance(value, fx.Node):
        if value.op == "call_function":
            return f"{value.name} ({dsl.target_repr(value.target)})"
        if value.op == "output":
            return "the graph's output"
        return f"{value.name} (a {value.op})"
    return f"the constant {value!r}"


def _arg(where: tuple | None) -> str:
    if where is None:
        return "the value"
    node, i = where
    spec = args.arg_spec(node.target)
    label = spec.names[i] if spec is not None and i < len(spec.names) else f"#{i}"
    return f"argument {label!r} of {node.name}"


class Failure:
    """A failed condition: ``kind`` plus the raw values; ``str()`` builds the sentence.

    ``node`` is where the failure happened (reports say ``rule R at NODE: reason``).
    """

    __slots__ = ("kind", "info", "_node")

    def __init__(self, kind: str, info: tuple, node: fx.Node | None = None) -> None:
        self.kind, self.info, self._node = kind, info, node

    @property
    def node(self) -> fx.Node | None:
        if self._node is not None:
            return self._node
        k, info = self.kind, self.info
        if k in ("target", "no_arg", "arity", "no_meta", "dtype", "device", "rank", "size"):
            return info[0]
        if k == "escape":
            return info[0]
        if k in ("literal", "not_call", "kind"):
            where = info[0] if k != "kind" else info[3]
            return where[0] if where else None
        return None

    def __str__(self) -> str:
        return _FORMAT[self.kind](*self.info)

    def __repr__(self) -> str:
        return f"Failure({self.kind!r}: {self})"


def _fmt_target(node: fx.Node, pat: Any) -> str:
    want = ", ".join(dsl.target_repr(t) for t in pat.targets)
    return f"{_what(node)} is not a call of {want}"


def _fmt_size(node: fx.Node, size: Any, name: Any, prev: Any) -> str:
    if prev is None:
        return f"{node.name} has a dim of size {dims.show_size(size)}; the pattern needs {name}"
    return (
        f"{node.name} has {name} = {dims.show_size(size)}, but {name} = {dims.show_size(prev)} "
        "elsewhere in the match"
    )


_FORMAT = {
    "target": _fmt_target,
    "not_call": lambda where, value, pat: (
        f"{_arg(where)} is {_what(value)}; the pattern needs a call of "
        + ", ".join(dsl.target_repr(t) for t in pat.targets)
    ),
    "literal": lambda where, value, want: f"{_arg(where)} is {value!r}; the pattern needs {want!r}",
    "no_arg": lambda node, key: f"{node.name} has no argument {key!r}",
    "arity": lambda node, n, pat: f"{node.name} has {n} arguments; the pattern needs more",
    "rebind": lambda name, old, new: f"{name} would be both {_name(old)} and {_name(new)}",
    "kind": lambda name, value, kind, where: f"{name} is {_what(value)}, not {kind}",
    "no_meta": lambda node: f"{_what(node)} has no tensor meta['val']",
    "dtype": lambda node, got, want: (
        f"{node.name} has dtype {got}; the pattern needs {' or '.join(str(w) for w in want)}"
    ),
    "device": lambda node, got, want: f"{node.name} is on {got}; the pattern needs {want}",
    "rank": lambda node, got, want: f"{node.name} has rank {got}; the pattern needs rank {want}",
    "size": _fmt_size,
    "escape": lambda node, user: f"{_what(node)} is also used by {_what(user)} outside the match",
    "check": lambda text: text,
    "message": lambda template, values: template.format(**values),
}
