"""Exact comparison of two ``graphfuse.apply`` results, for the planned first sweep
(``graphfuse._plan``), which must give exactly what the sequential path gives.

``assert_same_result(a, b)`` compares everything a later reader of the result can see:
the generated code, every node (name, op, target, arguments by name, meta keys and
values, the fake value's dtype / shape / stride, users in order), the graph's name space
(so later edits pick the same fresh names), an ExportedProgram's signature and state, and
the report. ``assert_same_outputs`` runs both programs on the same inputs and compares
bit for bit. ``run_both`` applies a rule set with the plan disabled and enabled and makes
all of these checks.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from torch import Tensor, fx
from torch.export import ExportedProgram

import graphfuse

Program = ExportedProgram | fx.GraphModule


# --------------------------------------------------------------------------- comparison


def graph_module(program: Program) -> fx.GraphModule:
    return program.graph_module if isinstance(program, ExportedProgram) else program


def _leaf(a: Any) -> Any:
    """An argument as comparable data: nodes by name, everything else by type and repr."""
    if isinstance(a, fx.Node):
        return ("%", a.name)
    if isinstance(a, (list, tuple)):
        return (type(a).__name__, tuple(_leaf(x) for x in a))
    if isinstance(a, dict):
        return ("dict", tuple((k, _leaf(v)) for k, v in a.items()))
    if isinstance(a, slice):
        return ("slice", _leaf(a.start), _leaf(a.stop), _leaf(a.step))
    return (type(a).__name__, repr(a))


def _val(v: Any) -> Any:
    """``meta["val"]`` as comparable data (a fake tensor by dtype, shape, stride, device)."""
    if isinstance(v, torch.Tensor):
        return ("T", v.dtype, tuple(map(str, v.shape)), tuple(map(str, v.stride())), str(v.device))
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(_val(x) for x in v))
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return ("sym", str(v))
    return (type(v).__name__, repr(v))


def _same_meta_value(x: Any, y: Any) -> bool:
    if x is y:
        return True
    try:
        eq = x == y
        if isinstance(eq, bool):
            return eq
    except Exception:
        pass
    return repr(x) == repr(y)


def _node_row(n: fx.Node) -> dict[str, Any]:
    return dict(
        name=n.name,
        op=n.op,
        target=n.target if n.op == "call_function" else repr(n.target),
        args=_leaf(n.args),
        kwargs=_leaf(n.kwargs),
        meta_keys=sorted(n.meta),
        val=_val(n.meta["val"]) if "val" in n.meta else None,
        users=[u.name for u in n.users],
        type=repr(n.type),
    )


def check_graph_invariants(graph: fx.Graph) -> None:
    """What the rest of graphfuse relies on in any graph it hands back: lint passes, the
    length and the op index agree with the node list, sort keys increase."""
    graph.lint()
    nodes = list(graph.nodes)
    assert graph._len == len(nodes), (graph._len, len(nodes))
    keys = [n._sort_key for n in nodes]
    assert all(a < b for a, b in zip(keys, keys[1:])), "sort keys do not increase"
    by_op: dict[tuple[str, Any], list[str]] = {}
    for n in nodes:
        if n.op in ("call_function", "placeholder", "output", "get_attr"):
            target = n.target if n.op == "call_function" else None
            by_op.setdefault((n.op, id(target) if target is not None else None), []).append(n.name)
    for n in nodes:
        if n.op == "call_function":
            found = [m.name for m in graph.find_nodes(op="call_function", target=n.target)]
            assert found == by_op[(n.op, id(n.target))], (n.target, found)
    for op in ("placeholder", "output"):
        found = [m.name for m in graph.find_nodes(op=op)]
        assert found == by_op.get((op, None), []), (op, found)


def _first_difference(rows_a: list[dict], rows_b: list[dict]) -> str:
    for i, (ra, rb) in enumerate(zip(rows_a, rows_b)):
        for key in ra:
            ta, tb = ra[key], rb[key]
            same = ta is tb or (ta == tb if key != "target" else ta is tb or ta == tb)
            if not same:
                return f"node #{i} ({ra['name']} / {rb['name']}): {key} differs: {ta!r} != {tb!r}"
    if len(rows_a) != len(rows_b):
        extra = rows_a[len(rows_b) :] or rows_b[len(rows_a) :]
        return f"node counts differ: {len(rows_a)} != {len(rows_b)}; extra {extra[0]['name']}"
    return ""


def assert_same_graph(ga: fx.GraphModule, gb: fx.GraphModule) -> None:
    """Same code, same nodes field by field, same meta, same name space."""
    for g in (ga.graph, gb.graph):
        check_graph_invariants(g)
    rows_a = [_node_row(n) for n in ga.graph.nodes]
    rows_b = [_node_row(n) for n in gb.graph.nodes]
    diff = _first_difference(rows_a, rows_b)
    assert not diff, diff
    for na, nb in zip(ga.graph.nodes, gb.graph.nodes):
        for key in na.meta:
            if key == "val":
                continue
            assert _same_meta_value(na.meta[key], nb.meta[key]), (na.name, key)
    assert ga.code == gb.code, "recompiled code differs"
    ns_a, ns_b = ga.graph._graph_namespace, gb.graph._graph_namespace
    only_a = sorted(ns_a._used_names - ns_b._used_names)
    only_b = sorted(ns_b._used_names - ns_a._used_names)
    assert not only_a and not only_b, f"used names differ: only a {only_a}, only b {only_b}"
    assert ns_a._base_count == ns_b._base_count, "name counters differ: " + str(
        {
            k: (ns_a._base_count.get(k), ns_b._base_count.get(k))
            for k in set(ns_a._base_count) | set(ns_b._base_count)
            if ns_a._base_count.get(k) != ns_b._base_count.get(k)
        }  # fmt: skip
    )
    assert type(ga.graph._codegen) is type(gb.graph._codegen)
    assert type(ga).__name__ == type(gb).__name__
    for kind in ("named_parameters", "named_buffers"):
        pa, pb = dict(getattr(ga, kind)()), dict(getattr(gb, kind)())
        assert list(pa) == list(pb), kind
        assert all(pa[k] is pb[k] or torch.equal(pa[k], pb[k]) for k in pa), kind
    assert [k for k, _ in ga.named_children()] == [k for k, _ in gb.named_children()]
    assert sorted(getattr(ga, "meta", {})) == sorted(getattr(gb, "meta", {}))


def assert_same_report(ra: graphfuse.Report, rb: graphfuse.Report) -> None:
    assert ra.rule_set == rb.rule_set
    assert list(ra.counts.items()) == list(rb.counts.items()), (ra.counts, rb.counts)
    assert ra.iterations == rb.iterations, (ra.iterations, rb.iterations)
    assert ra.dry_run == rb.dry_run
    assert sorted(ra.timings) == sorted(rb.timings), (ra.timings, rb.timings)
    ma = [dataclasses.asdict(n) for n in ra.near_misses]
    mb = [dataclasses.asdict(n) for n in rb.near_misses]
    for i, (x, y) in enumerate(zip(ma, mb)):
        assert x == y, f"near miss #{i} differs: {x} != {y}"
    assert len(ma) == len(mb), (
        f"near misses: {len(ma)} != {len(mb)}: {ma[len(mb) :] or mb[len(ma) :]}"
    )


def assert_same_result(a: graphfuse.Result, b: graphfuse.Result) -> None:
    """``a`` and ``b`` (two ``graphfuse.apply`` results) are the same in every way a user
    of the result can observe (outputs on inputs: :func:`assert_same_outputs`)."""
    kind = ExportedProgram if isinstance(a.program, ExportedProgram) else fx.GraphModule
    assert isinstance(a.program, kind) and isinstance(b.program, kind)
    assert_same_report(a.report, b.report)
    assert_same_graph(graph_module(a.program), graph_module(b.program))
    if isinstance(a.program, ExportedProgram):
        ea, eb = a.program, b.program
        assert repr(ea.graph_signature) == repr(eb.graph_signature)
        assert list(ea.state_dict) == list(eb.state_dict)
        assert all(torch.equal(ea.state_dict[k], eb.state_dict[k]) for k in ea.state_dict)
        assert list(ea.constants) == list(eb.constants)
        assert repr(ea.range_constraints) == repr(eb.range_constraints)
        assert repr(ea.module_call_graph) == repr(eb.module_call_graph)


def call(program: Program, inputs: Sequence[Any]) -> Any:
    """The program's graph on ``inputs`` (an ExportedProgram's graph module directly, its
    parameters, buffers and constants passed as the signature says: every output, and no
    ``module()`` unlifting per call)."""
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


def _bits(t: Tensor) -> Tensor:
    t = t.detach().contiguous().reshape(-1)
    return t.view(torch.uint8) if t.dtype.itemsize and t.dtype != torch.bool else t


def assert_same_outputs(a: Program, b: Program, inputs: Sequence[Any]) -> None:
    """Both programs on ``inputs`` (cloned for each; the global RNG seeded alike for random
    ops such as dropout), outputs equal bit for bit."""
    outs = []
    for program in (a, b):
        torch.manual_seed(0)
        outs.append(call(program, [x.clone() if isinstance(x, Tensor) else x for x in inputs]))
    out_a, out_b = outs
    flat_a, spec_a = torch.utils._pytree.tree_flatten(out_a)
    flat_b, spec_b = torch.utils._pytree.tree_flatten(out_b)
    assert spec_a == spec_b
    for i, (x, y) in enumerate(zip(flat_a, flat_b)):
        if not isinstance(x, Tensor):
            assert x == y, (i, x, y)
            continue
        assert (x.dtype, x.shape) == (y.dtype, y.shape), (i, x.dtype, x.shape, y.dtype, y.shape)
        assert torch.equal(_bits(x), _bits(y)), f"output {i} ({x.dtype}) differs"


def random_inputs(program: Program, seed: int) -> list[Tensor]:
    """Fresh inputs for the program's user inputs, from their fake values: floats normal,
    bools a causal-looking mask, ints small."""
    gm = graph_module(program)
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


def _fingerprint(program: Any) -> tuple:
    gm = graph_module(program)
    return gm.code, [(n.name, n.op, str(n.target), str(n.args)) for n in gm.graph.nodes]


# --------------------------------------------------------------------------- both paths


def run_both(
    monkeypatch: pytest.MonkeyPatch,
    program: Any,
    rules: graphfuse.RuleSet | str,
    inputs: Callable[[int], Sequence[Any]] | None = None,
    *,
    dry_run: bool = False,
    progress_too: bool = True,
) -> tuple[Counter, Any]:
    """Apply ``rules`` sequentially (reference) and with the plan enabled; assert the two
    agree exactly (or raise the same error) and neither touched ``program``; return the
    STATS delta of the planned run and the reference outcome (a result or an error).
    ``progress_too``: the planned run also calls ``progress`` exactly as the plain one."""
    import graphfuse._plan as plan

    before = _fingerprint(program)
    outcomes, deltas, progress = [], [], []
    for enabled in (False, True):
        monkeypatch.setattr(plan, "ENABLED", enabled)
        stats = Counter(plan.STATS)
        calls: list = []
        progress.append(calls)
        try:
            res = graphfuse.apply(program, rules, dry_run=dry_run, progress=_recorder(calls))
            outcomes.append(res)
        except graphfuse.GraphfuseError as exc:
            outcomes.append(exc)
        deltas.append(Counter(plan.STATS) - stats)
        assert _fingerprint(program) == before, f"apply (ENABLED={enabled}) mutated its input"
    ref, got = outcomes
    assert deltas[0]["planned"] == 0, "ENABLED=False took the planned path"
    if progress_too and deltas[1]["planned"]:  # (a fallback reports its first sweep too)
        assert progress[0] == progress[1], f"progress calls differ: {progress}"
    if isinstance(ref, Exception) or isinstance(got, Exception):
        assert type(ref) is type(got), (ref, got)
        assert str(ref) == str(got)
        return deltas[1], ref
    assert_same_result(ref, got)
    if not dry_run:
        xs = inputs(1) if callable(inputs) else random_inputs(program, 1)
        assert_same_outputs(ref.program, got.program, xs)
    return deltas[1], ref


def _recorder(calls: list) -> Any:
    return lambda done, total: calls.append((done, total))


def planned(delta: Counter) -> bool:
    assert delta["planned"] + delta["fallback"] <= 1, delta
    return delta["planned"] == 1 and delta["fallback"] == 0


def fell_back(delta: Counter) -> bool:
    reasons = [k for k in delta if k.startswith("fallback: ")]
    return delta["fallback"] == 1 and delta["planned"] == 0 and len(reasons) == 1


def not_planned(delta: Counter) -> bool:
    return delta["planned"] == 0
