"""The solutions of a search and the one a rule takes: alts and maybes passed through
bind, tag and chain alike with a tracer and without; a capture binds what ``normalize``
reads; ``rule.check`` runs once per solution, in order, until one passes (the first
failure is reported when none does); a pattern deeper than the recursion limit matches;
matching never prints a whole pattern."""

from __future__ import annotations

import sys

import torch
from torch import fx

from graphfuse import Rule, RuleSet
from graphfuse import dsl as P
from graphfuse.match import Failure, Match, Tracer, match_rule
from graphfuse.match.args import normalize
from graphfuse.run import run_rules

from ._models import fake_input_graph
from ._outcomes import both, structural
from ._outcomes import keep_root as _keep

aten = torch.ops.aten


def _graph() -> tuple[fx.Graph, dict[str, fx.Node]]:
    """x -> permute -> softmax(dim=-1) -> to(fp32) -> mul(0.5) -> relu."""
    g, x, val = fake_input_graph(2, 8, 4)
    perm = g.call_function(aten.permute.default, (x, [0, 2, 1]))
    sm = g.call_function(aten._softmax.default, (perm, -1, False))
    cast = g.call_function(aten._to_copy.default, (sm,), {"dtype": torch.float32})
    mul = g.call_function(aten.mul.Tensor, (cast, 0.5))
    out = g.call_function(aten.relu.default, (mul,))
    for n in (perm, sm, cast, mul, out):
        n.meta["val"] = val
    g.output(out)
    return g, {"x": x, "perm": perm, "sm": sm, "cast": cast, "mul": mul, "out": out}


def _wrapped() -> P.Pattern:
    """Named and unnamed alts and maybes, most with a single way at each value."""
    inner = P.op(aten.permute.default, P.tensor("x", shape=("B", "S", "D")), [0, 2, 1])
    sm = P.op(aten._softmax.default, P.maybe([aten.view.default], inner, name="v"), 2, False)
    cast = P.maybe([aten._to_copy.default], sm, name="c")
    scaled = P.alt(
        "spelling",
        mul=P.op(aten.mul.Tensor, cast, P.scalar("k")),
        div=P.op(aten.div.Tensor, cast, P.scalar("k")),
    )
    return P.op(aten.relu.default, P.alt(plain=scaled, other=P.op(aten.neg.default, P._)))


def test_alts_and_maybes_bind_alike_with_a_tracer_and_without() -> None:
    _, n = _graph()
    rule = Rule("r", _wrapped(), _keep)
    kind, binds, tags, chains, nodes, dims, roots = both(rule, n["out"])
    assert kind == "match"
    assert binds == {"x": n["x"], "k": 0.5}
    assert tags == {"spelling": "mul"}
    assert chains == {"c": (n["cast"],), "v": ()}
    assert nodes == [n["out"], n["mul"], n["cast"], n["sm"], n["perm"]]
    assert dims == {"B": 2, "S": 8, "D": 4} and roots == (n["out"],)
    # one way only: the search finds exactly one solution
    sols, _ = structural(rule, n["out"], None)
    assert len(sols) == 1


def test_a_maybe_whose_inner_cannot_start_there_does_not_match() -> None:
    """A maybe with no chain at the value, whose inner pattern cannot start there, is no
    match; explained by the inner pattern's target."""
    _, n = _graph()
    pat = P.maybe([aten.view.default], P.op(aten.neg.default, P._), name="v")
    rule = Rule("r", pat, _keep)
    assert both(rule, n["mul"]) == ("none",)
    sols, steps = structural(rule, n["mul"], None)
    assert sols == [] and steps <= 2
    tracer = Tracer()
    assert match_rule(rule, n["mul"], tracer) is None
    mul = n["mul"].name
    assert str(tracer.failure) == f"{mul} (aten.mul.Tensor) is not a call of aten.neg"


def test_captures_bind_what_normalize_reads() -> None:
    g, n = _graph()
    with g.inserting_before(n["out"]):
        kw = g.call_function(aten._softmax.default, (n["perm"],), {"dim": -2, "half_to_float": 0})
        sumd = g.call_function(aten.sum.dim_IntList, (n["perm"], [-1]))
    cases = [
        (n["sm"], P.op(aten._softmax.default, P._, P.any("d"), P._), {"d": 1}),
        (kw, P.op(aten._softmax.default, P._, P.any("d"), P.any("h")), {"d": 1, "h": 2}),
        (n["cast"], P.op(aten._to_copy.default, P._, dtype=P.any("t")), {"t": 1}),
        (sumd, P.op(aten.sum.dim_IntList, P._, P.any("d"), keepdim=P.any("k")), {"d": 1, "k": 2}),
    ]
    for node, pat, at in cases:
        m = match_rule(Rule("r", pat, _keep), node)
        assert isinstance(m, Match), node
        want = normalize(node)
        assert m.binds == {name: want[i] for name, i in at.items()}, node
    assert normalize(kw)[1:] == [1, 0] and normalize(sumd)[1:] == [[2], False, None]
    # a dim literal spelled negatively matches the keyword dim spelled negatively too
    minus_two = Rule("r", P.op(aten._softmax.default, P._, -2, 0), _keep)
    minus_one = Rule("r", P.op(aten._softmax.default, P._, -1, False), _keep)
    assert isinstance(match_rule(minus_two, kw), Match)
    assert match_rule(minus_one, kw) is None


def test_check_runs_once_per_solution_in_order() -> None:
    """Six solutions (one per branch); the check accepts only ``want``. Every solution up
    to it is checked exactly once, in order, and the first failure is the one reported
    when none passes; with a tracer alike."""
    _, n = _graph()
    branches = {f"t{i}": P.tensor("a") for i in range(6)}
    for want in ["t0", "t2", "t4", "t5", "none"]:
        for tracer in (None, Tracer()):
            seen: list[str] = []

            def check(m: Match, want: str = want, seen: list = seen) -> object:
                seen.append(m.tag("w"))
                return None if m.tag("w") == want else m.fail("not {t}", t=m.tag("w"))

            rule = Rule("r", P.op(aten.relu.default, P.alt("w", **branches)), _keep, check)
            res = match_rule(rule, n["out"], tracer)
            if want == "none":
                assert isinstance(res, Failure) and str(res) == "not t0"
                assert seen == list(branches)
            else:
                assert isinstance(res, Match) and res.tag("w") == want
                assert seen == list(branches)[: int(want[1:]) + 1]


def test_a_pattern_deeper_than_the_recursion_limit_matches() -> None:
    """The search runs in one frame: a chain of negs longer than the recursion limit
    matches (and a sweep rewrites it), with a tracer and without."""
    depth = sys.getrecursionlimit() + 100
    g, x, val = fake_input_graph(3)
    cur = x
    for _ in range(depth):
        cur = g.call_function(aten.neg.default, (cur,))
        cur.meta["val"] = val
    g.output(cur)
    pat: P.Pattern = P.tensor("x")
    for _ in range(depth):
        pat = P.op(aten.neg.default, pat)
    rule = Rule("deep", pat, _keep)
    for tracer in (None, Tracer()):
        m = match_rule(rule, cur, tracer)
        assert isinstance(m, Match) and m["x"] is x and len(m.nodes) == depth
    report = run_rules(g, RuleSet("s", [rule]), dry_run=True)
    assert report.counts == {"deep": 1}


def test_matching_never_prints_a_whole_pattern(monkeypatch) -> None:
    """Matching, explaining and sweeping must not ``repr`` a whole call pattern: shared
    sub-patterns print as a tree (46 MB, 3 s for the bundled FP8 rule)."""

    def refuse(self: object) -> str:
        raise AssertionError("repr of a whole call pattern")

    _, n = _graph()
    _, other = _graph()
    other["out"].target = aten.neg.default  # a near miss at the root's argument
    monkeypatch.setattr(P.Call, "__repr__", refuse)
    rule = Rule("r", _wrapped(), _keep)
    for tracer in (None, Tracer()):
        assert isinstance(match_rule(rule, n["out"], tracer), Match)
    tracer = Tracer()
    assert match_rule(rule, other["out"], tracer) is None
    assert str(tracer.failure)
    g, n = _graph()
    assert run_rules(g, RuleSet("s", [rule]), explain=True).counts == {"r": 1}


def test_a_named_maybe_used_twice_backtracks_cleanly() -> None:
    """A ``maybe`` named once and used at two places in one pattern sets its chain twice;
    backtracking past the second use gives the first value back (no KeyError), in apply,
    dry runs and explain alike."""
    import torch

    import graphfuse
    from graphfuse import dsl as P

    aten = torch.ops.aten
    casts = [aten.to.dtype, aten._to_copy.default]

    def upcast(name: str) -> P.Pattern:
        return P.maybe(casts, P.tensor(name), name="upcast")

    pat = P.op(aten.add.Tensor, upcast("a"), upcast("b"))
    # a rule whose structure fails after both maybes ran (alpha is 1), backtracking
    # through every chain length of both
    late = P.op(aten.add.Tensor, upcast("a"), upcast("b"), alpha=2)

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return x.float() + y.float() + x

    ep = torch.export.export(M(), (torch.randn(4, dtype=torch.bfloat16),) * 2)

    def rewrite(m: graphfuse.Match, b: graphfuse.Builder) -> torch.fx.Node:
        a, c = (b.call(aten._to_copy.default, m[n], dtype=torch.float32) for n in "ab")
        return b.call(aten.sub.Tensor, a, c)

    rules = graphfuse.RuleSet(
        "r", [graphfuse.Rule("fails_late", late, rewrite), graphfuse.Rule("sums", pat, rewrite)]
    )
    graphfuse.explain(ep, rules)
    assert graphfuse.apply(ep, rules, dry_run=True).report.counts["fails_late"] == 0
    graphfuse.apply(ep, rules)
