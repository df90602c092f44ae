"""Rules (pattern + check + rewrite) and rule sets (named, combinable with ``+``)."""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import repeat
from typing import TYPE_CHECKING, Any

import torch

from . import dsl as P

if TYPE_CHECKING:
    from ._match import Match
    from ._rewriter import Builder

CheckFn = Callable[["Match"], Any]
RewriteFn = Callable[["Match", "Builder"], Any]


def _caller_location(depth: int) -> tuple[str, int]:
    frame = sys._getframe(depth)
    return frame.f_code.co_filename, frame.f_lineno


def anchor_targets(pat: P.Pattern) -> tuple:
    """The op targets a pattern's root can be, used to index candidates."""
    if isinstance(pat, P.Call):
        return pat.targets
    if isinstance(pat, P.Typed):
        return anchor_targets(pat.inner)
    if isinstance(pat, P.Alt):
        return tuple(t for _, b in pat.branches for t in anchor_targets(b))
    if isinstance(pat, P.Maybe):
        return pat.targets + anchor_targets(pat.inner)
    raise ValueError(f"a rule's pattern must be rooted at an op call, not {pat!r}")


def _collect_targets(pat: Any, out: set[Any], seen: set[int] | None = None) -> None:
    """Every op target anywhere in ``pat`` (shared sub-patterns are visited once)."""
    seen = set() if seen is None else seen
    if id(pat) in seen:
        return
    seen.add(id(pat))
    if isinstance(pat, (P.Call, P.Maybe)):
        out.update(pat.targets)
    children: list[Any] = []
    if isinstance(pat, P.Call):
        children = list(pat.args) + [a for _, a in pat.kwargs]
    elif isinstance(pat, (P.Maybe, P.Typed)):
        children = [pat.inner]
    elif isinstance(pat, P.Alt):
        children = [b for _, b in pat.branches]
    elif isinstance(pat, P.ListOf):
        children = list(pat.items)
    for child in children:
        _collect_targets(child, out, seen)


_SORT_KEY = operator.attrgetter("_sort_key")  # a node's position (one read a node)
_NODE_OF = operator.itemgetter(1)


def _pairs(nodes: list, rules: tuple) -> list:
    """(rule, node) for each node in order, each node's ``rules`` in order (built in C)."""
    if len(rules) == 1:
        return list(zip(repeat(rules[0]), nodes))
    out: list = [None] * (len(rules) * len(nodes))
    for j, r in enumerate(rules):
        out[j :: len(rules)] = zip(repeat(r), nodes)
    return out


@dataclass(frozen=True, eq=False)
class Rule:
    """One fusion: ``pattern`` (structure) + ``check`` (conditions) + ``rewrite``.

    Args:
        name: unique within a rule set; reports use it.
        pattern: a :mod:`graphfuse.dsl` pattern, or a tuple of them for a multi-output
            match (the first is the anchor; the rest are found among users of its nodes).
        rewrite: ``rewrite(match, builder)`` builds the replacement with
            ``builder.call(...)`` and returns the new node (a tuple for several roots).
            It must have no side effects.
        check: ``check(match)`` returns None when the rewrite may happen, else a reason
            (``match.fail(...)``, a string, or False).
        priority: higher rules win overlaps; ties go to the earlier root in the graph.
        doc: one line for ``graphfuse patterns``.
        local: declares that ``check``, ``rewrite`` and the pattern's ``where``
            predicates read only the match: its nodes (their arguments included), its
            bindings and their metadata, never the graph around it (the users or producers
            of a bound input). A rule set whose rules are all local is matched on the
            unmodified input and its output built in one pass, which skips copying and
            erasing what the matches replace (docs/dsl.md, "Local rules"); the result is
            the same as rewriting match by match, and where that cannot be shown the
            runner falls back to it.

    Example::

        rule = Rule("fp8_quant", pattern=quant, rewrite=lambda m, b: b.call(
            torch.ops.graphfuse.fp8_static_quant.default, m["x"], m["s"]))
    """

    name: str
    pattern: P.Pattern | tuple[P.Pattern, ...]
    rewrite: RewriteFn
    check: CheckFn | None = None
    priority: int = 0
    doc: str = ""
    local: bool = False
    location: tuple[str, int] = field(default=("", 0), compare=False)
    # ``pattern`` as a tuple (one pattern per root), made once: matching reads it at every
    # candidate
    patterns: tuple[P.Pattern, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.location == ("", 0):
            object.__setattr__(self, "location", _caller_location(3))
        pats = self.pattern if isinstance(self.pattern, tuple) else (self.pattern,)
        object.__setattr__(self, "patterns", pats)
        for p in self.patterns:
            if not isinstance(p, P.Pattern):
                raise TypeError(f"rule {self.name}: pattern must be a dsl Pattern, got {p!r}")
        anchor_targets(self.patterns[0])
        if not self.doc:
            fn_doc = (getattr(self.rewrite, "__doc__", None) or "").strip()
            object.__setattr__(self, "doc", fn_doc.splitlines()[0] if fn_doc else "")

    @property
    def where(self) -> str:
        """``file:line`` where the rule was defined."""
        return f"{self.location[0]}:{self.location[1]}"

    def __repr__(self) -> str:
        return f"Rule({self.name!r}, defined at {self.where})"


class RuleSet:
    """A named, ordered collection of rules, indexed once by root op target.

    Rule sets combine with ``+``; names must stay unique.

    Example::

        mine = RuleSet("mine", [rule_a, rule_b]) + graphfuse.load_patterns("trtllm")
    """

    def __init__(self, name: str, rules: Iterable[Rule] = (), *, doc: str = "") -> None:
        self.name = name
        self.rules: tuple[Rule, ...] = tuple(rules)
        self.doc = doc
        names = [r.name for r in self.rules]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"rule set {name}: duplicate rule names {dup}")
        # ids of every target some pattern names (targets compare by identity; hashing an
        # OpOverload runs Python code), with the targets kept alive
        self._mentioned: tuple[frozenset[int], set[Any]] | None = None
        self._exact: dict[Any, list[Rule]] = {}
        self._packets: dict[Any, list[Rule]] = {}
        self._ranked: tuple[int, dict[Rule, int], dict[int, tuple]] | None = None  # _ranks
        for rule in self.rules:
            for t in dict.fromkeys(anchor_targets(rule.patterns[0])):
                table = self._packets if isinstance(t, torch._ops.OpOverloadPacket) else self._exact
                table.setdefault(t, []).append(rule)

    def mentions(self, target: Any) -> bool:
        """True when some pattern of the set could match a call of ``target`` (so a
        rewrite that creates one needs a full sweep after it)."""
        if self._mentioned is None:
            found: set[Any] = set()
            seen: set[int] = set()
            for rule in self.rules:
                for p in rule.patterns:
                    _collect_targets(p, found, seen)
            self._mentioned = (frozenset(map(id, found)), found)
        ids = self._mentioned[0]
        return id(target) in ids or id(getattr(target, "overloadpacket", None)) in ids

    def __add__(self, other: RuleSet) -> RuleSet:
        return RuleSet(f"{self.name}+{other.name}", self.rules + other.rules)

    def __iter__(self) -> Iterator[Rule]:
        return iter(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    def __getitem__(self, name: str) -> Rule:
        for r in self.rules:
            if r.name == name:
                return r
        raise KeyError(f"rule set {self.name} has no rule {name!r}")

    def __repr__(self) -> str:
        return f"RuleSet({self.name!r}, {len(self.rules)} rules)"

    def sweep_order(self, graph: torch.fx.Graph) -> list[tuple[Rule, torch.fx.Node]]:
        """The candidates, each once, in the order a sweep visits them: higher rule
        priority first, then position in the graph, then the rule's place in the set."""
        # Not one sort of (priority, position, place) keys, nor a Python step per pair
        # (about 10 us a block in Inductor's IR, most of a sweep's bookkeeping): each
        # target's nodes sorted by position (one key a node: a node has one target),
        # dealt into the lists of its rules' priorities; a priority that one target feeds
        # is those nodes with that target's rules; one that several feed, those pairs
        # merged by position (a node has one target: the lists are disjoint).
        levels = self._ranks()[0]
        dealt: list[list[tuple[list, tuple]]] = [[] for _ in range(levels)]
        for target, by_level in self._targets():
            nodes = graph.find_nodes(op="call_function", target=target, sort=False)
            if nodes:
                nodes = sorted(nodes, key=_SORT_KEY)
                for level, rules in by_level:
                    dealt[level].append((nodes, rules))
        out: list[tuple[Rule, torch.fx.Node]] = []
        for feeds in dealt:
            if len(feeds) == 1:
                out += _pairs(*feeds[0])
            elif feeds:
                merged: list[tuple[Rule, torch.fx.Node]] = []
                for nodes, rules in feeds:
                    merged += _pairs(nodes, rules)
                out += sorted(merged, key=_NODE_OF)  # (stable: a node's rules stay in order)
        return out

    def _targets(self) -> list[tuple[Any, tuple]]:
        """(target, ((priority rank, its rules in set order), ...)) for each target the
        set is indexed by (a packet by its overloads, looked up now), each target once:
        one named both exactly and through its packet has both tables' rules, each once."""
        _, place, ranked = self._ranks()
        found: dict[int, tuple[Any, set]] = {}
        for targets, rules in self._indexed():
            for target in targets:
                got = found.setdefault(id(target), (target, set()))
                got[1].update(ranked[id(rules)])
        out = []
        for target, pairs in found.values():
            by_level: dict[int, list[Rule]] = {}
            for level, r in sorted(pairs, key=lambda p: place[p[1]]):
                by_level.setdefault(level, []).append(r)
            out.append((target, tuple((lv, tuple(rs)) for lv, rs in by_level.items())))
        return out

    def _ranks(self) -> tuple[int, dict[Rule, int], dict[int, tuple]]:
        """(the number of distinct priorities, each rule's place in the set, and for each
        table's rule list (by id) its rules as (their priority's rank, highest first; the
        rule)), made once."""
        if self._ranked is None:
            prios = sorted({r.priority for r in self.rules}, reverse=True)
            level = {p: i for i, p in enumerate(prios)}
            ranked = {
                id(rules): tuple((level[r.priority], r) for r in rules)
                for table in (self._exact, self._packets)
                for rules in table.values()
            }
            self._ranked = (len(prios), {r: i for i, r in enumerate(self.rules)}, ranked)
        return self._ranked

    def _indexed(self) -> Iterator[tuple[list, list[Rule]]]:
        """(targets, rules) for each entry of the set's index: an exact target, or a
        packet's overloads (looked up now)."""
        for target, rules in self._exact.items():
            yield [target], rules
        for packet, rules in self._packets.items():
            yield [getattr(packet, ovl) for ovl in packet.overloads()], rules

    def _tables(self, graph: torch.fx.Graph) -> Iterator[tuple[list, list[Rule]]]:
        """(nodes, rules) for each target the set is indexed by; the rules in set order."""
        for targets, rules in self._indexed():
            for target in targets:
                yield graph.find_nodes(op="call_function", target=target, sort=False), rules

    def candidates(self, graph: torch.fx.Graph) -> list[tuple[Rule, torch.fx.Node]]:
        """(rule, node) pairs to try, found through the graph's op index (no full scan)."""
        return [(r, n) for nodes, rules in self._tables(graph) for n in nodes for r in rules]
