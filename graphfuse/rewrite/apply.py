"""Applying one match: build the replacement, validate it, splice it in, or change nothing.

Safety, all local to the match:
- an intermediate with a real user outside the match blocks the rewrite (checked again
  right before splicing unless the caller matched on the unchanged graph just before);
- new nodes go right before the earliest root, after every input, so order stays
  topological; for several roots, a bounded search between the earliest root and the
  latest input proves that no input depends on a root (no cycle);
- the replacement's values must have the roots' shapes and dtypes;
- if anything fails, the nodes created so far are erased and the graph is as it was.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from torch import fx

from ..errors import RewriteError
from ..fxnodes import is_metadata_assert
from ..match import Failure, Match, escape_of
from ..match.dims import same_size
from .builder import Builder
from .edits import erase
from .fake import FakePropagator

# a node's position: fx keeps every node's place in the graph as a sort key
_position: Callable[[fx.Node], Any] = operator.attrgetter("_sort_key")


def apply_match(
    m: Match, graph: fx.Graph, fake: FakePropagator, *, escape_checked: bool = False
) -> Failure | list[fx.Node]:
    """Rewrite one match in place and return the nodes it created.

    Returns a Failure (graph unchanged) when the rewrite is no longer safe; raises
    :class:`RewriteError` (graph unchanged) when the rule's rewrite is broken.
    ``escape_checked``: the caller found ``m`` on this graph and edited nothing since.
    """
    roots = m.roots
    if not escape_checked:
        escape = escape_of(m)
        if escape is not None:
            return escape
    anchor = min(roots, key=_position)
    if len(roots) > 1:
        late = [i for i in m.inputs() if _position(i) > _position(anchor)]
        if late:
            bad = _depends_on_roots(late, roots)
            if bad is not None:
                return Failure("check", (f"the rewrite would create a cycle through {bad.name}",))
            return Failure(
                "check", (f"input {late[0].name} comes after {anchor.name}; needs reordering",)
            )
    builder = Builder(graph, roots[0], fake)
    try:
        with graph.inserting_before(anchor):
            out = m.rule.rewrite(m, builder)
        news = _as_tuple(out, len(roots), m.rule.name)
        _validate(m, builder, news)
    except Exception as exc:
        for node in reversed(builder.created):
            graph.erase_node(node)
        if isinstance(exc, RewriteError):
            raise
        detail = str(exc).splitlines()[0] if str(exc) else ""
        raise RewriteError(
            f"rule {m.rule.name} at {m.root.name}: the rewrite raised "
            f"{type(exc).__name__}: {detail}"
        ) from exc
    for root, new in zip(roots, news):
        if new is not root:
            root.replace_all_uses_with(new)
    _erase_matched(m, graph, news)
    return builder.created


def _as_tuple(out: Any, n: int, rule: str) -> tuple[fx.Node, ...]:
    outs = out if isinstance(out, (tuple, list)) else (out,)
    if len(outs) != n or not all(isinstance(o, fx.Node) for o in outs):
        raise RewriteError(
            f"rule {rule}: the rewrite must return {n} node(s), one per root; got {out!r}"
        )
    return tuple(outs)


def same_value_type(new: Any, old: Any) -> str | None:
    """None when ``new`` (a fake value) has ``old``'s dtype and shape, else what differs."""
    if isinstance(old, torch.Tensor):
        if not isinstance(new, torch.Tensor):
            return f"a {type(new).__name__} where the graph had a tensor"
        if new.dtype != old.dtype:
            return f"dtype {new.dtype} where the graph had {old.dtype}"
        if len(new.shape) != len(old.shape) or not all(map(same_size, new.shape, old.shape)):
            return f"shape {list(new.shape)} where the graph had {list(old.shape)}"
        return None
    if isinstance(old, (tuple, list)):
        if not isinstance(new, (tuple, list)) or len(new) != len(old):
            return "a different number of outputs"
        for a, b in zip(new, old):
            why = same_value_type(a, b)
            if why:
                return why
    return None


def _depends_on_roots(inputs: list[fx.Node], roots: tuple[fx.Node, ...]) -> fx.Node | None:
    """An input that (transitively) uses a root, searching only nodes after the earliest
    root: a descendant of a root comes after it in a topologically ordered graph."""
    lo = min(_position(r) for r in roots)
    root_set = set(roots)
    stack = [n for n in inputs if _position(n) > lo]
    seen: set[fx.Node] = set()
    while stack:
        n = stack.pop()
        if n in root_set:
            return n
        if n in seen:
            continue
        seen.add(n)
        stack.extend(a for a in n.all_input_nodes if _position(a) >= lo)
    return None


def _validate(m: Match, builder: Builder, news: tuple[fx.Node, ...]) -> None:
    for new in news:
        if new.graph is not builder.graph:
            raise RewriteError(
                f"rule {m.rule.name} at {m.root.name}: the rewrite returned {new.name}, "
                "a node of another graph"
            )
    for node in builder.created:
        for inp in node.all_input_nodes:
            if inp in m.node_set and inp not in news:
                raise RewriteError(
                    f"rule {m.rule.name} at {m.root.name}: the replacement uses {inp.name}, "
                    "which the match removes; bind it as an input instead"
                )
    for root, new in zip(m.roots, news):
        old_val, new_val = root.meta.get("val"), new.meta.get("val")
        if old_val is None or new_val is None:
            continue
        why = same_value_type(new_val, old_val)
        if why:
            raise RewriteError(f"rule {m.rule.name} at {root.name}: the replacement has {why}")


def _erase_matched(m: Match, graph: fx.Graph, keep: tuple[fx.Node, ...]) -> None:
    """Erase the matched nodes not in ``keep`` and the metadata asserts on them, latest
    first (a node's users come after it, and every user is matched or an assert)."""
    node_set = m.node_set
    doomed = [n for n in m.nodes if n not in keep]
    asserts = {
        u
        for n in doomed
        if not node_set.issuperset(n.users)
        for u in n.users
        if u not in node_set and is_metadata_assert(u)
    }
    doomed.extend(asserts)
    doomed.sort(key=_position, reverse=True)
    erase(graph, (n for n in doomed if not n.users))  # (checked as it goes: users go first)
