"""The figures of docs/trtllm.md's sections on quantization libraries:
``python -m tests.clients.measure`` (needs the ``clients`` extra; about a minute on CPU).

Per library and IR: what fused; the logits of the fused program against the library's
program on fresh token ids (relative L2, worst of five batches); both programs' distance to
the same model unquantized (the FP8 error itself); layer 0's quantized attention output,
fused against the library (same q, k, v); and, at every quant site of the library's
program, how many FP8 codes graphfuse's quantizer (fp32 ``x * (1 / s)``, docs/numerics.md)
writes differently from the library's own arithmetic on the same input.
"""

from __future__ import annotations

import warnings

import torch

import graphfuse
from graphfuse import dsl as P
from graphfuse.io import constants_of
from graphfuse.match import match_rule
from graphfuse.patterns._quant import check_static_fp8_quant, static_fp8_quant
from graphfuse.run import sweep_order

from . import _llama as L

SEEDS = range(7, 12)


def _quant_sites(ep: torch.export.ExportedProgram) -> list[graphfuse.Match]:
    probe = graphfuse.Rule("quant", static_fp8_quant(P.tensor("x")), None, check_static_fp8_quant)
    rules = graphfuse.RuleSet("quant", [probe])
    with constants_of(ep):
        found = [match_rule(r, n) for r, n in sweep_order(rules, ep.graph)]
    return [m for m in found if isinstance(m, graphfuse.Match)]


def codes_moved(ep: torch.export.ExportedProgram, ids: torch.Tensor) -> list[float]:
    """Per quant site: the fraction of FP8 codes ``fp8_static_quant(x, s)`` writes
    differently from the program on the same ``x``."""
    sites = _quant_sites(ep)
    names = {m[k].name for m in sites for k in ("quant", "x", "out_scale")}
    values = L.values_of(ep, names, ids)
    moved = []
    for m in sites:
        x, s = values[m["x"].name], values[m["out_scale"].name].float().reshape(())
        ours = torch.ops.graphfuse.fp8_static_quant(x, s)
        theirs = values[m["quant"].name].reshape(ours.shape)
        moved.append((ours.view(torch.uint8) != theirs.view(torch.uint8)).float().mean().item())
    return moved


def row(library: str, kind: str, dtype: torch.dtype = torch.bfloat16) -> str:
    ep, result = L.program(library, kind, dtype), L.fused(library, kind, dtype)
    plain = L.llama(dtype)
    fused = {k: v for k, v in result.report.counts.items() if v}
    err, own, ours = [], [], []
    for seed in SEEDS:
        ids = L.token_ids(seed)
        want, got, ref = L.logits(ep, ids), L.logits(result.program, ids), L.logits(plain, ids)
        err.append(L.rel_l2(got, want))
        own.append(L.rel_l2(want, ref))
        ours.append(L.rel_l2(got, ref))
    a, b = L.first_fused_site(library, kind, L.token_ids(SEEDS[0]), dtype)
    equal = (a.view(torch.uint8) == b.view(torch.uint8)).float().mean().item()
    moved = codes_moved(ep, L.token_ids(SEEDS[0]))
    counts = ", ".join(f"{k} {v}" for k, v in fused.items())
    name = library if dtype == torch.bfloat16 else f"{library} ({str(dtype)[6:]} model)"
    return (
        f"| {name} | {kind} | {counts} | {max(err):.3f} | {max(own):.3f} / {max(ours):.3f} "
        f"| {equal:.1%} | {sum(moved) / len(moved):.1%} (max {max(moved):.1%}) |"
    )


def main() -> None:
    warnings.simplefilter("ignore")
    print(
        "| library | IR | fused | logits rel. L2 vs library | FP8 error: library / fused "
        "| layer-0 bytes equal | codes moved by rounding |"
    )
    print("|---|---|---|---|---|---|---|")
    for library in L.LIBRARIES:
        for kind in ("pre", "core"):
            print(row(library, kind), flush=True)
    for kind in ("pre", "core"):
        print(row("torchao", kind, torch.float32), flush=True)


if __name__ == "__main__":
    main()
