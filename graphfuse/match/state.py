"""The state of one search: what the pattern bound so far, with an undo trail.

Every change goes through :meth:`State.put` or :meth:`State.add_node`, which record it on
the trail; :meth:`State.undo` takes the state back to a mark. Backtracking is "remember the
trail's length, try, undo to it".
"""

from __future__ import annotations

from typing import Any

from torch import fx

from .failure import Failure

_ABSENT = object()  # a trail entry's old value where the key was not set


class Tracer:
    """Keeps the deepest failure seen while matching one candidate (for ``explain``)."""

    __slots__ = ("depth", "failure")

    def __init__(self) -> None:
        self.depth = -1
        self.failure: Failure | None = None

    def note(self, depth: int, failure: Failure) -> None:
        if depth > self.depth:  # the first failure at the deepest level
            self.depth, self.failure = depth, failure


class State:
    """Bindings of a search in progress.

    Attributes:
        binds: capture name -> node or literal.
        tags: alternative name -> tag of the branch taken.
        dims: named dim -> size.
        chains: maybe name -> the nodes it passed through (outermost first).
        nodes / node_set: the matched nodes, in the order they were matched.
        roots: the nodes each pattern of the rule matched at.
        tracer: records failures (``explain``); None skips that work.
        norm: a cache of normalized arguments shared by a sweep (see ``machine``).
        steps: goals taken so far (the search's work; tests of complexity read it).
    """

    __slots__ = ("binds", "tags", "dims", "chains", "nodes", "node_set", "roots")
    __slots__ += ("trail", "tracer", "norm", "steps")

    def __init__(self, tracer: Tracer | None = None, norm: dict | None = None) -> None:
        self.binds: dict[str, Any] = {}
        self.tags: dict[str, str] = {}
        self.dims: dict[str, Any] = {}
        self.chains: dict[str, tuple[fx.Node, ...]] = {}
        self.nodes: list[fx.Node] = []
        self.node_set: set[fx.Node] = set()
        self.roots: list[fx.Node] = []
        self.trail: list[tuple[Any, Any, Any]] = []  # (table, key, old value)
        self.tracer = tracer
        self.norm = norm
        self.steps = 0

    def mark(self) -> int:
        return len(self.trail)

    def undo(self, mark: int) -> None:
        trail = self.trail
        while len(trail) > mark:
            table, key, old = trail.pop()
            if table is None:
                self.node_set.discard(self.nodes.pop())
            elif table is self.roots:
                self.roots.pop()
            elif old is _ABSENT:
                del table[key]
            else:
                table[key] = old

    def put(self, table: dict, key: str, value: Any) -> None:
        """``table[key] = value``, undone by :meth:`undo` (a key set twice, by a named
        ``alt`` or ``maybe`` used twice in one pattern, gets its first value back)."""
        self.trail.append((table, key, table.get(key, _ABSENT)))
        table[key] = value

    def add_node(self, node: fx.Node) -> None:
        if node not in self.node_set:
            self.nodes.append(node)
            self.node_set.add(node)
            self.trail.append((None, None, None))

    def add_root(self, node: fx.Node) -> None:
        self.roots.append(node)
        self.trail.append((self.roots, None, None))

    def bind(self, name: str, value: Any, where: tuple | None) -> bool:
        """Bind ``name`` to ``value``; a name bound before must hold the same value."""
        if name in self.binds:
            old = self.binds[name]
            nodes = isinstance(old, fx.Node) or isinstance(value, fx.Node)
            same = old is value if nodes else old == value
            if not same:
                self.fail("rebind", name, old, value)
            return same
        self.put(self.binds, name, value)
        return True

    def fail(self, kind: str, *info: Any) -> None:
        """Note a failure for ``explain`` (nothing is built when nobody traces)."""
        if self.tracer is not None:
            self.tracer.note(len(self.nodes), Failure(kind, info))
