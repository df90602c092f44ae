"""graphfuse: declarative fusion passes for PyTorch graphs.

Example::

    import graphfuse
    result = graphfuse.apply(torch.export.export(model, args), "trtllm")
    result.report.counts        # rule -> rewrites
"""

from __future__ import annotations

from . import dsl as dsl
from . import ops as ops  # registers every graphfuse:: op
from . import triton as triton  # CUDA impls, registered lazily (imports neither triton nor CUDA)
from .api import Result as Result
from .api import apply as apply
from .api import explain as explain
from .compile import compile_backend as compile_backend
from .compile import inductor_pass as inductor_pass
from .errors import FixpointError as FixpointError
from .errors import GraphfuseError as GraphfuseError
from .errors import PatternLoadError as PatternLoadError
from .errors import ProgramLoadError as ProgramLoadError
from .errors import ProgramSaveError as ProgramSaveError
from .errors import RewriteError as RewriteError
from .errors import UnsafeProgramError as UnsafeProgramError
from .io import load_program as load_program
from .io import save_program as save_program
from .match import Match as Match
from .rewrite import Builder as Builder
from .rules import Rule as Rule
from .rules import RuleSet as RuleSet
from .rules import load_patterns as load_patterns
from .rules import traced_rule as traced_rule
from .run import NearMiss as NearMiss
from .run import Report as Report

__all__ = [
    "Builder",
    "FixpointError",
    "GraphfuseError",
    "Match",
    "NearMiss",
    "PatternLoadError",
    "ProgramLoadError",
    "ProgramSaveError",
    "Report",
    "Result",
    "RewriteError",
    "Rule",
    "RuleSet",
    "UnsafeProgramError",
    "apply",
    "compile_backend",
    "dsl",
    "explain",
    "inductor_pass",
    "load_patterns",
    "load_program",
    "ops",
    "save_program",
    "traced_rule",
    "triton",
]
