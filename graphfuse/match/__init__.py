"""Matching rules against a graph: schema normalisation, the matcher, matches, failures.

Example::

    from graphfuse.match import match_rule
    found = match_rule(rule, node)      # a Match, a Failure (why not), or None
"""

from __future__ import annotations

from .failure import Failure as Failure
from .result import Match as Match
from .search import escape_of as escape_of
from .search import match_rule as match_rule
from .state import Tracer as Tracer

__all__ = ["Failure", "Match", "Tracer", "escape_of", "match_rule"]
