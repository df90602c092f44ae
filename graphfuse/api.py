"""The public entry points: ``apply`` and ``explain``."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

from .io import constants_of, copy_graph, finish_program, graph_module_of
from .rules import RuleSet, load_patterns
from .run import Progress, Report, run_rules, timed

P = TypeVar("P")


@dataclass
class Result(Generic[P]):
    """What :func:`apply` returns: the rewritten program (same kind as the input) and the
    report (``report.counts`` maps rule name -> number of rewrites)."""

    program: P
    report: Report


def apply(
    program: P,
    rules: str | RuleSet = "trtllm",
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> Result[P]:
    """Apply a rule set to an exported program or GraphModule; the input is not mutated.

    Args:
        program: a ``torch.export.ExportedProgram`` (pre-dispatch or after
            ``run_decompositions()``) or a ``torch.fx.GraphModule``.
        rules: a bundled rule-set name, a path to a rule file, or a :class:`RuleSet`.
        dry_run: only count what would fire; ``Result.program`` is the input itself.
        progress: optional ``progress(done, total)`` callback while matching.

    Returns:
        :class:`Result` with ``program`` (a new program of the same kind) and ``report``.

    Example::

        ep = torch.export.export(model, args)
        result = graphfuse.apply(ep, "trtllm")
        print(result.report.counts)      # {'attention_fp8_out': 32, ...}
        torch.export.save(result.program, "fused.pt2")
    """
    rule_set = load_patterns(rules)
    with _gc_paused(), constants_of(program):
        return _apply(program, rule_set, dry_run, progress)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Copying and rewriting a graph allocates many small objects that live on; Python's
    cyclic collector would rescan all of them again and again (superlinear in graph size).
    Pause it for the call; whatever cycles were made are collected after."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _apply(program: P, rule_set: RuleSet, dry_run: bool, progress: Progress | None) -> Result[P]:
    start = time.perf_counter()
    if dry_run:
        gm = graph_module_of(program)
        report = run_rules(gm.graph, rule_set, dry_run=True, progress=progress)
        timed(report, "rewrite", start)
        return Result(program, report)
    graph = copy_graph(program)
    now = time.perf_counter()
    report = run_rules(graph, rule_set, progress=progress)
    report.timings["copy"] = now - start
    now = timed(report, "rewrite", now)
    out = finish_program(program, graph)
    timed(report, "recompile", now)
    return Result(out, report)


def explain(program: object, rules: str | RuleSet = "trtllm", *, min_depth: int = 2) -> Report:
    """Why rules did not fire: every candidate where a rule got at least ``min_depth``
    pattern ops deep, with the failed condition as one sentence. Changes nothing.

    Example::

        for miss in graphfuse.explain(ep).near_misses:
            print(miss)   # rule attention_fp8_out at to_3: the scale s has shape [1, 4096]; ...
    """
    rule_set = load_patterns(rules)
    gm = graph_module_of(program)
    with constants_of(program):
        return run_rules(gm.graph, rule_set, dry_run=True, explain=True, min_depth=min_depth)
