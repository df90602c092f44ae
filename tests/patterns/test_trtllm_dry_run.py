"""``apply(dry_run=True)`` reports what the real ``apply`` does: the same counts on every
model of the rule-set tests, on both IRs (a check that accepts a match the rewrite cannot
build would count in the dry run and be a near miss in the real one)."""

from __future__ import annotations

import pytest

import graphfuse

from .conftest import CASES, exported, fused


@pytest.mark.parametrize("name", sorted(CASES))
def test_dry_run_counts_what_apply_rewrites(name: str, kind: str) -> None:
    ep = exported(name, kind)[1]
    dry = graphfuse.apply(ep, "trtllm", dry_run=True)
    real = fused(name, kind)
    assert dry.report.counts == real.report.counts
    assert sum(real.report.counts.values()) > 0
    assert not [nm for nm in real.report.near_misses if "rewrite failed" in nm.reason]
