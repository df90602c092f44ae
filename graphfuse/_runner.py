"""Running a rule set on a graph: candidates, overlaps, rewrites, fixpoint, report."""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from torch import fx

from ._errors import FixpointError
from ._fake import FakePropagator
from ._fxedit import lint as lint_graph
from ._match import Match
from ._match_rule import match_rule
from ._matcher import _Tracer
from ._report import NearMiss, Report, near_miss
from ._rewriter import apply_match
from ._rules import RuleSet

Progress = Callable[[int, int], None]


@dataclass
class Resume:
    """The state after a first sweep made elsewhere (``_plan``): the report so far, the
    fake propagator, the rules that fired, the candidates to retry (None: every candidate,
    after a rewrite created a node some pattern could match), the near misses."""

    report: Report
    fake: FakePropagator
    fired: list[str]
    retry: set[tuple] | None
    misses: dict


# CPython (3.11+) keeps Python frames in chunks of a per-thread stack and frees a chunk as
# soon as its first frame returns. The matcher nests a few frames per pattern node, so
# wherever a frame sits just below a chunk boundary, each of its calls allocates and frees
# a chunk (mmap / munmap and page faults: about 100 us per match on the section-1
# benchmark). Running the sweep from a frame with many (unused) locals puts it at the base
# of a fresh chunk twice its size, which stays allocated for the whole run and gives the
# frames above it room (about 2,000 of them) before the next boundary.
_RESERVE_LOCALS = 1 << 15  # 256 KiB of frame on a 64-bit build (CPython 3.11 only: measured there)

_F = TypeVar("_F", bound=Callable[..., Any])


def _reserved_frame(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Calls ``fn``; its code object gets ``_RESERVE_LOCALS`` extra locals below. It must
    stay free of closures: extra locals shift cell slots, and the interpreter crashes."""
    return fn(*args, **kwargs)


def _reserve_locals() -> None:
    if sys.version_info[:2] != (3, 11):  # the frame layout this relies on, as measured
        return
    code = _reserved_frame.__code__
    names = code.co_varnames + tuple(f"_unused{i}" for i in range(_RESERVE_LOCALS))
    _reserved_frame.__code__ = code.replace(co_varnames=names, co_nlocals=len(names))


_reserve_locals()


def _in_reserved_stack(fn: _F) -> _F:
    """``fn``, called from :func:`_reserved_frame`."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        return _reserved_frame(fn, *args, **kwargs)

    return call  # type: ignore[return-value]


@_in_reserved_stack
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
    resume: Resume | None = None,
) -> Report:
    """Rewrite ``graph`` in place with ``rules`` until nothing more fires.

    A sweep visits the candidates (found through the op index) in order of rule
    priority, then position, and applies each match as it is found, so a candidate that
    an earlier rewrite consumed is skipped without matching; overlaps go to the first.
    The next sweep revisits everything only when a rewrite created a node that some
    pattern of the set could match; otherwise only the candidates a rewrite may have
    unblocked (those that failed because an intermediate escaped). ``graph.lint()`` runs
    after every sweep that changed something.

    Args:
        dry_run: match and count, change nothing (one sweep).
        explain: also trace structural partial matches (at least ``min_depth`` pattern
            ops deep) into near misses.
        max_iterations: bound on sweeps; a rule set still rewriting after it raises
            :class:`FixpointError`.
        progress: called as ``progress(done, total)`` while matching candidates.
        resume: continue after a first sweep made elsewhere (the next sweep is the second).
    """
    order = {r: i for i, r in enumerate(rules)}
    misses: dict[tuple[str, str], tuple[NearMiss, fx.Node]]
    retry: set[tuple] | None  # None: visit every candidate
    first = 1
    if resume is None:
        report = Report(rules.name, {r.name: 0 for r in rules}, dry_run=dry_run)
        fake, misses, fired_last, retry = FakePropagator(), {}, [], None
    else:
        report, fake, misses = resume.report, resume.fake, resume.misses
        fired_last, retry = resume.fired, resume.retry
        report.iterations = first = 1 + bool(fired_last)  # no second sweep when none fired
        if fired_last and lint:
            lint_graph(graph)
    # normalize() per node, checked against the node's args / kwargs objects on every use
    # (an edit replaces them), so it stays valid across rewrites
    norm: dict = {}
    done = resume is not None and not fired_last
    for iteration in range(first, max_iterations + 1):
        if done:
            break
        report.iterations = iteration
        if retry is None:
            cands = rules.sweep_order(graph)
        else:
            cands = sorted(retry, key=lambda rn: (-rn[0].priority, rn[1]._sort_key, order[rn[0]]))
        fired_last, retry, full_sweep = [], set(), False
        consumed: set[fx.Node] = set()
        for i, (rule, node) in enumerate(cands):
            if progress is not None and i % 256 == 0:
                progress(i, len(cands))
            if node._erased or node in consumed:
                continue
            tracer = _Tracer() if explain and iteration == 1 else None
            res = match_rule(rule, node, tracer, norm)
            if isinstance(res, Match):
                if dry_run:
                    consumed |= res.node_set
                else:
                    # matched on this graph just now, escape check included
                    created = apply_match(res, graph, fake, escape_checked=True)
                    if not isinstance(created, list):  # no longer safe: retry next sweep
                        res, created = created, None
                    else:
                        for n in created:
                            if not full_sweep and rules.mentions(n.target):
                                full_sweep = True
                if isinstance(res, Match):
                    report.counts[rule.name] += 1
                    fired_last.append(rule.name)
                    continue
            if res is not None:
                if res.kind == "escape":
                    retry.add((rule, node))
                nm = near_miss(rule.name, res, node)
                misses.setdefault((rule.name, node.name), (nm, node))
            elif tracer is not None and tracer.failure is not None and tracer.depth >= min_depth:
                nm = near_miss(rule.name, tracer.failure, node)
                misses.setdefault((rule.name, node.name), (nm, node))
        if progress is not None:
            progress(len(cands), len(cands))
        if dry_run or not fired_last:
            break
        if full_sweep:
            retry = None
        if lint:
            lint_graph(graph)
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
