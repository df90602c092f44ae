"""Workloads for the run tests: the matcher benchmark's chain of attention blocks
(``tests/_chain.py``), the demo decoder, the fuzz suite's random programs, small programs
whose rewrites interact within a sweep, and random rules cut from a program's own subgraphs
(so they match, overlap and chain), rewritten to a stand-in op.

Also the checks every run test makes of a graph graphfuse hands back
(:func:`check_graph`), and running a program's graph on inputs (:func:`call`).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, fx
from torch.export import ExportedProgram

import graphfuse
from graphfuse import Rule, RuleSet
from graphfuse import dsl as P
from graphfuse.io import graph_module_of
from tests._chain import link, local_rule, tile, traced
from tests.fuzz._programs import SAMPLE_STEPS, RandomProgram, example_inputs

aten = torch.ops.aten
BF16 = torch.bfloat16
Program = ExportedProgram | fx.GraphModule

# --------------------------------------------------------------------------- test-only op
# A stand-in replacement for random rules: any inputs -> a tensor with the root's shape,
# strides and dtype (later views of it stay valid) whose values depend on the inputs (so a
# wrongly wired replacement shows in the outputs).

if not hasattr(torch.ops, "gfrun") or not hasattr(torch.ops.gfrun, "stand_in"):

    @torch.library.custom_op("gfrun::stand_in", mutates_args=())
    def _stand_in(
        xs: list[Tensor], shape: list[int], stride: list[int], dtype: torch.dtype, salt: int
    ) -> Tensor:
        total = torch.zeros((), dtype=torch.float64)
        for i, x in enumerate(xs):
            total = total + (i + 1) * x.double().nan_to_num(0.0, 1.0, -1.0).sum()
        size = 1 + sum((n - 1) * st for n, st in zip(shape, stride)) if all(shape) else 0
        buf = torch.arange(size, dtype=torch.float64) + total + salt
        return (buf.remainder(7.0) - 3.0).to(dtype).as_strided(shape, stride)

    @_stand_in.register_fake
    def _stand_in_fake(
        xs: list[Tensor], shape: list[int], stride: list[int], dtype: torch.dtype, salt: int
    ) -> Tensor:
        return torch.empty_strided(shape, stride, dtype=dtype)


STAND_IN = torch.ops.gfrun.stand_in.default


# --------------------------------------------------------------------------- graph checks


def check_graph(graph: fx.Graph) -> None:
    """What the rest of graphfuse (and fx) relies on in any graph handed back: lint passes,
    the length and the op index agree with the node list, positions increase."""
    graph.lint()
    nodes = list(graph.nodes)
    assert graph._len == len(nodes), (graph._len, len(nodes))
    keys = [n._sort_key for n in nodes]
    assert all(a < b for a, b in zip(keys, keys[1:])), "positions do not increase"
    for target in {n.target for n in nodes if n.op == "call_function"}:
        want = [n.name for n in nodes if n.op == "call_function" and n.target is target]
        found = [n.name for n in graph.find_nodes(op="call_function", target=target)]
        assert found == want, (target, found, want)
    for op in ("placeholder", "output"):
        assert [n.name for n in graph.find_nodes(op=op)] == [n.name for n in nodes if n.op == op]


def fingerprint(program: Any) -> tuple:
    """The program's code and nodes (to check that ``apply`` left its input alone)."""
    gm = graph_module_of(program)
    return gm.code, [
        (n.name, n.op, str(n.target), str(n.args), str(n.kwargs)) for n in gm.graph.nodes
    ]


def call(program: Program, inputs: Sequence[Any]) -> Any:
    """The program's graph on ``inputs`` (an ExportedProgram's graph module directly, its
    parameters, buffers and constants passed as the signature says: every output)."""
    if not isinstance(program, ExportedProgram):
        return program(*inputs)
    from torch.export.graph_signature import InputKind

    user = iter(inputs)
    args = []
    for spec in program.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            args.append(next(user))
        elif spec.target in program.state_dict:
            args.append(program.state_dict[spec.target])
        else:
            args.append(program.constants[spec.target])
    return program.graph_module(*args)


def run_seeded(program: Program, inputs: Sequence[Any]) -> Any:
    """:func:`call` on clones of ``inputs`` with the global RNG seeded (dropout)."""
    torch.manual_seed(0)
    return call(program, [x.clone() if isinstance(x, Tensor) else x for x in inputs])


def random_inputs(program: Program, seed: int) -> list[Tensor]:
    """Fresh inputs for the program's user inputs, from their fake values: floats normal,
    bools a mostly-true mask, ints small."""
    gm = graph_module_of(program)
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if isinstance(program, ExportedProgram):
        user = set(program.graph_signature.user_inputs)
        phs = [n for n in phs if n.name in user]
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in phs:
        v = n.meta["val"]
        shape = tuple(int(s) for s in v.shape)
        if v.dtype == torch.bool:
            out.append(torch.rand(shape, generator=g) < 0.8)
        elif v.dtype.is_floating_point:
            out.append(torch.randn(shape, generator=g).to(v.dtype))
        else:
            out.append(torch.randint(0, 4, shape, generator=g).to(v.dtype))
    return out


# --------------------------------------------------------------------------- random rules


def stand_in_rewrite(salt: int) -> Callable[[Any, Any], Any]:
    """A rewrite for any match: the stand-in op over the match's inputs."""

    def rewrite(m: Any, b: Any) -> Any:
        val = m.root.meta["val"]
        shape, stride = [int(s) for s in val.shape], [int(s) for s in val.stride()]
        return b.call(STAND_IN, m.inputs(), shape, stride, val.dtype, salt)

    return rewrite


def tensor_root(m: Any) -> Any:
    """The stand-in rewrite's check: the root is one tensor and some bound input is a
    tensor (the fake value of the stand-in comes from its inputs' fake mode)."""
    if not isinstance(m.root.meta.get("val"), torch.Tensor):
        return "the root is no single tensor"
    if not any(isinstance(n.meta.get("val"), torch.Tensor) for n in m.inputs()):
        return "no bound input is a tensor"
    return None


def _odd_root(m: Any) -> Any:
    """A check that fails at some matches (near misses), by the root's name."""
    return tensor_root(m) or (None if len(m.root.name) % 2 else m.fail("an even name"))


_SEE_THROUGH = [aten.view, aten.reshape, aten._to_copy, aten.to, aten.transpose, aten.expand]
_COMMUTATIVE = (aten.add.Tensor, aten.mul.Tensor)


def _cut(node: fx.Node, rng: random.Random, depth: int, names: list[str]) -> P.Pattern:
    """A pattern spelling ``node``'s subgraph down to ``depth``; inputs become captures
    (sometimes wildcards, sometimes behind a see-through chain), literals stay literals
    (sometimes wildcards); adds and muls are sometimes commutative."""

    def arg(a: Any, d: int) -> Any:
        if isinstance(a, fx.Node):
            if d > 0 and a.op == "call_function" and rng.random() < 0.7:
                return _cut(a, rng, d - 1, names)
            if rng.random() < 0.2:
                return P._
            names.append(f"i{len(names)}")
            cap = P.tensor(names[-1]) if "val" in a.meta else P.any(names[-1])
            if rng.random() < 0.2:  # see through views and casts in front of the input
                return P.maybe(_SEE_THROUGH, cap, name=f"chain_{names[-1]}")
            return cap
        if isinstance(a, (list, tuple)) and any(isinstance(x, fx.Node) for x in a):
            return P.ListOf(tuple(arg(x, d) for x in a))
        return P._ if rng.random() < 0.25 else P.lit(a)

    args = [arg(a, depth) for a in node.args]
    kwargs = {k: arg(v, depth) for k, v in node.kwargs.items() if rng.random() < 0.5}
    comm = node.target in _COMMUTATIVE and len(args) >= 2 and rng.random() < 0.5
    return P.op(node.target, *args, commutative=comm, **kwargs)


def random_rules(program: Program, seed: int, k: int = 4) -> RuleSet:
    """``k`` rules cut from random subgraphs of ``program`` (so they match, overlap and
    chain), random depth and priority, each rewritten to the stand-in op."""
    rng = random.Random(seed)
    gm = graph_module_of(program)
    calls = [
        n
        for n in gm.graph.nodes
        if n.op == "call_function"
        and isinstance(n.meta.get("val"), torch.Tensor)
        and n.target is not aten._assert_tensor_metadata.default
    ]
    # roots whose value a metadata assert reads (pre-dispatch casts) are picked more often
    asserted = [
        n for n in calls if any(u.target is aten._assert_tensor_metadata.default for u in n.users)
    ]
    rules = []
    for i in range(k):
        node = rng.choice(asserted if asserted and rng.random() < 0.3 else calls)
        pat = _cut(node, rng, rng.randint(0, 3), [])
        check = tensor_root if rng.random() < 0.8 else _odd_root
        rules.append(Rule(f"r{i}", pat, stand_in_rewrite(i), check, priority=rng.randint(0, 2)))
    return RuleSet(f"random{seed}", rules)


# --------------------------------------------------------------------------- programs


@functools.cache
def chain(ir: str, n: int) -> Any:
    """The benchmark chain of ``n`` attention -> FP8 quant blocks traced in ``ir``."""
    return tile(traced(link, ir), n)


def chain_rules(ir: str) -> RuleSet:
    """trtllm, plus the block as traced in ``ir`` where trtllm does not know its spelling."""
    trtllm = graphfuse.load_patterns("trtllm")
    return trtllm if ir == "export" else RuleSet("x", [local_rule(ir), *trtllm])


@functools.cache
def demo(out_format: str, decompose: bool) -> Any:
    from graphfuse.demo import DemoDecoder, demo_inputs

    torch.manual_seed(0)
    model = DemoDecoder(2, 64, 4, 2, out_format).to(BF16).eval()
    ep = torch.export.export(model, demo_inputs(1, 8, 64, 16, BF16))
    return ep.run_decompositions() if decompose else ep


def demo_inputs_for(seed: int) -> Any:
    from graphfuse.demo import demo_inputs

    torch.manual_seed(seed)
    return demo_inputs(1, 8, 64, 16, BF16)


@functools.cache
def random_program(i: int, decompose: bool) -> Any:
    """The fuzz suite's sample program ``i``: 0 and 2 each leave a quant that no attention
    absorbs (an extra user, dropout), so trtllm's standalone ``fp8_static_quant`` fires
    there; 1 fuses attention only."""
    ep = torch.export.export(RandomProgram(SAMPLE_STEPS[i]), example_inputs(0))
    return ep.run_decompositions() if decompose else ep


def program_inputs(seed: int) -> Any:
    return example_inputs(seed)


# --------------------------------------------------------------------------- small rule sets

X = P.tensor("x")
RELU_NEG = P.op(aten.relu, P.op(aten.neg, X))


def rs(*rules: Rule, name: str = "t") -> RuleSet:
    return RuleSet(name, rules)


def to_abs(m: Any, b: Any) -> Any:
    """(not value-preserving: the tests read the graph, not the outputs)"""
    return b.call(aten.abs.default, m["x"])


def to_neg(m: Any, b: Any) -> Any:
    return b.call(aten.neg.default, m["x"])


# --------------------------------------------------------------------------- small programs


def chained(x: Tensor) -> Tensor:
    return torch.relu(-torch.relu(-x))  # the second block's x IS the first block's root


def exp_over(x: Tensor) -> Tensor:
    return torch.exp(torch.relu(-x))


def relu_times(a: Tensor, b: Tensor) -> Tensor:
    return torch.relu(a) * b


def escape_to_removed(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    t = -x
    return torch.relu(t), y * t  # t escapes to the mul, which an earlier match may remove


def relu_then_exp(x: Tensor) -> Tensor:
    return torch.exp(torch.relu(x))


def three_sites(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    a = torch.relu(-x)  # fires
    t = -(x * 2)
    b = torch.relu(t)  # neg escapes to the output: a near miss, retried, still escapes
    c = torch.relu(-(x + 1)).to(torch.float16)  # an assert on the root (pre-dispatch)
    return a + b, t, c
