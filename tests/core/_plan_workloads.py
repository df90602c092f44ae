"""Workloads for the planned-sweep tests: the matcher benchmark's chain of attention
blocks (``tests/_chain.py``), the demo decoder and the fuzz suite's random programs, and
random local rules cut from a program's own subgraphs (so they match, overlap and chain),
rewritten to a stand-in op.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, fx

import graphfuse
from graphfuse import Rule, RuleSet
from graphfuse import dsl as P
from tests._chain import link, local_rule, tile, traced
from tests.fuzz._programs import SAMPLE_STEPS, RandomProgram, example_inputs

from ._exact import Program, graph_module

aten = torch.ops.aten
BF16, FP8 = torch.bfloat16, torch.float8_e4m3fn

# --------------------------------------------------------------------------- test-only op
# A stand-in replacement for random rules: any inputs -> a tensor with the root's shape,
# strides and dtype (later views of it stay valid) whose values depend on the inputs (so a
# wrongly wired replacement shows in the outputs).

if not hasattr(torch.ops, "gfplan") or not hasattr(torch.ops.gfplan, "stand_in"):

    @torch.library.custom_op("gfplan::stand_in", mutates_args=())
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


STAND_IN = torch.ops.gfplan.stand_in.default


# --------------------------------------------------------------------------- random rules


def stand_in_rewrite(salt: int) -> Callable[[Any, Any], Any]:
    """A local rewrite for any match: the stand-in op over the match's inputs."""

    def rewrite(m: Any, b: Any) -> Any:
        val = m.root.meta["val"]
        shape, stride = [int(s) for s in val.shape], [int(s) for s in val.stride()]
        return b.call(STAND_IN, m.inputs(), shape, stride, val.dtype, salt)

    return rewrite


def tensor_root(m: Any) -> Any:
    """The stand-in rewrite's check (local): the root is one tensor and some bound input
    is a tensor (the fake value of the stand-in comes from its inputs' fake mode)."""
    if not isinstance(m.root.meta.get("val"), torch.Tensor):
        return "the root is no single tensor"
    if not any(isinstance(n.meta.get("val"), torch.Tensor) for n in m.inputs()):
        return "no bound input is a tensor"
    return None


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


_SEE_THROUGH = [aten.view, aten.reshape, aten._to_copy, aten.to, aten.transpose, aten.expand]
_COMMUTATIVE = (aten.add.Tensor, aten.mul.Tensor)


def random_local_rules(program: Program, seed: int, k: int = 4) -> graphfuse.RuleSet:
    """``k`` local rules cut from random subgraphs of ``program`` (so they match, overlap
    and chain), random depth and priority, each rewritten to the stand-in op."""
    rng = random.Random(seed)
    gm = graph_module(program)
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
        rules.append(
            Rule(f"r{i}", pat, stand_in_rewrite(i), check, priority=rng.randint(0, 2), local=True)
        )
    return graphfuse.RuleSet(f"random{seed}", rules)


def _odd_root(m: Any) -> Any:
    """A local check that fails at some matches (near misses), by the root's name."""
    return tensor_root(m) or (None if len(m.root.name) % 2 else m.fail("an even name"))


# --------------------------------------------------------------------------- programs


@functools.cache
def chain(ir: str, n: int) -> Any:
    """The benchmark chain (apply never mutates it: ``run_both`` checks)."""
    return tile(traced(link, ir), n)


def chain_rules(ir: str) -> RuleSet:
    trtllm = graphfuse.load_patterns("trtllm")
    return trtllm if ir == "export" else RuleSet("x", [local_rule(ir), *trtllm])


@functools.cache
def demo(out_format: str, decompose: bool) -> Any:
    from graphfuse.demo import DemoDecoder, demo_inputs

    torch.manual_seed(0)
    model = DemoDecoder(2, 64, 4, 2, out_format).to(BF16).eval()
    ep = torch.export.export(model, demo_inputs(1, 8, 64, 16, BF16))
    return ep.run_decompositions() if decompose else ep


@functools.cache
def random_program(i: int, decompose: bool) -> Any:
    ep = torch.export.export(RandomProgram(PROGRAM_STEPS[i]), example_inputs(0))
    return ep.run_decompositions() if decompose else ep


# random_program(i): 0 and 2 each leave a quant that no attention absorbs (an extra user,
# dropout), so trtllm's standalone fp8_static_quant fires there; 1 fuses attention only
PROGRAM_STEPS = SAMPLE_STEPS


def program_inputs(seed: int) -> Any:
    return example_inputs(seed)


def demo_inputs_for(seed: int) -> Any:
    from graphfuse.demo import demo_inputs

    torch.manual_seed(seed)
    return demo_inputs(1, 8, 64, 16, BF16)


X = P.tensor("x")


# --------------------------------------------------------------------------- small rule sets


def local(name: str, pattern: Any, rewrite: Any, check: Any = None, **kw: Any) -> Rule:
    return Rule(name, pattern, rewrite, check, local=True, **kw)


def rs(*rules: Rule) -> RuleSet:
    return RuleSet("t", rules)


def to_abs(m: Any, b: Any) -> Any:
    return b.call(aten.abs.default, m["x"])


RELU_NEG = P.op(aten.relu, P.op(aten.neg, X))


# --------------------------------------------------------------------------- small programs


def chained(x):
    return torch.relu(-torch.relu(-x))  # the second block's x IS the first block's root


def exp_over(x):
    return torch.exp(torch.relu(-x))


def relu_times(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.relu(a) * b


def escape_to_removed(x, y):
    t = -x
    return torch.relu(t), y * t  # t escapes to the mul, which an earlier match removes


def relu_then_exp(x):
    return torch.exp(torch.relu(x))
