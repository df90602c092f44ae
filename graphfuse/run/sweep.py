"""Running a rule set on a graph: candidates, overlaps, rewrites, fixpoint, report."""

from __future__ import annotations

import time
from collections.abc import Callable
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
    out: list[tuple[Rule, fx.Node]] = []
    for priority in sorted({rule.priority for rule in rules}, reverse=True):
        at_nodes = [
            (node, level)
            for target, by_target in rules.roots()
            if (level := [r for r in by_target if r.priority == priority])
            for node in graph.find_nodes(op="call_function", target=target, sort=False)
        ]
        at_nodes.sort(key=lambda nl: nl[0]._sort_key)
        out += [(rule, node) for node, level in at_nodes for rule in level]
    return out


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
    overlaps go to the first. The next sweep revisits everything only when a rewrite
    created a node that some pattern of the set could match; otherwise only the
    candidates a rewrite may have unblocked (those that failed because an intermediate
    escaped). ``graph.lint()`` runs after every sweep that changed something.

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
    report = Report(rules.name, {r.name: 0 for r in rules}, dry_run=dry_run)
    fake = FakePropagator()
    misses: dict[tuple[str, str], tuple[NearMiss, fx.Node]] = {}
    norm: dict[fx.Node, Any] = {}  # normalized arguments, valid while a node is unedited
    place = {rule: i for i, rule in enumerate(rules)}
    retry: set[tuple[Rule, fx.Node]] | None = None  # None: every candidate
    fired: list[str] = []
    stats = {rule: [0, 0.0, 0, 0.0] for rule in rules}  # candidates, match s, rejects, rewrite s
    clock = time.perf_counter
    for iteration in range(1, max_iterations + 1):
        report.iterations = iteration
        if retry is None:
            cands = sweep_order(rules, graph)
        else:
            cands = sorted(retry, key=lambda rn: (-rn[0].priority, rn[1]._sort_key, place[rn[0]]))
        fired, retry, full_sweep = [], set(), False
        consumed: dict[fx.Node, Match] = {}  # dry run: node -> the match that took it
        for i, (rule, node) in enumerate(cands):
            if progress is not None and i % 256 == 0:
                progress(i, len(cands))
            if node._erased:
                continue
            if node in consumed:
                _lost(report, match_rule(rule, node, None, norm), consumed)
                continue
            tracer = Tracer() if explain and iteration == 1 else None
            stat = stats[rule]
            start = clock()
            res = match_rule(rule, node, tracer, norm)
            stat[1] += clock() - start
            stat[0] += 1
            if isinstance(res, Match):
                if dry_run:
                    if _lost(report, res, consumed):
                        continue
                    consumed.update(dict.fromkeys(res.nodes, res))
                else:
                    report.overlaps += _ties(cands, i, res, norm)
                    start = clock()
                    try:
                        created = apply_match(res, graph, fake, escape_checked=True)
                    except RewriteError as exc:  # the graph is as it was: a near miss, go on
                        created = Failure("check", (_rewrite_failed(exc, rule),), res.root)
                    stat[3] += clock() - start
                    if isinstance(created, list):
                        full_sweep = full_sweep or any(rules.mentions(n.target) for n in created)
                    else:  # no longer safe: retried next sweep
                        res = created
                if isinstance(res, Match):
                    report.counts[rule.name] += 1
                    fired.append(rule.name)
                    removed = tuple([n.name for n in res.nodes])
                    report.fired.append(Fired(rule.name, node.name, removed, rule.where, iteration))
                    continue
            failure = res
            if failure is None and tracer is not None and tracer.depth >= min_depth:
                failure = tracer.failure
            if failure is not None:
                stat[2] += res is not None  # a full structure refused (check, escape, rewrite)
                if failure.kind == "escape":
                    retry.add((rule, node))
                depth = 0 if tracer is None else max(tracer.depth, 0)
                miss = near_miss(rule.name, failure, node, refused=res is not None, depth=depth)
                misses.setdefault((rule.name, node.name), (miss, node))
        if progress is not None:
            progress(len(cands), len(cands))
        if dry_run or not fired:
            break
        if full_sweep:
            retry = None
        if lint:
            graph.lint()
    else:
        raise FixpointError(
            f"rule set {rules.name} still rewrote after {max_iterations} sweeps "
            f"(rules {', '.join(sorted(set(fired)))} keep firing); do they undo each other?"
        )
    report.rule_stats = {
        rule.name: RuleStats(n, match_s, rejects, rewrite_s, report.counts[rule.name])
        for rule, (n, match_s, rejects, rewrite_s) in stats.items()
    }
    report.near_misses = [nm for nm, node in misses.values() if not node._erased]
    if explain:
        report.near_misses = ranked(report.near_misses) + hidden_matches(graph, rules)
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
