"""Running a rule set over a graph: sweeps in priority order, overlaps, the fixpoint and
the report.

Example::

    from graphfuse.run import run_rules
    report = run_rules(gm.graph, rules)      # in place; report.counts
"""

from __future__ import annotations

from .report import NearMiss as NearMiss
from .report import Report as Report
from .report import near_miss as near_miss
from .sweep import Progress as Progress
from .sweep import run_rules as run_rules
from .sweep import sweep_order as sweep_order
from .sweep import timed as timed

__all__ = ["NearMiss", "Progress", "Report", "near_miss", "run_rules", "sweep_order", "timed"]
