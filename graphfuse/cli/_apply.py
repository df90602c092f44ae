"""``graphfuse apply IN.pt2 (-o OUT.pt2 | --dry-run) [-p ...] [--json REPORT] [--verify]``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
from collections.abc import Iterator

from . import _render
from ._common import CliError, console, load, rule_set, where


def _same(a: str, b: str) -> bool:
    if os.path.abspath(a) == os.path.abspath(b):
        return True
    with contextlib.suppress(OSError):
        return os.path.samefile(a, b)
    return False


def _check_paths(args: argparse.Namespace) -> None:
    if args.output and _same(args.output, args.file):
        raise CliError(f"{args.output}: is the input file; graphfuse never overwrites its input")
    for path in (args.output, args.report):
        if not path:
            continue
        if os.path.isdir(path):
            raise CliError(f"{path}: is a directory; give a file name")
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise CliError(f"{path}: the folder {folder} does not exist")
        if not os.access(folder, os.W_OK):
            raise CliError(f"{path}: the folder {folder} is not writable")
    if args.report and any(_same(args.report, p) for p in (args.file, args.output) if p):
        raise CliError(f"{args.report}: the report must not overwrite IN or OUT")


@contextlib.contextmanager
def _progress(total_label: str) -> Iterator[object]:
    """A progress callback drawn on stderr when it is a terminal, else None."""
    err = console(stderr=True)
    if not err.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=err,
        transient=True,
    ) as bar:
        task = bar.add_task(total_label, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def _staged_text(path: str, text: str) -> str:
    """``text`` written to a temporary file beside ``path`` (moved there by the caller)."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.")
    except OSError as e:
        raise CliError(f"{path}: cannot write ({e.strerror or e})") from None
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def fired_row(fired: object) -> dict[str, object]:
    """A :class:`~graphfuse.run.report.Fired` as plain data, its ``where`` relative to the
    current folder (or the graphfuse sources) when inside it."""
    row = fired.to_dict()  # type: ignore[attr-defined]
    path, _, line = row["where"].rpartition(":")
    row["where"] = where((path, int(line))) if line.isdigit() else row["where"]
    return row


def _write_report(path: str, report: object) -> None:
    staged = _staged_text(path, json.dumps(report.to_dict(), indent=2) + "\n")  # type: ignore[attr-defined]
    try:
        os.replace(staged, path)
    finally:
        if os.path.exists(staged):
            os.unlink(staged)


def run(args: argparse.Namespace) -> int:
    """Run ``graphfuse apply``; returns the exit code."""
    from .. import api
    from ..io import save_program
    from ._verify import TOLERANCE, verify

    _check_paths(args)
    rules = rule_set(args)
    ep = load(args.file, args)
    with _progress(f"matching {rules.name}") as callback:
        result = api.apply(ep, rules, dry_run=args.dry_run, progress=callback)
    out = console()
    report = result.report
    _render.render_counts(out, report.rule_set, report.counts, report.dry_run)
    if args.dry_run or args.verbose:
        _render.render_fired(out, [fired_row(f) for f in report.fired], report.dry_run)
    _render.render_overlaps(out, [str(o) for o in report.overlaps])
    if args.verbose:
        stats = {name: s.to_dict() for name, s in report.rule_stats.items()}
        _render.render_rule_stats(out, stats, report.timings, report.iterations)
    if args.dry_run:
        if args.report:
            _write_report(args.report, report)
            out.print(f"wrote {args.report}")
        return 0
    if args.verify:
        rows, ok = verify(ep, result.program)
        _render.render_verify(out, rows, ok, TOLERANCE)
        if not ok:
            worst = max(rows, key=lambda r: r["rel_l2"])
            raise CliError(
                f"--verify: output {worst['output']} disagrees (relative L2 error "
                f"{worst['rel_l2']:.3g} > {TOLERANCE:g}); {args.output} not written"
            )
    # the report is staged first, so a failure leaves neither OUT nor the report written
    staged = (
        _staged_text(args.report, json.dumps(report.to_dict(), indent=2) + "\n")
        if args.report
        else None
    )
    try:
        save_program(result.program, args.output)
        if staged is not None:
            os.replace(staged, args.report)
    finally:
        if staged is not None and os.path.exists(staged):
            os.unlink(staged)
    out.print(f"wrote {args.output}" + (f" and {args.report}" if args.report else ""))
    return 0
