"""Round-2 matcher speed-ups, checked structurally: wrapper resolution (an ``alt`` or
``maybe`` passed through in one step) binds, tags, chains and counts visits as the traced
path does; a call's plan reads what ``normalize`` would; ``rule.check`` runs after the
search unwound, once per solution, picking the same solution; the fake cache tells ``2``
from ``2.0``; the sweep runs from a frame that reserves frame-stack room."""

from __future__ import annotations

import sys

import torch
from torch import fx

import graphfuse._engine as engine
import graphfuse._matcher as matcher
import graphfuse._runner as runner
import graphfuse._wrappers as wrappers
from graphfuse import Rule, RuleSet
from graphfuse import dsl as P
from graphfuse._args import normalize
from graphfuse._fake import FakePropagator
from graphfuse._match import Match
from graphfuse._match_rule import _MAX_RESEARCH, match_rule
from graphfuse._matcher import _Tracer
from tests.core._models import fake_input_graph

aten = torch.ops.aten


def _keep(m: Match, b: object) -> fx.Node:
    return m.root


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


def test_resolved_wrappers_match_as_the_traced_path() -> None:
    _, n = _graph()
    rule = Rule("r", _wrapped(), _keep)
    results = []
    for tracer in (None, _Tracer()):
        before = matcher.VISITS[0]
        m = match_rule(rule, n["out"], tracer)
        assert isinstance(m, Match)
        results.append((m.binds, m.tags, m.chains, m.nodes, m.dims, matcher.VISITS[0] - before))
    assert results[0] == results[1]
    assert results[0][1] == {"spelling": "mul"}
    assert results[0][2] == {"c": (n["cast"],), "v": ()}
    # the fast path went through the per-target resolution of the top alt
    top = engine.compiled(rule.patterns[0]).plans[id(aten.relu.default)].items[0][1]
    final, tags, chains, skipped = wrappers._resolution(top, n["mul"])
    assert tags == (("spelling", "mul"),) and chains == () and skipped == 2
    assert isinstance(final, engine._CCall)


def test_resolution_that_cannot_match_fails() -> None:
    """A maybe with no chain at the value whose inner pattern cannot start there resolves
    to a certain failure (one visit, as the wrapper itself would count)."""
    _, n = _graph()
    pat = P.maybe([aten.view.default], P.op(aten.neg.default, P._), name="v")
    final, tags, chains, skipped = wrappers._resolution(engine.compiled(pat), n["mul"])
    assert final is wrappers._FAIL and skipped == 1
    st = matcher._State(None)
    assert engine.compiled(pat).m(n["mul"], st, None, lambda: True) is False
    assert st.visits == 1 and not st.trail


def test_plan_read_is_normalize_at_the_positions_it_reads() -> None:
    g, n = _graph()
    with g.inserting_before(n["out"]):
        kw = g.call_function(aten._softmax.default, (n["perm"],), {"dim": -2, "half_to_float": 0})
        sumd = g.call_function(aten.sum.dim_IntList, (n["perm"], [-1]))
    nodes = [n["sm"], kw, n["cast"], sumd]
    for node, pat in zip(
        nodes,
        [
            P.op(aten._softmax.default, P._, P.any("d"), P._),
            P.op(aten._softmax.default, P._, P.any("d"), P.any("h")),
            P.op(aten._to_copy.default, P._, dtype=P.any("t")),
            P.op(aten.sum.dim_IntList, P._, P.any("d"), keepdim=P.any("k")),
        ],
    ):
        plan = engine._Plan(engine.compiled(pat), node.target)
        assert plan.reads is not None
        got, want = plan.read(node), normalize(node)
        for i, *_ in plan.reads:
            assert got[i] == want[i], (node, i)
    pat = P.op(aten._softmax.default, P._, -1, False)
    assert engine._Plan(engine.compiled(pat), kw.target).read(kw)[1] == 1


def test_check_runs_after_the_search_once_per_solution() -> None:
    """Six solutions (one per branch); the check accepts only ``want``. Every solution up
    to it is checked exactly once, in order (first ones after the search unwound, the
    rest in place), and the first failure is the one reported when none passes."""
    _, n = _graph()
    branches = {f"t{i}": P.tensor("a") for i in range(6)}
    for want in ["t0", "t2", f"t{_MAX_RESEARCH + 1}", "t5", "none"]:
        seen: list[str] = []

        def check(m: Match, want: str = want, seen: list = seen) -> object:
            seen.append(m.tag("w"))
            return None if m.tag("w") == want else m.fail("not {t}", t=m.tag("w"))

        rule = Rule("r", P.op(aten.relu.default, P.alt("w", **branches)), _keep, check)
        res = match_rule(rule, n["out"])
        if want == "none":
            assert not isinstance(res, Match) and res is not None
            assert "t0" in str(res.info)
            assert seen == list(branches)
        else:
            assert isinstance(res, Match) and res.tag("w") == want
            assert seen == list(branches)[: int(want[1:]) + 1]
        seen.clear()
        traced = match_rule(rule, n["out"], _Tracer())
        assert (traced.tag("w") if isinstance(traced, Match) else "none") == want


def test_fake_cache_tells_int_float_and_bool_scalars_apart() -> None:
    _, x, _ = fake_input_graph(3, dtype=torch.int64)
    fake = FakePropagator()
    assert fake(aten.mul.Tensor, (x, 2), {}).dtype == torch.int64
    assert fake(aten.mul.Tensor, (x, 2.0), {}).dtype == torch.float32
    assert fake(aten.mul.Tensor, (x, True), {}).dtype == torch.int64
    assert fake.misses == 3 and fake.hits == 0
    fake(aten.mul.Tensor, (x, 2.0), {})
    assert fake.hits == 1


def test_sweep_runs_in_a_frame_that_reserves_stack() -> None:
    if sys.version_info[:2] == (3, 11):
        assert runner._reserved_frame.__code__.co_nlocals >= runner._RESERVE_LOCALS
    g, _ = _graph()
    stacks: list[list[str]] = []

    def progress(done: int, total: int) -> None:
        f, names = sys._getframe(), []
        while f is not None:
            names.append(f.f_code.co_name)
            f = f.f_back
        stacks.append(names)

    report = runner.run_rules(g, RuleSet("s", [Rule("r", _wrapped(), _keep)]), progress=progress)
    assert report.counts == {"r": 1}
    assert stacks and all("_reserved_frame" in names for names in stacks)


def test_generated_code_is_labelled_without_printing_whole_patterns(monkeypatch) -> None:
    """Generating the fast path must not ``repr`` a whole pattern: shared sub-patterns
    print as a tree (46 MB, 3 s for the bundled FP8 rule), which once made the first
    rewrite of every process 1.5 s slower."""
    import graphfuse._codegen as codegen

    def refuse(self: object) -> str:
        raise AssertionError("repr of a whole call pattern")

    monkeypatch.setattr(P.Call, "__repr__", refuse)
    _, n = _graph()
    rule = Rule("r", _wrapped(), _keep)
    assert isinstance(match_rule(rule, n["out"], None), Match)
    label = codegen.label(rule.patterns[0])
    assert label.startswith("P.op(aten.relu, P.alt(None, 2 branches)") and len(label) < 80
    deep = P.op(aten.neg.default, P.op(aten.neg.default, P.op(aten.neg.default, P._)))
    assert codegen.label(deep) == "P.op(aten.neg, P.op(aten.neg, P.op(aten.neg, …)))"
