"""Rewriting one match in place: the builder, fake-value propagation, safe graph edits.

Example::

    from graphfuse.rewrite import FakePropagator, apply_match
    created = apply_match(match, graph, FakePropagator())
"""

from __future__ import annotations

from .apply import apply_match as apply_match
from .apply import same_value_type as same_value_type
from .builder import Builder as Builder
from .fake import FakePropagator as FakePropagator

__all__ = ["Builder", "FakePropagator", "apply_match", "same_value_type"]
