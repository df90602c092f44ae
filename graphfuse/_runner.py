"""Running a rule set on a graph: candidates, overlaps, rewrites, fixpoint, report."""

from __future__ import annotations

import time
from collections.abc import Callable

from torch import fx

from ._errors import FixpointError
from ._fake import FakePropagator
from ._match import Match
from ._matcher import _Tracer, match_rule
from ._report import NearMiss, Report, near_miss
from ._rewriter import alive, apply_match
from ._rules import RuleSet

Progress = Callable[[int, int], None]


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

    Each sweep matches every candidate (found through the op index), orders the matches
    by rule priority, then position, and applies those that are still intact; overlaps
    go to the first. ``graph.lint()`` runs after every sweep that changed something.

    Args:
        dry_run: match and count, change nothing (one sweep).
        explain: also trace structural partial matches (at least ``min_depth`` pattern
            ops deep) into near misses.
        max_iterations: bound on sweeps; a rule set still rewriting after it raises
            :class:`FixpointError`.
        progress: called as ``progress(done, total)`` while matching candidates.
    """
    report = Report(rules.name, {r.name: 0 for r in rules}, dry_run=dry_run)
    order = {r: i for i, r in enumerate(rules)}
    fake = FakePropagator()
    misses: dict[tuple[str, str], tuple[NearMiss, fx.Node]] = {}
    fired_last: list[str] = []
    for iteration in range(1, max_iterations + 1):
        report.iterations = iteration
        cands = list(dict.fromkeys(rules.candidates(graph)))
        cands.sort(key=lambda rn: (-rn[0].priority, rn[1]._sort_key, order[rn[0]]))
        matches: list[Match] = []
        norm: dict = {}  # normalize() per node, valid while this sweep only matches
        for i, (rule, node) in enumerate(cands):
            if progress is not None and i % 256 == 0:
                progress(i, len(cands))
            tracer = _Tracer() if explain and iteration == 1 else None
            res = match_rule(rule, node, tracer, norm)
            if isinstance(res, Match):
                matches.append(res)
            elif res is not None:
                nm = near_miss(rule.name, res, node)
                misses.setdefault((rule.name, node.name), (nm, node))
            elif tracer is not None and tracer.failure is not None and tracer.depth >= min_depth:
                nm = near_miss(rule.name, tracer.failure, node)
                misses.setdefault((rule.name, node.name), (nm, node))
        if progress is not None:
            progress(len(cands), len(cands))
        fired_last = []
        consumed: set[fx.Node] = set()
        for m in matches:
            if not alive(m) or (dry_run and not consumed.isdisjoint(m.node_set)):
                continue
            if dry_run:
                consumed |= m.node_set
            else:
                failure = apply_match(m, graph, fake)
                if failure is not None:
                    nm = near_miss(m.rule.name, failure, m.root)
                    misses.setdefault((m.rule.name, m.root.name), (nm, m.root))
                    continue
            report.counts[m.rule.name] += 1
            fired_last.append(m.rule.name)
        if dry_run or not fired_last:
            break
        if lint:
            graph.lint()
    else:
        names = sorted(set(fired_last))
        raise FixpointError(
            f"rule set {rules.name} still rewrote after {max_iterations} sweeps "
            f"(rules {', '.join(names)} keep firing); do they undo each other?"
        )
    report.near_misses = [nm for nm, node in misses.values() if not node._erased]
    return report


def timed(report: Report, phase: str, start: float) -> float:
    """Record ``time.perf_counter() - start`` as ``report.timings[phase]``; return now."""
    now = time.perf_counter()
    report.timings[phase] = report.timings.get(phase, 0.0) + now - start
    return now
