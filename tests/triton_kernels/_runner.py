"""The two ends of an interpreter run: :func:`interpret` (the pytest side) runs a case module
in a subprocess with ``TRITON_INTERPRET=1`` (the interpreter reads it when Triton is
imported) and returns its JSON records; :func:`gpu_cases_main` (the case module's side) runs
a ``tests/gpu`` module's seeded cases on the CPU, one JSON line per run (``error``: the
failed check's message), then a summary line."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_seed() -> int:
    """This run's seed for the interpreted cases (one seed a run, so each CI run draws other
    cases): ``GRAPHFUSE_INTERPRET_SEED`` where set, else a fresh one; it is in the test's
    id and in a failing run's message, so ``GRAPHFUSE_INTERPRET_SEED=N`` repeats it. Under
    pytest-xdist the fresh seed comes from the run's id, which every worker shares (their
    collections must agree)."""
    env = os.environ.get("GRAPHFUSE_INTERPRET_SEED")
    if env:
        return int(env)
    xdist_run = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # a uuid4 hex, one per xdist run
    if xdist_run:
        return int(xdist_run, 16) % 10**6
    return random.SystemRandom().randrange(10**6)


def interpret(module: str, *args: str, timeout: int = 1800) -> list[dict]:
    """Runs ``python -m module *args`` under the interpreter; asserts it exited 0 with no
    record holding an ``error``, and returns the records."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    bad = [r for r in records if r.get("error")]
    assert proc.returncode == 0 and not bad and records, (module, args, proc.stderr[-4000:], bad)
    return records


Runs = Callable[[object, dict], Iterable[tuple[dict, Callable[[], None]]]]


def gpu_cases_main(test_module: str, runs: Runs) -> int:
    """``--seed`` / ``--n``: draws ``test_module._cases(n, seed)`` with the module's ``DEV``
    set to ``"cpu"``; ``runs(module, case)`` yields (extra record fields, the check to run)."""
    ap = argparse.ArgumentParser(description=f"{test_module} cases under the interpreter")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n", type=int, default=4, help="cases")
    args = ap.parse_args()
    import triton  # noqa: F401  (the interpreter reads TRITON_INTERPRET when imported)

    from ._interpreter import patch

    patch()
    mod = importlib.import_module(test_module)
    mod.DEV = "cpu"
    failed = 0
    for case in mod._cases(args.n, args.seed):
        for extra, check in runs(mod, case):
            record = {**{k: str(v) for k, v in case.items()}, **extra}
            try:
                check()
            except AssertionError as exc:
                record["error"] = str(exc)[:500]
                failed += 1
            print(json.dumps(record), flush=True)
    print(json.dumps({"summary": {"cases": args.n, "failed": failed}}))
    return 1 if failed else 0
