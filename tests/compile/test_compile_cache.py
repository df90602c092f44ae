"""The FX graph cache never hands back a graph compiled without the rules: fresh
processes share one cache dir; a cache hit still runs the fused op."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_cache_child.py")


def _run(form: str, cache_dir: str) -> dict:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache_dir, TORCHINDUCTOR_FX_GRAPH_CACHE="1")
    proc = subprocess.run(
        [sys.executable, CHILD, form], env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line.removeprefix("RESULT "))


def _fused(res: dict) -> None:
    assert res["ops"] == {"attention_fp8": 1}, res
    assert res["numerics"] == "ok", res


def test_inductor_pass_cache_hit_still_fused(tmp_path):
    cache = str(tmp_path / "cache")
    first = _run("pass", cache)
    _fused(first)
    assert first["fx_miss"] >= 1 and first["fx_hit"] == 0, first
    assert first["reports"] == [{**first["reports"][0], "attention_fp8_out": 1}], first
    second = _run("pass", cache)
    _fused(second)
    # Loaded from the cache (FX graph cache, or AOTAutograd's on top of it): the pass did
    # not run in this process, and the fused op ran anyway.
    assert second["fx_hit"] + second["aot_hit"] >= 1 and second["fx_miss"] == 0, second
    assert second["reports"] == [], second


@pytest.mark.slow
def test_cache_filled_without_the_pass_is_not_reused(tmp_path):
    cache = str(tmp_path / "cache")
    plain = _run("plain", cache)
    assert plain["ops"] == {}, plain
    with_pass = _run("pass", cache)
    _fused(with_pass)
    assert with_pass["fx_miss"] >= 1, with_pass


@pytest.mark.slow
def test_compile_backend_cache_hit_still_fused(tmp_path):
    cache = str(tmp_path / "cache")
    _fused(_run("backend", cache))
    second = _run("backend", cache)
    _fused(second)
    assert second["fx_hit"] >= 1 and second["fx_miss"] == 0, second
    # The backend rewrites before the cache lookup: its report is there on a hit too.
    assert [r["attention_fp8_out"] for r in second["reports"]] == [1], second
