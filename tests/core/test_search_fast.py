"""Session 7 search speed-ups, checked against the traced path and against the generated
code without them: dims read as the node spells them (a literal compares them as spelled
first), visits counted once per straight run of tests, exact literals in the quick
reject, maybe chains walked through per-path step tables."""

from __future__ import annotations

import gc
import types
from collections.abc import Callable

import pytest
import torch
from torch import fx

import graphfuse._leafcode as leafcode
import graphfuse._match_rule as match_rule_mod
import graphfuse._matcher as matcher
from graphfuse import Rule
from graphfuse import dsl as P
from graphfuse._match import Match
from graphfuse._match_rule import _quick_reject, match_rule
from graphfuse._matcher import _Tracer
from tests.core._models import fake_input_graph
from tests.core._outcomes import keep_root as _keep
from tests.core._outcomes import match_outcome as _outcome

aten = torch.ops.aten
prims = torch.ops.prims


def _softmax_graph(dim: object, kw: bool = False) -> tuple[fx.Graph, fx.Node]:
    """x (2, 3, 4) -> permute([0, 2, 1]) -> _softmax(dim) -> neg, dim positional or kw."""
    g, x, val = fake_input_graph(2, 3, 4)
    p = g.call_function(aten.permute.default, (x, [0, 2, 1]))
    if kw:
        s = g.call_function(aten._softmax.default, (p,), {"dim": dim, "half_to_float": False})
    else:
        s = g.call_function(aten._softmax.default, (p, dim, False))
    out = g.call_function(aten.neg.default, (s,))
    for n in (p, s, out):
        n.meta["val"] = val
    g.output(out)
    return g, out


def _softmax_pattern(dim: P.Pattern) -> P.Pattern:
    inner = P.op(aten.permute.default, P.tensor("x"), [0, 2, 1])
    return P.op(aten.neg.default, P.op(aten._softmax.default, inner, dim, False))


# dims spelled both ways, in the pattern and in the node (rank 3: -1 is 2, -3 is 0)
@pytest.mark.parametrize("spelled", [-1, 2, -2, 1])
@pytest.mark.parametrize("wanted", [-1, 2, -3, 0])
@pytest.mark.parametrize("kw", [False, True])
def test_dim_literals_compare_as_made_non_negative(spelled: int, wanted: int, kw: bool) -> None:
    g, out = _softmax_graph(spelled, kw)
    rule = Rule("sm", _softmax_pattern(P.lit(wanted)), _keep)
    fast, traced = _outcome(rule, out, None), _outcome(rule, out, _Tracer())
    same = spelled % 3 == wanted % 3
    assert (fast[0] is not None) == same
    assert (traced[0] is not None) == same
    if same:
        assert fast == traced


@pytest.mark.parametrize("spelled", [-1, 2, [-1], [2], [0, -1]])
def test_captured_and_listed_dims_are_made_non_negative(spelled: object) -> None:
    """A capture at a dim binds the dim made non-negative (read as before); a list
    literal compares as spelled, then made non-negative."""
    g, x, val = fake_input_graph(2, 3, 4)
    s = g.call_function(aten.sum.dim_IntList, (x, spelled, True))
    s.meta["val"] = val
    g.output(s)
    want = 2 if isinstance(spelled, int) else [2] if len(spelled) == 1 else [0, 2]
    for dim, binds in ((P.any("d"), True), (P.lit(want), False), (P.lit(spelled), False)):
        rule = Rule("sum", P.op(aten.sum.dim_IntList, P.tensor("x"), dim, True), _keep)
        fast, traced = _outcome(rule, s, None), _outcome(rule, s, _Tracer())
        assert fast[0] is not None and fast == traced
        if binds:
            assert list(fast[0]["d"]) == want if isinstance(want, list) else fast[0]["d"] == want
        if isinstance(spelled, list):
            # a wrong list never matches
            bad = Rule("bad", P.op(aten.sum.dim_IntList, P.tensor("x"), [1], True), _keep)
            assert _outcome(bad, s, None)[0] is None


def _eager_visits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Generated code as before the merge: each visit added where it is counted."""

    def visit(self: leafcode._Source, n: int = 1) -> None:
        if n:
            self.emit(f"st.visits += {n}")

    monkeypatch.setattr(leafcode._Source, "visit", visit)


def _chain_variants() -> list[tuple[fx.Graph, fx.Node]]:
    """The chain of ``_chain_pattern``, whole and broken at each depth."""
    out = []
    for broken in ("none", "neg_arg", "sm_dim", "sm_flag", "perm", "perm_dims", "exp", "x"):
        g, x, val = fake_input_graph(2, 3, 3)
        src = g.placeholder("y") if broken == "x" else x
        src.meta["val"] = val if broken != "x" else 1.0
        e = g.call_function(aten.relu.default if broken == "exp" else aten.exp.default, (src,))
        perm = [0, 1, 2] if broken == "perm_dims" else [0, 2, 1]
        t = aten.clone.default if broken == "perm" else aten.permute.default
        p = g.call_function(t, (e, perm) if t is aten.permute.default else (e,))
        s = g.call_function(
            aten._softmax.default,
            (p, 1 if broken == "sm_dim" else 2, broken == "sm_flag"),
        )
        out_node = g.call_function(aten.neg.default, (e if broken == "neg_arg" else s,))
        for n in (e, p, s, out_node):
            n.meta["val"] = val
        g.output(out_node)
        out.append((g, out_node))
    return out


def _chain_pattern() -> P.Pattern:
    x = P.tensor("x")
    inner = P.op(aten.permute.default, P.op(aten.exp.default, x), [0, 2, 1])
    return P.op(aten.neg.default, P.op(aten._softmax.default, inner, -1, False))


def _wrapped_pattern() -> P.Pattern:
    """Alts, maybes and a shared (named) call: continuations and resolved wrappers."""
    x = P.tensor("x", shape=("B", "S", "D"))
    e = P.op(aten.exp.default, x, name="e")
    inner = P.op(aten.permute.default, P.maybe([aten.clone.default], e, name="c"), [0, 2, 1])
    sm = P.op(aten._softmax.default, P.alt("how", plain=inner, other=e), -1, False)
    return P.op(aten.neg.default, P.maybe([aten.view.default], sm, name="v"))


@pytest.mark.parametrize("make", [_chain_pattern, _wrapped_pattern])
def test_merged_visits_total_as_counted_one_by_one(
    monkeypatch: pytest.MonkeyPatch, make: Callable[[], P.Pattern]
) -> None:
    """Generated code adds a straight run's visits in one step: matched or failed at any
    depth, a search counts what the code counting each visit where it happens counts."""
    merged_rule = Rule("merged", make(), _keep)
    results_merged = [_outcome(merged_rule, out, None) for _, out in _chain_variants()]
    with monkeypatch.context() as mp:
        _eager_visits(mp)
        eager_rule = Rule("eager", make(), _keep)  # new pattern objects: new generated code
        results_eager = [_outcome(eager_rule, out, None) for _, out in _chain_variants()]
    assert len({r[0] is None for r in results_merged}) == 2  # some match, some fail
    for merged, eager in zip(results_merged, results_eager, strict=True):
        assert (merged[0] is None) == (eager[0] is None)
        assert merged[-1] == eager[-1]
    if make is _chain_pattern:
        # one function (every call inlined), whose path to ``k()`` adds its visits once
        # (each failure's exit adds what that path counted)
        (fn,) = _generated(merged_rule.patterns[0])
        assert _on_the_way(fn.source) == 1
        (fn,) = _generated(eager_rule.patterns[0])
        assert _on_the_way(fn.source) >= 8


def _on_the_way(source: str) -> int:
    """Visit increments not followed by a failure's exit."""
    lines = [line.strip() for line in source.splitlines()]
    return sum(
        1
        for i, line in enumerate(lines)
        if line.startswith("st.visits +=")
        and not lines[i + 1].startswith(("break", "return False", "st.undo"))
    )


def _generated(pat: P.Pattern) -> list:
    from graphfuse._engine import compiled

    c = compiled(pat)
    return [plan.generated for plan in c.plans.values() if plan.generated is not None]


def test_exact_literal_rejects_before_the_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """A root argument that is a dtype literal is probed by the quick reject: a cast to
    another dtype costs no search, and with the quick reject off the search finds no
    match there either (the reject is exact); the tracer's explanation is unchanged."""
    g, x, val = fake_input_graph(4, 4)
    a1 = g.call_function(prims.convert_element_type.default, (x, torch.bfloat16))
    a2 = g.call_function(prims.convert_element_type.default, (x, torch.bfloat16))
    b = g.call_function(prims.convert_element_type.default, (a1, torch.float16))
    c = g.call_function(prims.convert_element_type.default, (a2, torch.float32))
    for n in (a1, a2, b, c):
        n.meta["val"] = val
    g.output((b, c))
    inner = P.op(prims.convert_element_type.default, P.tensor("x"), torch.bfloat16)
    pat = P.op(prims.convert_element_type.default, inner, torch.float16)
    rule = Rule("cast", pat, _keep)
    assert not _quick_reject(pat, b)
    assert _quick_reject(pat, c)
    assert isinstance(match_rule(rule, b), Match)
    before = matcher.VISITS[0]
    assert match_rule(rule, c) is None
    assert matcher.VISITS[0] == before  # rejected unvisited
    tracer = _Tracer()
    assert match_rule(rule, c, tracer) is None and tracer.failure is not None
    monkeypatch.setattr(match_rule_mod, "_quick_reject", lambda pat, node: False)
    assert match_rule(rule, c) is None
    assert isinstance(match_rule(rule, b), Match)


def test_exact_literal_probe_leaves_numbers_to_the_search() -> None:
    """Numbers compare across kinds (``-448`` matches ``-448.0``): no probe for them."""
    g, x, val = fake_input_graph(4)
    n = g.call_function(aten.clamp.default, (x, -448.0, 448.0))
    n.meta["val"] = val
    g.output(n)
    rule = Rule("clamp", P.op(aten.clamp.default, P.tensor("x"), -448, 448), _keep)
    assert not _quick_reject(rule.patterns[0], n)
    assert isinstance(match_rule(rule, n), Match)


def test_maybe_chain_steps_match_as_the_traced_path() -> None:
    """view -> expand -> view -> relu: the inner pattern may start at a middle step and
    at the end; longest chain first on both paths, with the same chain, nodes, visits."""
    g, x, val = fake_input_graph(2, 3)
    r = g.call_function(aten.relu.default, (x,))
    v1 = g.call_function(aten.view.default, (r, [2, 3]))
    e = g.call_function(aten.expand.default, (v1, [2, 3]))
    v2 = g.call_function(aten.view.default, (e, [2, 3]))
    out = g.call_function(aten.neg.default, (v2,))
    for n in (r, v1, e, v2, out):
        n.meta["val"] = val
    g.output(out)
    chain_ops = [aten.view.default, aten.expand.default]
    for inner in (
        P.op(aten.relu.default, P.tensor("x")),
        P.op(aten.expand.default, P._, P._),  # a chain op: tried at its step
        P.alt("k", r=P.op(aten.relu.default, P._), e=P.op(aten.expand.default, P._, P._)),
        P.tensor("x"),
    ):
        pat = P.op(aten.neg.default, P.maybe(chain_ops, inner, name="ch"))
        rule = Rule("m", pat, _keep)
        fast, traced = _outcome(rule, out, None), _outcome(rule, out, _Tracer())
        assert fast[0] is not None
        assert fast[:-1] == traced[:-1] and fast[-1] <= traced[-1]
    # a where-test that stops the chain at the expand
    pat = P.op(
        aten.neg.default,
        P.maybe(chain_ops, P._, name="ch", where=lambda n: n.target is aten.view.default),
    )
    rule = Rule("w", pat, _keep)
    fast, traced = _outcome(rule, out, None), _outcome(rule, out, _Tracer())
    assert fast[:-1] == traced[:-1]
    assert fast[2] == {"ch": (v2,)}


def test_tags_recorded_in_one_step_are_undone_together() -> None:
    """Nested named alts resolved to one call record their tags in one step; where that
    call then fails, all of them are undone before the next branch (as on the traced
    path)."""
    g, x, val = fake_input_graph(4)
    mul = g.call_function(aten.mul.Tensor, (x, 2.0))
    out = g.call_function(aten.neg.default, (mul,))
    for n in (mul, out):
        n.meta["val"] = val
    g.output(out)
    nested = P.alt("t1", one=P.alt("t2", two=P.op(aten.mul.Tensor, P._, 3.0)))
    outer = P.alt("outer", first=nested, second=P.op(aten.mul.Tensor, P.tensor("x"), 2.0))
    rule = Rule("tags", P.op(aten.neg.default, outer), _keep)
    fast, traced = _outcome(rule, out, None), _outcome(rule, out, _Tracer())
    assert fast[0] is not None
    assert fast[1] == {"outer": "second"}
    assert fast[:-1] == traced[:-1]
    # and the code that recorded them did it in one step
    recorded = [
        f
        for f in gc.get_objects()
        if type(f) is types.FunctionType
        and "table.update(" in getattr(f, "source", "")
        and {"t1": "one", "t2": "two"} in f.__globals__.values()
    ]
    assert recorded
