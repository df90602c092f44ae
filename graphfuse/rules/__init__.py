"""Rules and rule sets: hand-written (pattern + check + rewrite), traced from functions,
and loaded by name or from a user's file.

Example::

    from graphfuse.rules import Rule, RuleSet, load_patterns
    rules = RuleSet("mine", [Rule("r", pattern, rewrite)]) + load_patterns("trtllm")
"""

from __future__ import annotations

from .load import bundled_names as bundled_names
from .load import load_patterns as load_patterns
from .rule import Rule as Rule
from .rule import RuleSet as RuleSet
from .trace import traced_rule as traced_rule

__all__ = ["Rule", "RuleSet", "bundled_names", "load_patterns", "traced_rule"]
