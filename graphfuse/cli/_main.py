"""Run one parsed ``graphfuse`` command and turn its errors into one line.

The argument grammar lives in the top-level module ``graphfuse_cli`` (it imports no torch,
so help and usage errors answer at once); :func:`main` here is the same entry point for
``python -m graphfuse`` and for callers that already imported graphfuse.

Errors: one line on stderr starting ``graphfuse: error:``, exit 1 (2 for usage errors), no
traceback (set ``GRAPHFUSE_DEBUG=1`` to see one for unexpected errors).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable, Sequence

import graphfuse_cli

from ..errors import GraphfuseError
from . import _apply, _demo, _explain, _inspect, _patterns

PROG = graphfuse_cli.PROG

COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "apply": _apply.run,
    "inspect": _inspect.run,
    "explain": _explain.run,
    "patterns": _patterns.run,
    "demo": _demo.run,
}


def _one_line(text: str) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return lines[0] if lines else ""


def _fail(message: str) -> int:
    sys.stderr.write(f"{PROG}: error: {message}\n")
    sys.stderr.flush()
    return 1


def run_command(args: argparse.Namespace) -> int:
    """Run the parsed command ``args.command``; returns the exit code (errors: one line)."""
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning)
            warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\..*")
            return int(COMMANDS[args.command](args))
    except GraphfuseError as e:
        return _fail(_one_line(str(e)) or type(e).__name__)
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: error: interrupted\n")
        return 130
    except BrokenPipeError:
        return 1
    except Exception as e:
        if os.environ.get("GRAPHFUSE_DEBUG"):
            raise
        detail = _one_line(str(e))
        return _fail(
            f"unexpected {type(e).__name__}"
            + (f": {detail}" if detail else "")
            + " (set GRAPHFUSE_DEBUG=1 for the traceback)"
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code.

    Args:
        argv: arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        0 on success (also when no rule matched), 1 on errors, 2 on usage errors.
    """
    return graphfuse_cli.main(argv)
