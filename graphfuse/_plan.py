"""The planned first sweep: a rule set of local rules matched on the unmodified input, its
output built in one pass.

The plain runner copies the whole program, then rewrites the copy match by match: every
node a match replaces is copied only to be erased again (in Inductor's IR, 25 of a fused
attention's 28 nodes). When every rule of the set is ``local`` (its check and rewrite read
only the match, see :class:`~graphfuse.Rule`), the first sweep is instead matched
read-only on the input, and the copy leaves out what the matches remove: each match's
root is copied (the users of its value point at it) and replaced by the rewrite, its other
nodes never exist in the output. Later sweeps (the candidates an earlier rewrite may have
unblocked) run as usual on the result.

The result is the one the plain runner gives, node for node and name for name. Between
the input ``G`` and the plain runner's graph after ``k`` rewrites ``G_k``, the nodes that
are not removed differ only where an earlier match's root was replaced (its users now
read the new node) and in the users of earlier matches' inputs. The first sweep therefore
decides the same on ``G`` as on ``G_k`` when

1. no match binds, chains or contains a node an earlier match removes, or has one as an
   argument of a matched node (a wildcard's value, which a check may still read), and no
   solution that the checks turned down did (it could have passed on ``G_k``);
2. no escape failure names a user that an earlier match removes;
3. no rewrite creates a node that a pattern of a rule visited later in the sweep could
   match (same or lower priority: on ``G_k`` it could see the node; rules of higher
   priority had all their candidates visited before; otherwise a pattern meets an earlier
   replacement only through a capture or a wildcard, which rule 1 refuses). As in the
   plain runner, a new node that some pattern could match makes the next sweep visit
   every candidate;
4. each rewrite returns new nodes or bound inputs, never a matched node (which would stay);

and the copy names every left-out node as the plain copy does, so new names come out the
same. When any of these fails, nothing is kept and the plain runner starts over
(``STATS`` counts both outcomes).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from torch import fx

from ._errors import RewriteError
from ._fake import FakePropagator
from ._fxedit import FAST, _hooked, _map_arg, erase
from ._match import Match
from ._match_rule import match_rule
from ._matcher import _ASSERT_TARGETS, is_metadata_assert
from ._program import Program, copy_program, graph_module_of
from ._report import Report, near_miss
from ._rewriter import replace_match
from ._rules import Rule, RuleSet, _collect_targets
from ._runner import Progress, Resume, _reserved_frame, run_rules

ENABLED = True  # False: always the plain runner (tests compare the two)
STATS: Counter[str] = Counter()  # "planned", "fallback" and "fallback: <reason>"


class _Fallback(Exception):
    """The planned sweep cannot show that it decides as the plain runner would."""


class _Gone:
    """Stands for a node the first sweep removed: the plain runner would hold the erased
    copy (near misses at it are dropped; a retry of it is counted, then skipped)."""

    __slots__ = ()
    _erased = True
    _sort_key = ()


_GONE = _Gone()


def plannable(rules: RuleSet, graph: fx.Graph) -> bool:
    """True when ``rules`` may run as a planned first sweep on ``graph``."""
    return (
        ENABLED
        and FAST
        and len(rules) > 0
        and all(r.local and len(r.patterns) == 1 for r in rules)
        and not any(_hooked(graph, h) for h in _HOOKS)
    )


_SEQ = (list, tuple)
_HOOKS = ("_create_node_hooks", "_erase_node_hooks", "_replace_hooks")


def run_planned(
    program: Program, rules: RuleSet, *, progress: Progress | None = None
) -> tuple[Program, fx.GraphModule, Report] | None:
    """(a copy of ``program`` as :func:`copy_program` gives it, rewritten to the fixpoint,
    the report), or None when the plain runner must do it (nothing was changed)."""
    start = time.perf_counter()
    graph = graph_module_of(program).graph
    if not plannable(rules, graph):
        return None
    sweep = _Sweep(rules, progress)
    try:
        _reserved_frame(sweep.run, graph)  # (see _runner: the matcher's frames)
        copy_start = time.perf_counter()
        val_map: dict[fx.Node, fx.Node] = {}
        roots = {m.root for m in sweep.matches}
        try:
            original, gm = copy_program(
                program, skip=sweep.removed - roots, bare=roots, val_map=val_map
            )
            copy_time = time.perf_counter() - copy_start
            fake = FakePropagator()
            seen = _Mentions(rules)
            for m in sweep.matches:
                _apply(m, gm.graph, val_map, fake, seen)
        except KeyError:  # a left-out node is used after all: an escape the checks missed
            raise _Fallback("a removed node is still used") from None
    except _Fallback as why:
        STATS["fallback"] += 1
        STATS[f"fallback: {why}"] += 1
        return None
    STATS["planned"] += 1
    resume = Resume(
        report=sweep.report,
        fake=fake,
        fired=sweep.fired,
        retry=None if seen.full_sweep else {(r, val_map.get(n) or _Gone()) for r, n in sweep.retry},
        misses={k: (nm, val_map.get(n, _GONE)) for k, (nm, n) in sweep.misses.items()},
    )
    report = run_rules(gm.graph, rules, progress=progress, resume=resume)
    report.timings["copy"] = copy_time
    report.timings["rewrite"] = time.perf_counter() - start - copy_time
    return original, gm, report


def _nodes_in(value: Any) -> list[fx.Node]:
    found: list[fx.Node] = []
    _map_arg(value, found.append)
    return found


class _Sweep:
    """The first sweep, matched on the unmodified graph: the runner's loop, with the
    conditions of the module docstring checked on the way."""

    def __init__(self, rules: RuleSet, progress: Progress | None) -> None:
        self.rules = rules
        self.progress = progress
        self.report = Report(rules.name, {r.name: 0 for r in rules})
        self.matches: list[Match] = []
        self.removed: set[fx.Node] = set()
        self.blocked: set[fx.Node] = set()  # the removed nodes and their users
        self.fired: list[str] = []
        self.retry: set[tuple] = set()
        self.misses: dict[tuple[str, str], tuple[Any, fx.Node]] = {}
        self.asserts = True

    def run(self, graph: fx.Graph) -> None:
        rules, progress, removed = self.rules, self.progress, self.removed
        cands = rules.sweep_order(graph)
        # (interior nodes have no users outside the match but metadata asserts, if any)
        self.asserts = any(
            graph.find_nodes(op="call_function", target=t, sort=False) for t in _ASSERT_TARGETS
        )
        norm: dict = {}
        rejected: list[Match] = []
        for i, (rule, node) in enumerate(cands):
            if progress is not None and i % 256 == 0:
                progress(i, len(cands))
            if node in removed:
                continue
            res = match_rule(rule, node, None, norm, rejected)
            if rejected:
                for m in rejected:
                    if self._touches_removed(m) or self._escapes_to_removed(m):
                        raise _Fallback("a turned-down solution met an earlier match")
                rejected.clear()
            if isinstance(res, Match):
                if self._touches_removed(res):
                    raise _Fallback("a match meets an earlier one")
                self._remove(res)
                self.matches.append(res)
                self.report.counts[rule.name] += 1
                self.fired.append(rule.name)
                continue
            if res is not None:
                if res.kind == "escape":
                    if res.info[1] in removed:
                        raise _Fallback("an escape through an earlier match")
                    self.retry.add((rule, node))
                miss = near_miss(rule.name, res, node)
                self.misses.setdefault((rule.name, node.name), (miss, node))
        if progress is not None:
            progress(len(cands), len(cands))

    def _touches_removed(self, m: Match) -> bool:
        # Every bound node is a matched node or an argument of one (also inside a list;
        # chains pass through matched nodes); the arguments also hold what wildcards
        # matched, which a check may still read. A matched node has a removed argument
        # exactly when it is a user of a removed node: ``blocked`` holds both kinds.
        return not self.blocked.isdisjoint(m.nodes)

    def _escapes_to_removed(self, m: Match) -> bool:
        removed = self.removed
        return any(u in removed for n in m.nodes if n is not m.root for u in n.users)

    def _remove(self, m: Match) -> None:
        """What the plain runner erases for ``m`` (a rewrite returning new nodes or inputs):
        its nodes and the metadata asserts on them, but not those on the root (they move
        to the replacement with the root's other users)."""
        removed, node_set, blocked = self.removed, m.node_set, self.blocked
        removed.update(node_set)
        # The users of its nodes (the input graph is not edited during the sweep): an
        # intermediate's are matched nodes or metadata asserts (the escape check), added
        # below, so only the roots' are added here. (Were one missed, copying it would
        # meet a left-out argument: a fallback.)
        blocked.update(node_set)
        for r in m.roots:
            blocked.update(r.users)
        if not self.asserts:
            return
        root = m.root
        for n in m.nodes:
            if n is root:
                continue
            for u in n.users:
                if u not in node_set and is_metadata_assert(u):
                    removed.add(u)
                    blocked.update((u,), u.users)


class _Mentions:
    """Which new nodes a pattern of the set could match, and when in the sweep."""

    def __init__(self, rules: RuleSet) -> None:
        self.rules = rules
        self.full_sweep = False  # a new node some pattern could match: revisit everything
        # id(target) -> the lowest priority of a rule whose patterns name it (or its
        # packet); built when first needed
        self.lowest: dict[int, int] | None = None
        # id(target) -> (target, whether a pattern of the set names it), for the targets
        # of new nodes (a rewrite firing a thousand times creates the same few)
        self.named: dict[int, tuple[Any, bool]] = {}

    def _lowest(self) -> dict[int, int]:
        lowest: dict[int, int] = {}
        for r in self.rules:
            found: set[Any] = set()
            for p in r.patterns:
                _collect_targets(p, found)
            for t in found:
                lowest[id(t)] = min(lowest.get(id(t), r.priority), r.priority)
        return lowest

    def check(self, created: list[fx.Node], rule: Rule) -> None:
        named = self.named
        for n in created:
            t = n.target
            hit = named.get(id(t))
            if hit is None or hit[0] is not t:
                hit = named[id(t)] = (t, self.rules.mentions(t))
            if not hit[1]:
                continue
            self.full_sweep = True
            if self.lowest is None:
                self.lowest = self._lowest()
            lowest = self.lowest
            low = min(
                lowest.get(id(t), rule.priority + 1),
                lowest.get(id(getattr(t, "overloadpacket", None)), rule.priority + 1),
            )
            if low <= rule.priority:  # a rule visited later in this sweep could match it
                raise _Fallback("a rewrite creates what a later pattern matches")


def _apply(m: Match, graph: fx.Graph, val_map: dict, fake: FakePropagator, seen: _Mentions) -> None:
    """Rewrite ``m`` (found on the input) in the copy ``graph``, where the root's bare copy
    stands in for the match. The rewrite reads the match as found: its bound inputs are
    their copies; its own nodes are the input's (the same metadata and structure; using
    one in the replacement fails)."""
    node_set = m.node_set

    def copied(n: fx.Node) -> fx.Node:
        return n if n in node_set else val_map[n]

    binds = {}
    for k, v in m.binds.items():
        if type(v) is fx.Node:
            v = v if v in node_set else val_map[v]  # (copied, inline: most binds are nodes)
        elif isinstance(v, _SEQ) and _nodes_in(v):  # (a list without nodes stays as is)
            v = _map_arg(v, copied)
        binds[k] = v
    stand_in = val_map[m.root]
    try:
        created, (new,) = replace_match(m.rebound(binds), graph, fake, (stand_in,), stand_in)
    except RewriteError as exc:  # the plain runner raises it again if it is real
        raise _Fallback("the rewrite failed here") from exc
    if new not in created:  # (the matched root, an input; fx.Node's == is identity)
        raise _Fallback("a rewrite returned a node it did not create")
    erase(graph, [stand_in])
    seen.check(created, m.rule)
