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
from ._api import Result as Result
from ._api import apply as apply
from ._api import explain as explain
from ._compile import compile_backend as compile_backend
from ._compile import inductor_pass as inductor_pass
from ._errors import (
    FixpointError as FixpointError,
)
from ._errors import (
    GraphfuseError as GraphfuseError,
)
from ._errors import (
    PatternLoadError as PatternLoadError,
)
from ._errors import (
    ProgramLoadError as ProgramLoadError,
)
from ._errors import (
    ProgramSaveError as ProgramSaveError,
)
from ._errors import (
    RewriteError as RewriteError,
)
from ._errors import (
    UnsafeProgramError as UnsafeProgramError,
)
from ._match import Match as Match
from ._patterns import load_patterns as load_patterns
from ._pt2 import load_program as load_program
from ._pt2 import save_program as save_program
from ._report import NearMiss as NearMiss
from ._report import Report as Report
from ._rewriter import Builder as Builder
from ._rules import Rule as Rule
from ._rules import RuleSet as RuleSet
from ._trace import traced_rule as traced_rule

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
