"""Every paged row of the decode configuration table (``decode/config.CLASSES``) compiles for
sm_90 without a GPU (Triton's own ptxas, ``benchmarks.sass_count.compile_decode``), for the
KV caches the row serves (FP8 rows an FP8 cache, 16-bit rows a bf16 one, rows for any cache
both), FP8 out, plus NVFP4 out for three rows drawn per run (seeded, in the test id): with no
local-memory spills and within an SM's shared memory; the rows whose comments state how many
programs fit an SM fit that many (``sass_count.programs_per_sm`` of the compile's registers
and shared memory). A row whose tile, warps and stages do not fit would otherwise first show
on a lent GPU. The compiles run in a subprocess (an LLVM
abort ends the process). Skips where Triton is not installed (the ``interpret`` extra)."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

pytest.importorskip("triton")

from benchmarks.sass_count import SM90_LIMITS  # noqa: E402
from graphfuse.triton.decode.config import CLASSES, KNOBS  # noqa: E402

from ._runner import ROOT, run_seed  # noqa: E402

# the most shared memory a program may have on sm_90
SM90_SHARED = SM90_LIMITS["shared"] - SM90_LIMITS["reserved"]
KV_NAMES = {1: ("fp8",), 2: ("bf16",), 0: ("fp8", "bf16")}
SEED = run_seed()
ROWS = [
    (i, kv, dict(zip(KNOBS, knobs)))
    for i, (paged, kv_bytes, _, _, knobs) in enumerate(CLASSES)
    if paged
    for kv in KV_NAMES[kv_bytes]
]
NVFP4_ROWS = sorted(random.Random(SEED).sample(range(len(ROWS)), 3))

# programs an SM that the configuration table's comments state, by (knobs, KV cache)
CLAIMED_PROGRAMS_PER_SM = {
    ((64, 4, 2, 1, False, True, False, False), "bf16"): 5,
    ((64, 2, 3, 1, False, True, True, False), "fp8"): 4,
    ((32, 1, 3, None, False, False, True, True), "fp8"): 10,
}

_SCRIPT = """
import json, sys, tempfile
from benchmarks.sass_count import decode_row_usage
for i, kv, cfg, out in json.loads(sys.argv[1]):
    with tempfile.TemporaryDirectory() as w:
        for r in decode_row_usage(cfg, kv, w, out):
            print(json.dumps([i, kv, out, r["kernel"], r["instructions"], r["spills"],
                              r["shared_bytes"], r.get("programs_per_sm")]), flush=True)
"""


@pytest.mark.parametrize("seed", [SEED])
def test_every_paged_decode_row_compiles_for_sm90(seed: int) -> None:
    cases = [(i, kv, cfg, "fp8") for i, kv, cfg in ROWS]
    cases += [(*ROWS[j], "nvfp4") for j in NVFP4_ROWS]
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, json.dumps(cases)], cwd=ROOT, capture_output=True,
        text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, (seed, proc.stdout[-500:], proc.stderr[-3000:])
    done = [json.loads(line) for line in proc.stdout.splitlines()]
    kernels = [r for r in done if r[3].startswith("decode kernel")]
    assert [(i, kv, out) for i, kv, out, *_ in kernels] == [(c[0], c[1], c[3]) for c in cases]
    for i, kv, out, name, n, spills, shared, _ in done:
        where = (seed, f"CLASSES[{i}]", kv, out, name)
        assert n > 200, where  # a whole kernel's SASS
        assert spills == 0, (*where, f"{spills} spill stores")
        assert shared <= SM90_SHARED, (*where, f"{shared} bytes of shared memory")
    per_sm = {(CLASSES[i][4], kv): p for i, kv, out, *_, p in kernels if out == "fp8"}
    for key, want in CLAIMED_PROGRAMS_PER_SM.items():
        assert per_sm.get(key) == want, (key, per_sm.get(key), "programs an SM")
