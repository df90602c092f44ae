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
from typing import TYPE_CHECKING, Any

import torch
from torch import fx

from ._dims import same_size
from ._errors import RewriteError
from ._failure import Failure
from ._fake import _MISSING, FakePropagator
from ._fxedit import _map_arg, create_call, erase, inserting_before, replace_uses
from ._match_rule import escape_of
from ._matcher import is_metadata_assert

if TYPE_CHECKING:
    from ._match import Match

_COPIED_META = ("stack_trace", "nn_module_stack", "source_fn_stack", "torch_fn", "custom")
_PACKET = torch._ops.OpOverloadPacket
_SORT_KEY = operator.attrgetter("_sort_key")
_INT = frozenset((int,))


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
        if isinstance(target, _PACKET):
            target = target.default
        graph, fake = self.graph, self._fake
        # nodes of this graph and plain scalars (a fused call's arguments): one scan for
        # the foreign-node check, create_call's and the fake cache key
        kargs = None if kwargs else fake.scan(args, graph)
        if kargs is None:
            foreign = _first_foreign(args, kwargs, graph)
            if foreign is not None:
                raise RewriteError(
                    f"the replacement's argument {foreign.name} is a node of another graph"
                )
            node = create_call(graph, target, args, kwargs)  # (a fresh tuple and dict)
        else:
            node = create_call(graph, target, args, kwargs, plain=True)
        self.created.append(node)
        src, meta = self._meta_from.meta, node.meta
        for key in _COPIED_META:
            if key in src:
                meta[key] = src[key]
        if kargs is None:
            val = fake(target, node._args, node._kwargs)  # (node.args / .kwargs)
        elif kargs is _MISSING:  # a node without a value: no fake value
            val = None
        else:
            val = fake.keyed(target, node._args, node._kwargs, kargs, ())
        if val is not None:
            meta["val"] = val
        return node

    def getitem(self, node: fx.Node, index: int) -> fx.Node:
        """Output ``index`` of a multi-output node."""
        import operator

        return self.call(operator.getitem, node, index)


def _first_foreign(args: tuple, kwargs: dict, graph: fx.Graph) -> fx.Node | None:
    """The first node among ``args`` and ``kwargs`` (in ``map_arg`` order) that is not a node
    of ``graph``, or None (the general path: plain calls are checked by ``FakePropagator.scan``)."""
    found: list[fx.Node] = []
    _map_arg((args, kwargs), lambda n: n if n.graph is graph else found.append(n))
    return found[0] if found else None


def _as_tuple(out: Any, n: int, rule: str) -> tuple[fx.Node, ...]:
    if n == 1 and type(out) is fx.Node:
        return (out,)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    if len(outs) != n or not all(isinstance(o, fx.Node) for o in outs):
        raise RewriteError(
            f"rule {rule}: the rewrite must return {n} node(s), one per root; got {out!r}"
        )
    return tuple(outs)


def _same_value_type(new: Any, old: Any, fake: FakePropagator | None = None) -> str | None:
    if isinstance(old, torch.Tensor):
        if not isinstance(new, torch.Tensor):
            return f"a {type(new).__name__} where the graph had a tensor"
        if fake is None:
            new_dtype, new_shape, new_ints = new.dtype, new.shape, None
        else:
            new_dtype, new_shape, new_ints = fake.described(new)
        old_dtype = old.dtype
        if new_dtype != old_dtype:
            return f"dtype {new_dtype} where the graph had {old_dtype}"
        old_shape = old.shape
        if new_ints and _INT.issuperset(map(type, old_shape)):  # (_same_shape, inline)
            if new_shape == old_shape:
                return None
        elif len(new_shape) == len(old_shape) and _same_shape(new_shape, old_shape):
            return None
        return f"shape {list(new_shape)} where the graph had {list(old_shape)}"
    if isinstance(old, (tuple, list)):
        if not isinstance(new, (tuple, list)) or len(new) != len(old):
            return "a different number of outputs"
        for a, b in zip(new, old):
            why = _same_value_type(a, b, fake)
            if why:
                return why
    return None


def _same_shape(a: torch.Size, b: torch.Size) -> bool:
    """Equal sizes, dim by dim (``same_size``; plain ints compared directly, SymInts never
    with ``==``, which could add a guard). Same rank assumed."""
    if _INT.issuperset(map(type, a)) and _INT.issuperset(map(type, b)):
        return a == b
    return all(map(same_size, a, b))


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


def apply_match(
    m: Match, graph: fx.Graph, fake: FakePropagator, *, escape_checked: bool = False
) -> Failure | list[fx.Node]:
    """Rewrite one match in place and return the nodes it created. Returns a Failure
    (graph unchanged) when the rewrite is no longer safe; raises :class:`RewriteError`
    (graph unchanged) when the rule's rewrite is broken.

    ``escape_checked``: the caller found ``m`` on this graph and edited nothing since
    (``match_rule`` ran the escape check), so it is not run again."""
    roots = m.roots
    if not escape_checked:
        escape = escape_of(m.nodes, roots, m.node_set)
        if escape is not None:
            return escape
    if len(roots) > 1:
        inputs = m.inputs()
        anchor = min(roots, key=_SORT_KEY)
        late = [i for i in inputs if i._sort_key > anchor._sort_key]
        if late:
            bad = _depends_on_roots(late, roots)
            if bad is not None:
                return Failure("check", (f"the rewrite would create a cycle through {bad.name}",))
            return Failure(
                "check", (f"input {late[0].name} comes after {anchor.name}; needs reordering",)
            )
    else:
        anchor = roots[0]
    created, news = replace_match(m, graph, fake, roots, anchor)
    _erase_matched(m, graph, news)
    return created


def replace_match(
    m: Match,
    graph: fx.Graph,
    fake: FakePropagator,
    roots: tuple[fx.Node, ...],
    anchor: fx.Node,
) -> tuple[list[fx.Node], tuple[fx.Node, ...]]:
    """Build the replacement of ``m`` before ``anchor``, validate it and point the users
    of ``roots`` (``m``'s roots, or the nodes of ``graph`` standing for them) at it:
    (the nodes created, the new value of each root). Erasing is the caller's."""
    rule = m.rule
    builder = Builder(graph, m.roots[0], fake)
    try:
        with inserting_before(graph, anchor):
            out = rule.rewrite(m, builder)
        news = _as_tuple(out, len(roots), rule.name)
        _validate(m, builder, news)
    except Exception as exc:
        for node in reversed(builder.created):
            graph.erase_node(node)
        if isinstance(exc, RewriteError):
            raise
        raise RewriteError(
            f"rule {rule.name} at {m.root.name}: the rewrite raised "
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        ) from exc
    for root, new in zip(roots, news):
        if new is not root:
            replace_uses(graph, root, new)
    return builder.created, news


def _validate(m: Match, builder: Builder, news: tuple[fx.Node, ...]) -> None:
    for new in news:
        if new.graph is not builder.graph:
            raise RewriteError(
                f"rule {m.rule.name} at {m.root.name}: the rewrite returned {new.name}, "
                "a node of another graph"
            )
    node_set = m.node_set  # removed: node_set less news
    for node in builder.created:
        if node_set.isdisjoint(node._input_nodes):  # (the common case: no matched node)
            continue
        for inp in node.all_input_nodes:
            if inp in node_set and inp not in news:
                raise RewriteError(
                    f"rule {m.rule.name} at {m.root.name}: the replacement uses {inp.name}, "
                    "which the match removes; bind it as an input instead"
                )
    for root, new in zip(m.roots, news):
        old_val, new_val = root.meta.get("val"), new.meta.get("val")
        if old_val is None or new_val is None:
            continue
        why = _same_value_type(new_val, old_val, builder._fake)
        if why:
            raise RewriteError(f"rule {m.rule.name} at {root.name}: the replacement has {why}")


def _erase_matched(m: Match, graph: fx.Graph, keep: tuple[fx.Node, ...]) -> None:
    """Erase the matched nodes not in ``keep`` (users first) and the metadata asserts on
    them. Their users are matched nodes or asserts (the escape check), so only users
    outside the match are asserts to look at."""
    node_set = m.node_set
    if len(keep) == 1:  # (``is``: comparing nodes with ``==`` runs their rich compare)
        kept = keep[0]
        doomed = [n for n in m.nodes if n is not kept]
    else:
        keep_set = set(keep)
        doomed = [n for n in m.nodes if n not in keep_set]
    asserts = [u for n in doomed for u in n.users if u not in node_set and is_metadata_assert(u)]
    if asserts:
        erase(graph, list(dict.fromkeys(asserts)))
    # Users first: the match's order usually is (a root, then what it reads); whatever a
    # node's users kept is erased in position order, latest first.
    skipped = erase(graph, doomed, unused_only=True)
    if skipped:
        skipped.sort(key=_SORT_KEY, reverse=True)
        erase(graph, skipped, unused_only=True)
