"""Complexity guards, structural (never wall-clock): matcher work per block is constant
along a chain of N attention blocks, and the rewriter's cycle check stays between a
match's earliest root and its latest input."""

from __future__ import annotations

import collections
import dataclasses

import pytest
import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode

import graphfuse
import graphfuse._match_rule as rule_matcher
import graphfuse._matcher as matcher
from graphfuse import Rule, RuleSet
from graphfuse import dsl as P
from graphfuse._fake import FakePropagator
from graphfuse._rewriter import _depends_on_roots
from graphfuse._runner import run_rules

aten = torch.ops.aten
BF16, FP8 = torch.bfloat16, torch.float8_e4m3fn


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


def _local_rules() -> RuleSet:
    x, k, v, s = P.tensor("x"), P.tensor("k"), P.tensor("v"), P.tensor("s")
    kt = P.op(aten.transpose.int, k, 2, 3) | P.op(aten.permute.default, k, [0, 1, 3, 2])
    logits = P.op(aten.matmul.default, x, kt)
    scaled = P.alt(mul=P.op(aten.mul.Tensor, logits, P.scalar("c")), none=logits)
    probs = P.op([aten.softmax.int, aten._softmax.default], scaled, -1)
    attn = P.op(aten.matmul.default, probs, v)
    quant = P.op(aten.to.dtype, P.op(aten.clamp.default, P.op(aten.div.Tensor, attn, s), -448, 448))

    def rewrite(m: graphfuse.Match, b: graphfuse.Builder) -> fx.Node:
        args = (m["x"], m["k"], m["v"], None, None, None, None, "none", 0.125, "bhsd")
        return b.call(torch.ops.graphfuse.attention_fp8.default, *args, "default", m["s"])

    return RuleSet("local", [Rule("attn_fp8", quant, rewrite, priority=1)])


def _count_visits(monkeypatch: pytest.MonkeyPatch, gm: fx.GraphModule, rules: RuleSet) -> dict:
    """Pattern-node visits of the matcher (``_m``) and calls of ``match_rule`` in one dry
    run."""
    counts: collections.Counter = collections.Counter()
    outer = rule_matcher.match_rule
    visits0 = matcher.VISITS[0]

    def counted_rule(*args: object, **kwargs: object):  # noqa: ANN202
        counts["match_rule"] += 1
        return outer(*args, **kwargs)

    monkeypatch.setattr("graphfuse._runner.match_rule", counted_rule)
    report = run_rules(gm.graph, rules, dry_run=True)
    monkeypatch.undo()
    counts["_m"] = matcher.VISITS[0] - visits0
    counts["fired"] = sum(report.counts.values())
    return dict(counts)


@pytest.mark.parametrize("rules", ["local", "trtllm"])
def test_matcher_work_is_linear_in_blocks(monkeypatch: pytest.MonkeyPatch, rules: str) -> None:
    rule_set = _local_rules() if rules == "local" else graphfuse.load_patterns("trtllm")
    c8, c16, c32 = (_count_visits(monkeypatch, chain(n), rule_set) for n in (8, 16, 32))
    print(f"{rules}: 8 blocks {c8}, 16 blocks {c16}, 32 blocks {c32}")
    assert c8["fired"] >= 8 and c32["fired"] == 2 * c16["fired"] == 4 * c8["fired"]
    # Linear: 16 more blocks cost twice what 8 more blocks cost (block 0, with no cast in
    # front, may differ; a per-match scan of the graph would make the increments grow).
    for key in ("_m", "match_rule"):
        assert c32[key] - c16[key] == pytest.approx(2 * (c16[key] - c8[key]), rel=0.05), key


def test_apply_fuses_every_block_with_linear_visits(monkeypatch: pytest.MonkeyPatch) -> None:
    per_n = {}
    for n in (10, 40):
        visits0 = matcher.VISITS[0]
        res = graphfuse.apply(chain(n), _local_rules())
        fused = res.program.graph.find_nodes(
            op="call_function", target=torch.ops.graphfuse.attention_fp8.default
        )
        assert len(fused) == n
        assert not res.program.graph.find_nodes(op="call_function", target=aten.softmax.int)
        per_n[n] = matcher.VISITS[0] - visits0
    assert per_n[40] <= 4.2 * per_n[10], per_n


def test_cycle_check_stays_between_roots_and_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2-root match at the end of a long graph: the dependency search looks only at nodes
    from the earliest root on, never at the 2,000-node prefix."""
    g = fx.Graph()
    a = g.placeholder("a")
    for _ in range(2000):
        a = g.call_function(aten.neg.default, (a,))
    prefix_end = a
    r1 = g.call_function(aten.relu.default, (a,))
    mid = g.call_function(aten.sin.default, (r1,))  # input after the root, depends on it
    other = g.call_function(aten.cos.default, (a,))  # input after the root, independent
    r2 = g.call_function(aten.add.Tensor, (mid, other))
    g.output((r2,))

    touched: list[fx.Node] = []
    original = fx.Node.all_input_nodes

    def spy(self: fx.Node) -> list[fx.Node]:
        touched.append(self)
        return original.fget(self)  # type: ignore[union-attr]

    monkeypatch.setattr(fx.Node, "all_input_nodes", property(spy))
    assert _depends_on_roots([mid], (r1, r2)) is r1
    assert _depends_on_roots([other], (r1, r2)) is None
    monkeypatch.undo()
    assert touched, "the search visited nothing"
    assert all(n._sort_key > prefix_end._sort_key for n in touched), [n.name for n in touched]
    assert len(touched) <= 4


def test_fake_propagation_is_cached_per_metadata() -> None:
    """One fake-impl call for N same-shaped rewrites (the rest are cache hits)."""
    gm = chain(20)
    fake = FakePropagator()
    import graphfuse._runner as runner

    real = runner.FakePropagator
    runner.FakePropagator = lambda: fake  # type: ignore[assignment]
    try:
        report = run_rules(gm.graph, _local_rules())
    finally:
        runner.FakePropagator = real  # type: ignore[assignment]
    assert report.counts["attn_fp8"] == 20
    assert fake.misses == 1 and fake.hits == 19


def test_shared_nodes_of_a_traced_pattern_are_walked_once() -> None:
    """A traced pattern names the nodes it uses twice; the matcher walks the sub-pattern
    under such a node once per match, not once per use (visits stay linear in the
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
    before = matcher.VISITS[0]
    report = run_rules(ep.graph_module.graph, RuleSet("d", [rule]), dry_run=True)
    visits = matcher.VISITS[0] - before
    assert report.counts["diamonds"] == 1
    # 6 call nodes and one capture: walking every path would visit the cos/sin/tanh
    # chain 4 times (over 20 visits); each node once (plus its second-use hit) is 10.
    assert visits <= 12, visits


def test_planned_apply_copies_only_what_survives(monkeypatch: pytest.MonkeyPatch) -> None:
    """With local rules, the first sweep is matched on the input and the output built in
    one pass: the nodes a match removes are never created, each match costs one stand-in
    (the root's bare copy, erased when replaced), and the matcher's work stays linear."""
    from graphfuse import _plan

    (rule,) = _local_rules()
    rules = RuleSet("local", [dataclasses.replace(rule, local=True)])
    made = collections.Counter()
    init = fx.Node.__init__

    def counted(self: fx.Node, *args: object, **kwargs: object) -> None:
        made["nodes"] += 1
        init(self, *args, **kwargs)

    monkeypatch.setattr(fx.Node, "__init__", counted)
    visits, extra = {}, {}
    for n in (10, 40):
        gm = chain(n)
        made.clear()
        planned, visits0 = _plan.STATS["planned"], matcher.VISITS[0]
        res = graphfuse.apply(gm, rules)
        visits[n] = matcher.VISITS[0] - visits0
        assert _plan.STATS["planned"] == planned + 1
        out = res.program.graph
        assert (
            len(
                out.find_nodes(op="call_function", target=torch.ops.graphfuse.attention_fp8.default)
            )
            == n
        )
        # every node made is in the output, but for one stand-in per match and whatever
        # fx's GraphModule makes for itself (copying the whole input would make 9 a block)
        extra[n] = made["nodes"] - len(out.nodes) - n
    assert extra[10] == extra[40] <= 2, extra
    assert visits[40] <= 4.2 * visits[10], visits


def test_sweep_order_keys_each_candidate_node_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep order sorts the candidate nodes once by position, then deals each
    (rule, node) pair into its priority's list: one position key per node, however many
    rules and priorities meet it (not a sort of every pair)."""
    import graphfuse._rules as rules_mod

    keyed: list[fx.Node] = []
    key = rules_mod._SORT_KEY
    monkeypatch.setattr(rules_mod, "_SORT_KEY", lambda n: keyed.append(n) or key(n))
    rule_set = graphfuse.load_patterns("trtllm") + _local_rules()
    graph = chain(16).graph
    order = rule_set.sweep_order(graph)
    nodes = {n for _, n in order}
    assert len(order) > 2 * len(nodes)  # several rules meet each node
    assert len(keyed) == len(nodes)
