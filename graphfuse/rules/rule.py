"""Rules (pattern + check + rewrite) and rule sets (named, combinable with ``+``)."""

from __future__ import annotations

import re
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import dsl as P

# check(match) and rewrite(match, builder): graphfuse.Match and graphfuse.Builder, which
# live in the layers above this one
CheckFn = Callable[[Any], Any]
RewriteFn = Callable[[Any, Any], Any]


def caller_location(depth: int) -> tuple[str, int]:
    """(file, line) of the caller ``depth`` frames up: where a rule was defined."""
    frame = sys._getframe(depth)
    return frame.f_code.co_filename, frame.f_lineno


# a full stop before white space or the end, unless it ends "e.g.", "i.e.", "cf." or "vs."
_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\bcf)(?<!\bvs)\.(\s|$)")


def first_sentence(doc: str | None) -> str:
    """The first sentence of ``doc``'s first paragraph, on one line ('' for no doc): a rule's
    default ``doc``, whole where its docstring wraps mid-sentence.

    >>> first_sentence("Fuses a (b.c)\\n    into d. More text.")
    'Fuses a (b.c) into d.'
    >>> first_sentence("Fuses a norm, e.g. RMSNorm, into one op. More.")
    'Fuses a norm, e.g. RMSNorm, into one op.'
    """
    para = " ".join((doc or "").strip().split("\n\n")[0].split())
    end = re.search(_SENTENCE_END, para)
    return para[: end.start() + 1] if end else para


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


def _children(pat: Any) -> list[Any]:
    if isinstance(pat, P.Call):
        return list(pat.args) + [a for _, a in pat.kwargs]
    if isinstance(pat, (P.Maybe, P.Typed)):
        return [pat.inner]
    if isinstance(pat, P.Alt):
        return [b for _, b in pat.branches]
    if isinstance(pat, P.ListOf):
        return list(pat.items)
    return []


def subpatterns(patterns: Iterable[P.Pattern]) -> Iterator[Any]:
    """Every pattern value in ``patterns`` and below, each once (a sub-pattern shared by
    several places is visited once)."""
    seen: set[int] = set()
    stack: list[Any] = list(patterns)
    while stack:
        pat = stack.pop()
        if id(pat) in seen:
            continue
        seen.add(id(pat))
        yield pat
        stack.extend(_children(pat))


def _check_capture_kinds(rule: str, patterns: tuple[P.Pattern, ...]) -> None:
    """A name captured as a tensor in one place and as a scalar in another can never bind:
    refused when the rule is made."""
    kinds: dict[str, set[str]] = {}
    for pat in subpatterns(patterns):
        if isinstance(pat, P.Capture) and pat.kind != "any":
            kinds.setdefault(pat.name, set()).add(pat.kind)
    for name, found in kinds.items():
        if len(found) > 1:
            raise ValueError(
                f"rule {rule}: {name!r} is captured both as a tensor and as a scalar; "
                "one name binds one value"
            )


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
        doc: one line for ``graphfuse patterns`` (default: the first sentence of
            ``rewrite``'s docstring).
        local: deprecated, has no effect (every rule set is applied match by match).

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
    # ``pattern`` as a tuple (one pattern per root)
    patterns: tuple[P.Pattern, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.location == ("", 0):
            object.__setattr__(self, "location", caller_location(3))
        if self.local:
            warnings.warn(
                f"rule {self.name}: Rule(local=...) is deprecated and has no effect",
                DeprecationWarning,
                stacklevel=3,
            )
        pats = self.pattern if isinstance(self.pattern, tuple) else (self.pattern,)
        object.__setattr__(self, "patterns", pats)
        for p in self.patterns:
            if not isinstance(p, P.Pattern):
                raise TypeError(f"rule {self.name}: pattern must be a dsl Pattern, got {p!r}")
        anchor_targets(self.patterns[0])
        _check_capture_kinds(self.name, self.patterns)
        if not self.doc:
            object.__setattr__(self, "doc", first_sentence(getattr(self.rewrite, "__doc__", None)))

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
        self._mentioned: frozenset[int] | None = None
        self._keep: list[Any] = []  # the targets whose ids _mentioned holds

    def roots(self) -> list[tuple[Any, list[Rule]]]:
        """(op overload, the rules whose first pattern may be rooted at a call of it), in
        set order; a packet in a pattern stands for each of its overloads."""
        by_target: dict[int, tuple[Any, list[Rule]]] = {}
        for rule in self.rules:
            for t in anchor_targets(rule.patterns[0]):
                overloads = (
                    [getattr(t, o) for o in t.overloads()]
                    if isinstance(t, torch._ops.OpOverloadPacket)
                    else [t]
                )
                for target in overloads:
                    rules = by_target.setdefault(id(target), (target, []))[1]
                    if rule not in rules:
                        rules.append(rule)
        return list(by_target.values())

    def mentions(self, target: Any) -> bool:
        """True when some pattern of the set could match a call of ``target`` (so a
        rewrite that creates one needs a full sweep after it)."""
        if self._mentioned is None:
            found = {
                t
                for pat in subpatterns(p for rule in self.rules for p in rule.patterns)
                if isinstance(pat, (P.Call, P.Maybe))
                for t in pat.targets
            }
            self._keep = list(found)
            self._mentioned = frozenset(map(id, found))
        ids = self._mentioned
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
