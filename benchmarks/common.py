"""What the benchmark scripts share: the results folder, the JSON record (dated, with the device
it ran on), CUDA-graph and interleaved timing, table printing."""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

RESULTS = Path(__file__).resolve().parent / "results"


def result_path(name: str) -> str:
    """The default JSON of a benchmark: ``benchmarks/results/<name>.json``."""
    return str(RESULTS / f"{name}.json")


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device(gpu: bool = False) -> str:
    """The device a run measured: the GPU's name (``gpu``), else the CPU's and its threads."""
    if gpu:
        return torch.cuda.get_device_name()
    return f"{cpu_name()}, {torch.get_num_threads()} threads"


def write_json(path: str | os.PathLike, payload: dict[str, Any], *, gpu: bool = False) -> None:
    """Write ``payload`` as the run's JSON, with ``date`` (UTC, ISO), ``device`` and ``torch``
    first; atomic (a run cut short leaves the last complete record)."""
    record = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": device(gpu),
        "torch": torch.__version__,
        **payload,
    }
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    os.replace(tmp, out)


class GraphTimer:
    """``reps`` rounds of ``calls`` (one callable or a list, called in order) captured in one
    CUDA graph after a warm-up on a side stream (which also compiles); ``time()`` is the
    median over ``replays`` replays of the per-call time, in ms. The timer keeps ``calls``
    (and so what the graph writes) alive.

    Example (on a CUDA device)::

        t = GraphTimer(lambda: x.mul_(1.0), reps=20, replays=1)
        ms = t.time()
    """

    def __init__(
        self, calls: Callable[[], object] | Sequence[Callable[[], object]], reps: int = 10,
        replays: int = 5,
    ) -> None:  # fmt: skip
        self.calls = [calls] if callable(calls) else list(calls)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                for c in self.calls:
                    c()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            for _ in range(reps):
                for c in self.calls:
                    c()
        self.n = reps * len(self.calls)
        self.replays = replays
        self.graph.replay()
        torch.cuda.synchronize()

    def time(self) -> float:
        ts = []
        for _ in range(self.replays):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            self.graph.replay()
            end.record()
            end.synchronize()
            ts.append(start.elapsed_time(end) / self.n)
        return statistics.median(ts)


def interleaved(fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median wall time (ms) of each fn, one call of every fn per round after a warm-up."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t0) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def print_table(header: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str = ".2f") -> None:
    """Print rows under a header: the first column left-aligned, the others right-aligned,
    floats formatted with ``fmt`` (a row's cell may be a preformatted string)."""
    cells = [[c if isinstance(c, str) else format(c, fmt) if isinstance(c, float) else str(c)
              for c in r] for r in rows]  # fmt: skip
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(header)]
    for r in [list(header), *cells]:
        first = f"{r[0]:<{widths[0]}}"
        print("  ".join([first, *(f"{c:>{w}}" for c, w in zip(r[1:], widths[1:]))]))
