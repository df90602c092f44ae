"""Applying one match: build the replacement, validate it, splice it in, or change nothing.

Safety, all local to the match:
- an intermediate with a real user outside the match blocks the rewrite (checked again
  right before splicing, since earlier rewrites may have added users);
- new nodes go right before the earliest root, after every input, so order stays
  topological; for several roots, a bounded search between the earliest root and the
  latest input proves that no input depends on a root (no cycle);
- the replacement's values must have the roots' shapes and dtypes;
- if anything fails, the nodes created so far are erased and the graph is as it was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import fx

from ._dims import same_size
from ._errors import RewriteError
from ._failure import Failure
from ._fake import FakePropagator
from ._fxedit import create_call, erase
from ._match_rule import escape_of
from ._matcher import is_metadata_assert

if TYPE_CHECKING:
    from ._match import Match

_COPIED_META = ("stack_trace", "nn_module_stack", "source_fn_stack", "torch_fn", "custom")


class Builder:
    """Creates the replacement's nodes (passed to a rule's ``rewrite``).

    Example (inside a rewrite)::

        return b.call(torch.ops.graphfuse.fp8_static_quant.default, m["x"], m["s"])
    """

    def __init__(self, graph: fx.Graph, meta_from: fx.Node, fake: FakePropagator) -> None:
        self.graph = graph
        self.created: list[fx.Node] = []
        self._meta_from = meta_from
        self._fake = fake

    def call(self, target: Any, *args: Any, **kwargs: Any) -> fx.Node:
        """Add a call of ``target`` (an ``OpOverload`` or a Python callable) and return it.

        Its ``meta["val"]`` comes from the op's fake impl; source metadata
        (``stack_trace``, ``nn_module_stack``, ``source_fn_stack``) from the match's root.
        """
        if isinstance(target, torch._ops.OpOverloadPacket):
            target = target.default
        node = create_call(self.graph, target, tuple(args), dict(kwargs))
        self.created.append(node)
        src, meta = self._meta_from.meta, node.meta
        for key in _COPIED_META:
            if key in src:
                meta[key] = src[key]
        val = self._fake(target, node.args, node.kwargs)
        if val is not None:
            node.meta["val"] = val
        return node

    def getitem(self, node: fx.Node, index: int) -> fx.Node:
        """Output ``index`` of a multi-output node."""
        import operator

        return self.call(operator.getitem, node, index)


def _as_tuple(out: Any, n: int, rule: str) -> tuple[fx.Node, ...]:
    outs = out if isinstance(out, (tuple, list)) else (out,)
    if len(outs) != n or not all(isinstance(o, fx.Node) for o in outs):
        raise RewriteError(
            f"rule {rule}: the rewrite must return {n} node(s), one per root; got {out!r}"
        )
    return tuple(outs)


def _same_value_type(new: Any, old: Any) -> str | None:
    if isinstance(old, torch.Tensor):
        if not isinstance(new, torch.Tensor):
            return f"a {type(new).__name__} where the graph had a tensor"
        if new.dtype != old.dtype:
            return f"dtype {new.dtype} where the graph had {old.dtype}"
        if new.dim() != old.dim() or not all(map(same_size, new.shape, old.shape)):
            return f"shape {list(new.shape)} where the graph had {list(old.shape)}"
        return None
    if isinstance(old, (tuple, list)):
        if not isinstance(new, (tuple, list)) or len(new) != len(old):
            return "a different number of outputs"
        for a, b in zip(new, old):
            why = _same_value_type(a, b)
            if why:
                return why
    return None


def _depends_on_roots(inputs: list[fx.Node], roots: tuple[fx.Node, ...]) -> fx.Node | None:
    """An input that (transitively) uses a root, searching only nodes after the earliest
    root: a descendant of a root comes after it in a topologically ordered graph."""
    lo = min(r._sort_key for r in roots)
    root_set = set(roots)
    stack = [n for n in inputs if n._sort_key > lo]
    seen: set[fx.Node] = set()
    while stack:
        n = stack.pop()
        if n in root_set:
            return n
        if n in seen:
            continue
        seen.add(n)
        stack.extend(a for a in n.all_input_nodes if a._sort_key >= lo)
    return None


def alive(m: Match) -> bool:
    """False when an earlier rewrite removed a node this match holds."""
    return not any(n._erased for n in m.nodes) and not any(
        isinstance(v, fx.Node) and v._erased for v in m.binds.values()
    )


def apply_match(m: Match, graph: fx.Graph, fake: FakePropagator) -> Failure | list[fx.Node]:
    """Rewrite one match in place and return the nodes it created. Returns a Failure
    (graph unchanged) when the rewrite is no longer safe; raises :class:`RewriteError`
    (graph unchanged) when the rule's rewrite is broken."""
    escape = escape_of(m.nodes, m.roots, m.node_set)
    if escape is not None:
        return escape
    inputs = m.inputs()
    anchor = min(m.roots, key=lambda r: r._sort_key)
    if len(m.roots) > 1:
        late = [i for i in inputs if i._sort_key > anchor._sort_key]
        if late:
            bad = _depends_on_roots(late, m.roots)
            if bad is not None:
                return Failure("check", (f"the rewrite would create a cycle through {bad.name}",))
            return Failure(
                "check", (f"input {late[0].name} comes after {anchor.name}; needs reordering",)
            )
    builder = Builder(graph, m.root, fake)
    try:
        with graph.inserting_before(anchor):
            out = m.rule.rewrite(m, builder)
        news = _as_tuple(out, len(m.roots), m.rule.name)
        _validate(m, builder, news)
    except Exception as exc:
        for node in reversed(builder.created):
            graph.erase_node(node)
        if isinstance(exc, RewriteError):
            raise
        raise RewriteError(
            f"rule {m.rule.name} at {m.root.name}: the rewrite raised "
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        ) from exc
    for root, new in zip(m.roots, news):
        if new is not root:
            root.replace_all_uses_with(new)
    _erase_matched(m, graph, set(news))
    return builder.created


def _validate(m: Match, builder: Builder, news: tuple[fx.Node, ...]) -> None:
    removed = m.node_set - set(news)
    for node in builder.created:
        for inp in node.all_input_nodes:
            if inp in removed:
                raise RewriteError(
                    f"rule {m.rule.name} at {m.root.name}: the replacement uses {inp.name}, "
                    "which the match removes; bind it as an input instead"
                )
    for root, new in zip(m.roots, news):
        old_val, new_val = root.meta.get("val"), new.meta.get("val")
        if old_val is None or new_val is None:
            continue
        why = _same_value_type(new_val, old_val)
        if why:
            raise RewriteError(f"rule {m.rule.name} at {root.name}: the replacement has {why}")


def _erase_matched(m: Match, graph: fx.Graph, keep: set[fx.Node]) -> None:
    doomed = [n for n in m.nodes if n not in keep]
    asserts = [u for n in doomed for u in n.users if is_metadata_assert(u)]
    if asserts:
        erase(graph, list(dict.fromkeys(asserts)))
    doomed.sort(key=lambda x: x._sort_key, reverse=True)
    erase(graph, doomed, unused_only=True)
