"""A successful structural match: what the pattern bound, read by ``check`` and ``rewrite``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import fx

from ..errors import RewriteError
from .dims import holds, show_size
from .failure import Failure

if TYPE_CHECKING:
    from ..rules.rule import Rule
    from .state import State


_UNBOUND = object()


class Match:
    """The bindings of one match of ``rule``.

    ``m["x"]`` is what the capture ``x`` bound (an ``fx.Node`` or a literal);
    ``m.val("x")`` its ``meta["val"]`` (a fake tensor) or the literal;
    ``m.tag("spelling")`` the branch an :func:`~graphfuse.dsl.alt` took;
    ``m.chain("layout")`` the nodes a :func:`~graphfuse.dsl.maybe` passed through;
    ``m.dims`` the named dims (ints or sympy expressions); ``m.root`` the (first) root;
    ``m.memo`` a dict where ``check`` can leave what it derived for ``rewrite``.
    """

    __slots__ = ("rule", "roots", "binds", "tags", "dims", "chains", "nodes", "node_set", "memo")

    def __init__(
        self,
        rule: Rule,
        roots: tuple[fx.Node, ...],
        binds: dict[str, Any],
        tags: dict[str, str],
        dims: dict[str, Any],
        chains: dict[str, tuple[fx.Node, ...]],
        nodes: list[fx.Node],
    ) -> None:
        self.rule = rule
        self.roots = roots
        self.binds, self.tags, self.dims, self.chains = binds, tags, dims, chains
        self.nodes = nodes
        self.node_set = set(nodes)
        self.memo: dict[str, Any] = {}

    @classmethod
    def of_state(cls, rule: Rule, st: State) -> Match:
        """The match a search's state holds now (copied: the search may go on)."""
        binds, tags, dims, chains = dict(st.binds), dict(st.tags), dict(st.dims), dict(st.chains)
        return cls(rule, tuple(st.roots), binds, tags, dims, chains, list(st.nodes))

    @property
    def root(self) -> fx.Node:
        return self.roots[0]

    def __getitem__(self, name: str) -> Any:
        try:
            return self.binds[name]
        except KeyError:
            raise KeyError(f"rule {self.rule.name}: nothing is bound to {name!r}") from None

    def __contains__(self, name: str) -> bool:
        return name in self.binds

    def get(self, name: str, default: Any = None) -> Any:
        return self.binds.get(name, default)

    def val(self, name: str) -> Any:
        """``meta["val"]`` of the node bound to ``name`` (the literal itself otherwise)."""
        v = self.binds.get(name, _UNBOUND)
        if v is _UNBOUND:
            v = self[name]  # raises its KeyError
        return v.meta.get("val") if isinstance(v, fx.Node) else v

    def tag(self, name: str) -> str | None:
        return self.tags.get(name)

    def chain(self, name: str) -> tuple[fx.Node, ...]:
        return self.chains.get(name, ())

    def inputs(self) -> list[fx.Node]:
        """Bound nodes that are not part of the match (the replacement's inputs)."""
        return [v for v in self.binds.values() if isinstance(v, fx.Node) and v not in self.node_set]

    # -- helpers for checks -------------------------------------------------------------

    def fail(self, template: str, node: fx.Node | str | None = None, **values: Any) -> Failure:
        """A check failure; ``template`` is formatted with ``values`` only when read.

        Example: ``return m.fail("the scale has shape {shape}; the rule needs a single
        element", node="s", shape=list(m.val("s").shape))``.
        """
        where = self[node] if isinstance(node, str) else node
        return Failure("message", (template, values), where if where is not None else self.root)

    def require(self, expr: str, node: fx.Node | str | None = None) -> Failure | None:
        """None when the dim constraint ``expr`` (e.g. ``"D % 16 == 0"``) holds, else a
        failure naming the values."""
        ok = holds(expr, self.dims)
        if ok:
            return None
        values = ", ".join(f"{k} = {show_size(v)}" for k, v in self.dims.items() if k in expr)
        verdict = "does not hold" if ok is False else "cannot be proven"
        return self.fail(f"{expr} {verdict} ({values})", node)

    def single_element(self, name: str) -> Failure | None:
        """None when ``name`` is a tensor with exactly one element (a per-tensor scale)."""
        v = self.val(name)
        if isinstance(v, torch.Tensor) and v.numel() == 1:
            return None
        shape = list(v.shape) if isinstance(v, torch.Tensor) else v
        # reported at the matched node that reads the scale, not at the scale's producer
        # (often a placeholder)
        bound = self[name]
        where = next(
            (n for n in self.nodes if isinstance(bound, fx.Node) and bound in n.all_input_nodes),
            name,
        )
        return self.fail(
            "the scale {name} has shape {shape}; the rule needs a single element",
            where,
            name=self[name].name if isinstance(self[name], fx.Node) else name,
            shape=shape,
        )

    def run_check(self) -> Failure | None:
        """None when the rule's check passes, else its failure.

        Raises:
            RewriteError: the check raised (the message names the rule and the node).
        """
        check = self.rule.check
        if check is None:
            return None
        try:
            result = check(self)
        except Exception as exc:
            detail = str(exc).splitlines()[0] if str(exc) else ""
            raise RewriteError(
                f"rule {self.rule.name} at {self.root.name}: the check raised "
                f"{type(exc).__name__}: {detail}"
            ) from exc
        if result is None or result is True:
            return None
        if isinstance(result, Failure):
            return result
        if result is False:
            return Failure("check", ("the rule's check returned False",), self.root)
        return Failure("check", (str(result),), self.root)
