"""What a run of a rule set did: counts per rule, near misses, timings."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from torch import fx

from .. import dsl
from ..match import Failure


@dataclass(frozen=True)
class NearMiss:
    """A place where a rule got partway: the rule, the node, and why it stopped."""

    rule: str
    node: str
    reason: str
    target: str = ""
    stack_trace: str = ""
    refused: bool = False  # the whole pattern matched; its check, an escape or the rewrite said no
    depth: int = 0  # pattern ops matched before a structural failure

    def __str__(self) -> str:
        return f"rule {self.rule} at {self.node}: {self.reason}"

    def source_line(self) -> str:
        """The user's source line (the last ``File ..., line N`` frame of the stack trace)."""
        lines = [ln.strip() for ln in self.stack_trace.strip().splitlines() if ln.strip()]
        frames = [i for i, ln in enumerate(lines) if ln.startswith("File ")]
        if not frames:
            return ""
        i = frames[-1]
        code = lines[i + 1] if i + 1 < len(lines) else ""
        return f"{lines[i]}: {code}" if code else lines[i]


def near_miss(
    rule: str, failure: Failure, fallback: fx.Node, *, refused: bool = False, depth: int = 0
) -> NearMiss:
    """The near miss of ``rule`` that ``failure`` describes (at ``fallback`` when the
    failure names no node)."""
    node = failure.node or fallback
    target = dsl.target_repr(node.target) if node.op == "call_function" else node.op
    trace = node.meta.get("stack_trace") or ""
    return NearMiss(rule, node.name, str(failure), target, trace, refused, depth)


def ranked(misses: list[NearMiss]) -> list[NearMiss]:
    """Near misses, most telling first: refusals of a whole match (a check, an escape, a
    rewrite), then structural failures, deepest first; graph order within a rank."""
    return sorted(misses, key=lambda nm: (not nm.refused, -nm.depth))


@dataclass(frozen=True)
class Fired:
    """A match that fired (in a dry run: that would fire): the rule, the node it was
    rooted at, the nodes it removes (matched nodes, in match order), the ``file:line``
    where the rule is defined, and the sweep it fired in."""

    rule: str
    root: str
    removed: tuple[str, ...]
    where: str
    sweep: int = 1

    def __str__(self) -> str:
        return f"rule {self.rule} at {self.root}: removes {', '.join(self.removed)}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "root": self.root,
            "removed": list(self.removed),
            "where": self.where,
            "sweep": self.sweep,
        }


@dataclass(frozen=True)
class Overlap:
    """A match that did not fire because another took its nodes first: ``rule`` would
    have matched at ``node``; ``lost_to`` matched first (rooted at ``at``); ``why`` says
    which order decided (see :func:`graphfuse.run.sweep_order`)."""

    rule: str
    node: str
    lost_to: str
    at: str
    why: str

    def __str__(self) -> str:
        return f"{self.rule} lost to {self.lost_to} at {self.node} ({self.why})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "node": self.node,
            "lost_to": self.lost_to,
            "at": self.at,
            "why": self.why,
        }


def overlap(loser: Any, node: fx.Node, winner: Any, root: fx.Node) -> Overlap:
    """The :class:`Overlap` of rule ``loser`` at ``node`` and rule ``winner``'s match
    rooted at ``root``, with the order that decided it."""
    if winner.priority != loser.priority:
        why = f"priority {winner.priority} over {loser.priority}"
    elif root is node:
        why = "same priority and root, earlier in the rule set"
    else:
        why = f"same priority, its root {root.name} comes first in the graph"
    return Overlap(loser.name, node.name, winner.name, root.name, why)


@dataclass(frozen=True)
class RuleStats:
    """What one rule cost in a run: candidates tried, seconds matching them, matches its
    check, an escape or its rewrite refused (*rejects*), seconds rewriting, rewrites."""

    candidates: int = 0
    match_s: float = 0.0
    rejects: int = 0
    rewrite_s: float = 0.0
    rewrites: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "candidates": self.candidates,
            "match_s": self.match_s,
            "rejects": self.rejects,
            "rewrite_s": self.rewrite_s,
            "rewrites": self.rewrites,
        }


@dataclass
class Report:
    """The outcome of :func:`graphfuse.apply` / :func:`graphfuse.explain`.

    Attributes:
        counts: rule name -> number of rewrites (every rule of the set appears).
        near_misses: where rules got partway, with the reason in one sentence.
        iterations: sweeps until the fixpoint.
        dry_run: True when nothing was rewritten (counts are what would have fired).
        timings: seconds spent per phase (``copy``, ``rewrite``, ``recompile``).
        skipped: why the rules did not run on the graph at all (empty when they ran), e.g.
            a training graph under ``torch.compile``.
        fired: every match that fired (in a dry run: that would fire in the first sweep),
            in the order it did, as :class:`Fired`.
        rule_stats: rule name -> :class:`RuleStats` (every rule of the set that ran).
        overlaps: matches that lost their nodes to another match, as :class:`Overlap`:
            in every run, a rule that would match at the root another rule of the same
            priority took; in a dry run, every match an earlier one took nodes from.
    """

    rule_set: str
    counts: dict[str, int] = field(default_factory=dict)
    near_misses: list[NearMiss] = field(default_factory=list)
    iterations: int = 0
    dry_run: bool = False
    timings: dict[str, float] = field(default_factory=dict)
    skipped: str = ""
    fired: list[Fired] = field(default_factory=list)
    rule_stats: dict[str, RuleStats] = field(default_factory=dict)
    overlaps: list[Overlap] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule_set": self.rule_set,
            "counts": dict(self.counts),
            "total": self.total,
            "near_misses": [
                {
                    "rule": n.rule,
                    "node": n.node,
                    "reason": n.reason,
                    "target": n.target,
                    "refused": n.refused,
                    "depth": n.depth,
                }
                for n in self.near_misses
            ],
            "iterations": self.iterations,
            "dry_run": self.dry_run,
            "timings": dict(self.timings),
            "skipped": self.skipped,
            "fired": [f.to_dict() for f in self.fired],
            "rule_stats": {name: s.to_dict() for name, s in self.rule_stats.items()},
            "overlaps": [o.to_dict() for o in self.overlaps],
        }

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), indent=2, **kwargs)

    def __str__(self) -> str:
        if self.skipped:
            return f"{self.rule_set}: skipped ({self.skipped})"
        fired = ", ".join(f"{k}={v}" for k, v in self.counts.items() if v) or "nothing"
        return f"{self.rule_set}: {fired}; {len(self.near_misses)} near miss(es)"
