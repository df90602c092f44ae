"""graphfuse's exception types: every error a user can cause is one of these, with one line."""

from __future__ import annotations


class GraphfuseError(Exception):
    """Base of every error graphfuse raises on bad input; its message is one line."""


class ProgramLoadError(GraphfuseError):
    """A ``.pt2`` file (or an in-memory program) could not be loaded or is not acceptable."""


class ProgramSaveError(GraphfuseError):
    """A program could not be written (bad destination, or torch failed to serialise it)."""


class UnsafeProgramError(ProgramLoadError):
    """A ``.pt2`` file holds pickled data that would run code when loaded."""


class PatternLoadError(GraphfuseError):
    """A rule set could not be found or a rule file failed to import."""


class RewriteError(GraphfuseError):
    """A rule's rewrite failed (raised, or built a replacement of the wrong shape/dtype)."""


class FixpointError(GraphfuseError):
    """A rule set kept rewriting past the iteration bound (the rules cycle)."""
