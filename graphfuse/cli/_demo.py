"""``graphfuse demo``: fuse a small Llama-style decoder and show what changed.

The work is :func:`graphfuse.demo.run_demo` (owned by the library); this module only
renders it.
"""

from __future__ import annotations

import argparse

from . import _render
from ._common import console


def run(args: argparse.Namespace) -> int:
    """Run ``graphfuse demo``; returns the exit code."""
    from ..demo import run_demo

    out = console()
    err = console(stderr=True)
    say = (lambda msg: err.print(f"[dim]{msg}...[/dim]")) if err.is_terminal else None
    _render.render_demo(out, run_demo(progress=say))
    return 0
