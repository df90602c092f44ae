"""A run's work grows linearly with the graph, checked by counting (never by the clock):
the matcher's goals (``State.steps``, summed over every search of a run) and the calls of
``match_rule`` along chains of N blocks, the nodes ``apply`` creates, and the fake-value
propagations of N same-shaped rewrites; a sub-pattern that a traced pattern uses more than
once is walked once per match, not once per path."""

from __future__ import annotations

import collections
from typing import Any

import pytest
import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode

import graphfuse
import graphfuse.match.search as search
import graphfuse.run.sweep as sweep
from graphfuse import Rule, RuleSet
from graphfuse import dsl as P
from graphfuse.match import Match, match_rule
from graphfuse.match.state import State
from graphfuse.rewrite import FakePropagator
from graphfuse.run import run_rules
from tests._models import SiluChain, export, gftest

from ._workloads import check_graph

aten = torch.ops.aten
BF16, FP8 = torch.bfloat16, torch.float8_e4m3fn
FUSED = torch.ops.graphfuse.attention_fp8.default


def chain(n: int) -> fx.GraphModule:
    """N blocks ``matmul -> mul -> softmax -> matmul -> div -> clamp -> to(fp8)``, each
    feeding the next through a cast to bf16 (9 nodes a block, fake values shared)."""
    with FakeTensorMode():
        q = torch.empty(1, 2, 8, 16, dtype=BF16)
        kt = torch.empty(1, 2, 16, 8, dtype=BF16)
        sc = torch.empty(1, 2, 8, 8, dtype=BF16)
        s = torch.empty(())
        o8 = torch.empty(1, 2, 8, 16, dtype=FP8)
    g = fx.Graph()
    x, k, v, sn = (g.placeholder(name) for name in "xkvs")
    for node, val in ((x, q), (k, q), (v, q), (sn, s)):
        node.meta["val"] = val

    def call(target: object, *args: object, val: torch.Tensor) -> fx.Node:
        node = g.call_function(target, args)
        node.meta["val"] = val
        return node

    for _ in range(n):
        a = call(aten.matmul.default, x, call(aten.transpose.int, k, 2, 3, val=kt), val=sc)
        a = call(aten.softmax.int, call(aten.mul.Tensor, a, 0.125, val=sc), -1, val=sc)
        a = call(aten.div.Tensor, call(aten.matmul.default, a, v, val=q), sn, val=q)
        a = call(aten.to.dtype, call(aten.clamp.default, a, -448, 448, val=q), FP8, val=o8)
        x = call(aten.to.dtype, a, BF16, val=q)
    g.output(x)
    return fx.GraphModule(torch.nn.Module(), g)


def _attention_rules() -> RuleSet:
    x, k, v, s = P.tensor("x"), P.tensor("k"), P.tensor("v"), P.tensor("s")
    kt = P.op(aten.transpose.int, k, 2, 3) | P.op(aten.permute.default, k, [0, 1, 3, 2])
    logits = P.op(aten.matmul.default, x, kt)
    scaled = P.alt(mul=P.op(aten.mul.Tensor, logits, P.scalar("c")), none=logits)
    probs = P.op([aten.softmax.int, aten._softmax.default], scaled, -1)
    attn = P.op(aten.matmul.default, probs, v)
    quant = P.op(aten.to.dtype, P.op(aten.clamp.default, P.op(aten.div.Tensor, attn, s), -448, 448))

    def rewrite(m: graphfuse.Match, b: graphfuse.Builder) -> fx.Node:
        args = (m["x"], m["k"], m["v"], None, None, None, None, "none", 0.125, "bhsd")
        return b.call(FUSED, *args, "default", m["s"])

    return RuleSet("local", [Rule("attn_fp8", quant, rewrite, priority=1)])


class Work:
    """Counts, while installed, the searches' goals (``steps``) and the sweep's
    ``match_rule`` calls."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.states: list[State] = []
        self.calls = 0
        states = self.states

        class Counted(State):
            __slots__ = ()

            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                states.append(self)

        real = sweep.match_rule

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(search, "State", Counted)
        monkeypatch.setattr(sweep, "match_rule", counted)

    def take(self) -> dict[str, int]:
        """The counts since the last ``take`` (and start again from zero)."""
        out = {"steps": sum(st.steps for st in self.states), "match_rule": self.calls}
        self.states.clear()
        self.calls = 0
        return out


@pytest.fixture
def work(monkeypatch: pytest.MonkeyPatch) -> Work:
    return Work(monkeypatch)


def _dry(work: Work, gm: fx.GraphModule, rules: RuleSet) -> dict[str, int]:
    work.take()
    report = run_rules(gm.graph, rules, dry_run=True)
    return {**work.take(), "fired": report.total}


@pytest.mark.parametrize("rules", ["local", "trtllm"])
def test_matcher_work_is_linear_in_blocks(work: Work, rules: str) -> None:
    rule_set = _attention_rules() if rules == "local" else graphfuse.load_patterns("trtllm")
    c8, c16, c32 = (_dry(work, chain(n), rule_set) for n in (8, 16, 32))
    print(f"{rules}: 8 blocks {c8}, 16 blocks {c16}, 32 blocks {c32}")
    assert c8["fired"] >= 8 and c32["fired"] == 2 * c16["fired"] == 4 * c8["fired"]
    assert c8["steps"] > 8 * 7  # every block was searched (7 ops a match at least)
    # Linear: 16 more blocks cost twice what 8 more blocks cost (block 0, with no cast in
    # front, may differ; a per-match scan of the graph would make the increments grow).
    for key in ("steps", "match_rule"):
        assert c32[key] - c16[key] == pytest.approx(2 * (c16[key] - c8[key]), rel=0.05), key


def test_apply_fuses_every_block_with_linear_work(work: Work, monkeypatch) -> None:
    """The matcher's goals and the nodes created: the copy of the input, one replacement a
    block, and nothing else (no node built twice, no failed attempt left to erase)."""
    made = collections.Counter()
    init = fx.Node.__init__

    def counted(self: fx.Node, *args: object, **kwargs: object) -> None:
        made["nodes"] += 1
        init(self, *args, **kwargs)

    monkeypatch.setattr(fx.Node, "__init__", counted)
    steps, extra = {}, {}
    for n in (10, 40):
        gm = chain(n)
        made.clear()
        work.take()
        res = graphfuse.apply(gm, _attention_rules())
        steps[n] = work.take()["steps"]
        out = res.program.graph
        check_graph(out)
        assert len(out.find_nodes(op="call_function", target=FUSED)) == n
        assert not out.find_nodes(op="call_function", target=aten.softmax.int)
        assert len(out.nodes) == 4 + 2 * n + 1  # placeholders, fused + cast a block, output
        extra[n] = made["nodes"] - len(gm.graph.nodes) - n
    assert extra[10] == extra[40] <= 2, extra  # (whatever fx's GraphModule makes for itself)
    assert steps[40] <= 4.2 * steps[10], steps


def test_fake_propagation_is_cached_per_metadata(monkeypatch) -> None:
    """One fake-impl call for N same-shaped rewrites (the rest are cache hits)."""
    fake = FakePropagator()
    monkeypatch.setattr(sweep, "FakePropagator", lambda: fake)
    report = run_rules(chain(20).graph, _attention_rules())
    assert report.counts["attn_fp8"] == 20
    assert fake.misses == 1 and fake.hits == 19


X = P.tensor("x")
SILU = P.op(aten.mul, X, P.op(aten.sigmoid, X), commutative=True)


def _silu_rules() -> RuleSet:
    def tanh_form(m: graphfuse.Match, b: graphfuse.Builder) -> fx.Node:
        t = b.call(aten.tanh.default, b.call(aten.mul.Tensor, m["x"], 0.5))
        return b.call(aten.mul.Tensor, b.call(aten.add.Tensor, t, 1.0), 0.5)

    return RuleSet(
        "silu",
        [
            Rule("aten_silu", SILU, lambda m, b: b.call(aten.silu.default, m["x"])),
            Rule("sigmoid_tanh", P.op(aten.sigmoid, X), tanh_form, priority=-1),
            Rule("custom", SILU, lambda m, b: b.call(gftest.silu.default, m["x"]), priority=-2),
        ],
    )


def test_apply_work_is_linear_in_graph_size(work: Work) -> None:
    """Chains of N silu blocks (``x = x * sigmoid(x) + 1``) under three overlapping rules."""
    seen = {}
    for n in (4, 16, 64):
        ep = export(SiluChain(n), (torch.randn(4),))
        work.take()
        res = graphfuse.apply(ep, _silu_rules())
        assert res.report.counts == {"aten_silu": n, "sigmoid_tanh": 0, "custom": 0}
        seen[n] = work.take()
        # per block, 3 candidates (2 rules at the mul, 1 at the sigmoid): aten_silu, first,
        # fires; the other two find their nodes gone and are skipped without a search
        assert seen[n]["match_rule"] == n, (n, seen[n])
        assert seen[n]["steps"] <= 8 * n, (n, seen[n])
    assert seen[64]["match_rule"] <= 16 * seen[4]["match_rule"] + 8
    assert seen[64]["steps"] <= 16 * seen[4]["steps"] + 40


def test_shared_nodes_of_a_traced_pattern_are_walked_once(work: Work) -> None:
    """A traced pattern names the nodes it uses twice; the matcher walks the sub-pattern
    under such a node once per match, not once per use (goals stay linear in the
    pattern's nodes, not in its paths)."""

    def pattern(x: torch.Tensor) -> torch.Tensor:
        a = torch.tanh(torch.sin(torch.cos(x)))  # a deep node used four times
        b = a * a
        return (b + b).exp()

    def replacement(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

    rule = graphfuse.traced_rule("diamonds", pattern, replacement, [torch.randn(4)])

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return pattern(x) + 1

    ep = torch.export.export(M(), (torch.randn(4),))
    work.take()
    report = run_rules(ep.graph_module.graph, RuleSet("d", [rule]), dry_run=True)
    steps = work.take()["steps"]
    assert report.counts["diamonds"] == 1
    # 6 call nodes, one capture, 2 second uses: 9 goals (one more for slack); walking every
    # path would take the cos/sin/tanh chain 4 times (over 20)
    assert steps <= 10, steps


def test_a_doubling_shared_pattern_is_walked_once(work: Work) -> None:
    """A pattern whose shared sub-pattern doubles at every level (2**8 paths): each shared
    call is walked once, met again at its second use."""
    with FakeTensorMode():
        val = torch.empty(4)
    g = fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = val
    pat: P.Pattern = P.op(aten.neg.default, P.tensor("x"), name="n0")
    node = g.call_function(aten.neg.default, (x,))
    node.meta["val"] = val
    for i in range(1, 9):
        pat = P.op(aten.add.Tensor, pat, pat, name=f"n{i}")
        node = g.call_function(aten.add.Tensor, (node, node))
        node.meta["val"] = val
    g.output(node)
    work.take()
    assert isinstance(match_rule(Rule("doubling", pat, lambda m, b: m.root), node), Match)
    assert work.take()["steps"] <= 18  # 9 calls, the capture, 8 second uses
