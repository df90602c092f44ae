"""Running a rule set on a graph: candidates, overlaps, rewrites, fixpoint, report."""

from __future__ import annotations

import time
from collections.abc import Callable
from operator import itemgetter
from typing import Any

from torch import fx

from ..errors import FixpointError, RewriteError
from ..match import Failure, Match, Tracer, match_rule
from ..rewrite import FakePropagator, apply_match
from ..rules import Rule, RuleSet
from .hops import hidden_matches
from .report import (
    Fired,
    NearMiss,
    Overlap,
    Report,
    RuleStats,
    near_miss,
    overlap,
    ranked,
)

Progress = Callable[[int, int], None]


def sweep_order(rules: RuleSet, graph: fx.Graph) -> list[tuple[Rule, fx.Node]]:
    """The candidates, each (rule, node) once, found through the graph's op index (no scan
    of every node): higher rule priority first, then position in the graph, then the
    rule's place in the set."""
    return [c for p in _priorities(rules) for c in level_candidates(rules, graph, p)]


def _priorities(rules: RuleSet) -> list[int]:
    return sorted({rule.priority for rule in rules}, reverse=True)


def level_candidates(rules: RuleSet, graph: fx.Graph, priority: int) -> list[tuple[Rule, fx.Node]]:
    """The candidates of the rules of one priority, in :func:`sweep_order`."""
    at_nodes = [
        (node._sort_key, node, level)
        for target, by_target in rules.roots()
        if (level := [r for r in by_target if r.priority == priority])
        for node in graph.find_nodes(op="call_function", target=target, sort=False)
    ]
    at_nodes.sort(key=itemgetter(0))
    return [(rule, node) for _, node, level in at_nodes for rule in level]


def _count(rules: RuleSet, graph: fx.Graph) -> int:
    """How many candidates :func:`sweep_order` has, without listing them."""
    return sum(
        len(by_target) * len(graph.find_nodes(op="call_function", target=target, sort=False))
        for target, by_target in rules.roots()
    )


def run_rules(
    graph: fx.Graph,
    rules: RuleSet,
    *,
    dry_run: bool = False,
    explain: bool = False,
    min_depth: int = 2,
    max_iterations: int = 32,
    lint: bool = True,
    progress: Progress | None = None,
) -> Report:
    """Rewrite ``graph`` in place with ``rules`` until nothing more fires.

    A sweep visits the candidates in :func:`sweep_order` and applies each match as it is
    found, so a candidate that an earlier rewrite consumed is skipped without matching;
    overlaps go to the first. Each priority level's candidates are found when the sweep
    reaches it: a node that a higher level's rewrite created is among them, one it erased
    is not. The next sweep revisits everything only when a rewrite created a node that
    some pattern of the set could match; otherwise only the candidates a rewrite may have
    unblocked (those that failed because an intermediate escaped). ``graph.lint()`` runs
    after every sweep that changed something.

    Args:
        graph: the graph, rewritten in place (unless ``dry_run``).
        rules: the rule set.
        dry_run: match and count, change nothing (one sweep).
        explain: also trace structural partial matches (at least ``min_depth`` pattern
            ops deep) into near misses.
        max_iterations: bound on sweeps; a rule set still rewriting after it raises
            :class:`FixpointError`.
        lint: run ``graph.lint()`` after each sweep that changed the graph.
        progress: called as ``progress(done, total)`` while matching candidates.

    Returns:
        the :class:`Report`: counts per rule, near misses, sweeps.
    """
    run = _Run(graph, rules, dry_run, explain, min_depth)
    retry: set[tuple[Rule, fx.Node]] | None = None  # None: every candidate
    for iteration in range(1, max_iterations + 1):
        run.report.iterations = iteration
        if retry is None:
            levels: Any = (level_candidates(rules, graph, p) for p in _priorities(rules))
            total = _count(rules, graph) if progress is not None else 0
        else:
            place = {rule: i for i, rule in enumerate(rules)}
            order = sorted(retry, key=lambda rn: (-rn[0].priority, rn[1]._sort_key, place[rn[0]]))
            levels, total = [order], len(order)
        run.start_sweep(iteration)
        done = 0
        for cands in levels:
            for i in range(len(cands)):
                if progress is not None and (done + i) % 256 == 0:
                    progress(min(done + i, total), total)
                run.visit(cands, i)
            done += len(cands)
        if progress is not None:
            progress(total, total)
        if dry_run or not run.fired:
            break
        retry = None if run.full_sweep else run.retry
        if lint:
            graph.lint()
    else:
        raise FixpointError(
            f"rule set {rules.name} still rewrote after {max_iterations} sweeps "
            f"(rules {', '.join(sorted(set(run.fired)))} keep firing); do they undo each other?"
        )
    return run.finish()


class _Run:
    """What one :func:`run_rules` call keeps across its sweeps: the report, near misses,
    per-rule costs, fake values of new nodes, normalized arguments."""

    def __init__(
        self, graph: fx.Graph, rules: RuleSet, dry_run: bool, explain: bool, min_depth: int
    ) -> None:
        self.graph, self.rules, self.dry_run = graph, rules, dry_run
        self.explain, self.min_depth = explain, min_depth
        self.report = Report(rules.name, {r.name: 0 for r in rules}, dry_run=dry_run)
        self.fake = FakePropagator()
        self.misses: dict[tuple[str, str], tuple[NearMiss, fx.Node]] = {}
        self.norm: dict[fx.Node, Any] = {}  # normalized arguments, valid while a node is unedited
        # per rule: candidates, seconds matching, rejects, seconds rewriting
        self.stats = {rule: [0, 0.0, 0, 0.0] for rule in rules}
        self.start_sweep(0)

    def start_sweep(self, iteration: int) -> None:
        self.iteration = iteration
        self.fired: list[str] = []
        self.retry: set[tuple[Rule, fx.Node]] = set()  # escapes: candidates to try again
        self.full_sweep = False  # a new node some pattern of the set mentions
        self.consumed: dict[fx.Node, Match] = {}  # dry run: node -> the match that took it

    def visit(self, cands: list[tuple[Rule, fx.Node]], i: int) -> None:
        """Match candidate ``cands[i]``, rewrite on a match, note a near miss otherwise."""
        rule, node = cands[i]
        if node._erased:
            return
        report, norm = self.report, self.norm
        if node in self.consumed:
            _lost(report, match_rule(rule, node, None, norm), self.consumed)
            return
        tracer = Tracer() if self.explain and self.iteration == 1 else None
        stat = self.stats[rule]
        start = time.perf_counter()
        res = match_rule(rule, node, tracer, norm)
        stat[1] += time.perf_counter() - start
        stat[0] += 1
        if isinstance(res, Match):
            if self.dry_run:
                if _lost(report, res, self.consumed):
                    return
                self.consumed.update(dict.fromkeys(res.nodes, res))
            else:
                report.overlaps += _ties(cands, i, res, norm)
                start = time.perf_counter()
                try:
                    created = apply_match(res, self.graph, self.fake, escape_checked=True)
                except RewriteError as exc:  # the graph is as it was: a near miss, go on
                    created = Failure("check", (_rewrite_failed(exc, rule),), res.root)
                stat[3] += time.perf_counter() - start
                if isinstance(created, list):
                    mentions = self.rules.mentions
                    self.full_sweep = self.full_sweep or any(mentions(n.target) for n in created)
                else:  # no longer safe: retried next sweep
                    res = created
            if isinstance(res, Match):
                report.counts[rule.name] += 1
                self.fired.append(rule.name)
                removed = tuple([n.name for n in res.nodes])
                report.fired.append(
                    Fired(rule.name, node.name, removed, rule.where, self.iteration)
                )
                return
        failure = res
        if failure is None and tracer is not None and tracer.depth >= self.min_depth:
            failure = tracer.failure
        if failure is not None:
            stat[2] += res is not None  # a full structure refused (check, escape, rewrite)
            if failure.kind == "escape":
                self.retry.add((rule, node))
            depth = 0 if tracer is None else max(tracer.depth, 0)
            miss = near_miss(rule.name, failure, node, refused=res is not None, depth=depth)
            self.misses.setdefault((rule.name, node.name), (miss, node))

    def finish(self) -> Report:
        report = self.report
        report.rule_stats = {
            rule.name: RuleStats(n, match_s, rejects, rewrite_s, report.counts[rule.name])
            for rule, (n, match_s, rejects, rewrite_s) in self.stats.items()
        }
        report.near_misses = [nm for nm, node in self.misses.values() if not node._erased]
        if self.explain:
            report.near_misses = ranked(report.near_misses) + hidden_matches(self.graph, self.rules)
        return report


def _lost(report: Report, res: Match | Failure | None, consumed: dict) -> bool:
    """In a dry run: whether ``res`` is a match that an earlier one took nodes of (noted
    in ``report.overlaps`` unless the earlier one is of the same rule)."""
    if not isinstance(res, Match):
        return False
    taken = next((consumed[n] for n in res.nodes if n in consumed), None)
    if taken is None:
        return False
    if taken.rule is not res.rule:
        report.overlaps.append(overlap(res.rule, res.root, taken.rule, taken.root))
    return True


def _ties(cands: list, i: int, m: Match, norm: dict) -> list[Overlap]:
    """The rules after ``cands[i]`` at the same node and priority that would match there
    too (tried now, before ``m`` is rewritten): they lose the tie to ``m``'s rule."""
    rule, node = cands[i]
    out = []
    for j in range(i + 1, len(cands)):
        other, at = cands[j]
        if at is not node or other.priority != rule.priority:
            break
        if isinstance(match_rule(other, node, None, norm), Match):
            out.append(overlap(other, node, rule, node))
    return out


def _rewrite_failed(exc: RewriteError, rule: Rule) -> str:
    """The near-miss sentence for a rewrite that raised (its ``rule R at N:`` prefix off)."""
    msg = str(exc)
    if msg.startswith(f"rule {rule.name}"):
        msg = msg.split(": ", 1)[-1]
    return f"the rewrite failed, so the match was left as it is: {msg}"


def timed(report: Report, phase: str, start: float) -> float:
    """Record ``time.perf_counter() - start`` as ``report.timings[phase]``; return now."""
    now = time.perf_counter()
    report.timings[phase] = report.timings.get(phase, 0.0) + now - start
    return now
