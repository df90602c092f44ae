"""graphfuse inside ``torch.compile``: an Inductor custom graph pass and a compile backend.

Both rewrite the functionalized ATen graph Inductor compiles (views as ``reshape``, SDPA
as ``aten._scaled_dot_product_flash_attention_for_cpu`` / ``_efficient_attention`` ...,
casts as ``prims.convert_element_type``), in place, with :func:`run_rules`.

Caching. Inductor's FX graph cache keys a compiled graph on the graph *and* on the
``uuid()`` of every custom pass in its config, so :class:`InductorPass` hashes its rule set
(rule names and definition sites, the source of the rule modules and of the graphfuse
core): a cached graph compiled with other rules (or none) is never reused. The backend
rewrites the graph *before* Inductor computes the FX-cache key, so a hit there holds the
fused graph by construction; AOTAutograd's cache, which keys on the graph before the
rules ran and knows nothing of them, is turned off inside the backend.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import fx

from .rules import RuleSet, load_patterns
from .run import Report, run_rules

_CORE_DIR = os.path.dirname(os.path.abspath(__file__))


def _source_files(rules: RuleSet) -> list[str]:
    """The Python files a rule set's behaviour comes from: where each rule, check and
    rewrite is defined, every module of a rule package, and the graphfuse core."""
    files: set[str] = set()
    for rule in rules:
        for obj in (rule.check, rule.rewrite):
            try:
                src = inspect.getsourcefile(obj) if obj is not None else None
            except TypeError:
                src = None
            if src:
                files.add(src)
        if rule.location[0]:
            files.add(rule.location[0])
    for f in list(files):
        pkg = os.path.dirname(f)
        if os.path.isfile(os.path.join(pkg, "__init__.py")):
            files.update(os.path.join(pkg, n) for n in os.listdir(pkg) if n.endswith(".py"))
    for folder, _, names in os.walk(_CORE_DIR):
        files.update(os.path.join(folder, n) for n in names if n.endswith(".py"))
    return sorted(os.path.abspath(f) for f in files if os.path.isfile(f))


def rules_hash(rules: RuleSet) -> str:
    """A hex digest that changes when the rule set or the code behind it changes.

    Args:
        rules: the rule set.

    Returns:
        sha256 over the rule names, priorities and definition sites, and the contents
        of :func:`_source_files` (where the patterns, checks and rewrites are written).
    """
    h = hashlib.sha256()
    h.update(f"{rules.name}\0{torch.__version__}\0".encode())
    for rule in rules:
        # Not repr(pattern): it expands shared sub-patterns into a tree (tens of MB for
        # the trtllm attention rule). The pattern is code in the hashed source files.
        h.update(f"{rule.name}\0{rule.priority}\0{rule.where}\0".encode())
    for path in _source_files(rules):
        h.update(path.encode() + b"\0")
        with open(path, "rb") as fh:
            h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()


TRAINING_GRAPH = (
    "a training graph (the compiled model was called with gradients enabled); the rules "
    "run on inference graphs only: call it under torch.no_grad() or torch.inference_mode()"
)


def _skipped_training_graph(owner: InductorPass | CompileBackend) -> Report:
    """The report for a graph left alone because it is a training graph; warns once per
    ``owner`` (the pass or backend), naming ``torch.no_grad()`` / ``torch.inference_mode()``."""
    if not any(r.skipped for r in owner.reports):
        warnings.warn(f"graphfuse: {TRAINING_GRAPH}", UserWarning, stacklevel=2)
    report = Report(owner.rules.name, {rule.name: 0 for rule in owner.rules})
    report.skipped = TRAINING_GRAPH
    return report


def _register_as_custom_pass() -> None:
    """Make :class:`InductorPass` an Inductor ``CustomInferenceAwareGraphPass`` (an ABC, so
    a virtual subclass), importing ``torch._inductor`` only when a pass is created:
    ``import graphfuse`` stays cheap."""
    from torch._inductor.custom_graph_pass import CustomInferenceAwareGraphPass

    if not issubclass(InductorPass, CustomInferenceAwareGraphPass):
        CustomInferenceAwareGraphPass.register(InductorPass)


class InductorPass:
    """A rule set as Inductor's ``post_grad_custom_post_pass`` (an Inductor
    ``CustomInferenceAwareGraphPass``: Inductor passes ``is_inference``, and graphs of
    training forwards, whose attention intermediates the backward saves, are left alone).

    Attributes:
        rules: the :class:`RuleSet` it runs.
        reports: one :class:`Report` per graph it saw in this process (a graph loaded
            from the FX graph cache was rewritten when it was stored and is not passed
            through the pass again, so it adds none); a training graph's report says why
            it was ``skipped``, and the first one warns.
    """

    def __init__(self, rules: str | RuleSet = "trtllm") -> None:
        self.rules = load_patterns(rules)
        self.reports: list[Report] = []
        self._uuid = rules_hash(self.rules)
        _register_as_custom_pass()

    def __call__(self, graph: fx.Graph, is_inference: bool = True) -> None:
        if is_inference:
            self.reports.append(run_rules(graph, self.rules))
        else:
            self.reports.append(_skipped_training_graph(self))

    def uuid(self) -> str:
        """The rule-set hash (part of Inductor's FX-graph-cache key)."""
        return f"graphfuse:{self.rules.name}:{self._uuid}"

    @property
    def report(self) -> Report | None:
        """The last report, or None before the first graph."""
        return self.reports[-1] if self.reports else None

    def __repr__(self) -> str:
        return f"InductorPass({self.rules!r}, uuid={self._uuid[:12]})"


def inductor_pass(rules: str | RuleSet = "trtllm") -> InductorPass:
    """A rule set as an Inductor custom graph pass (post-grad, after Inductor's own).

    Args:
        rules: a bundled rule-set name, a path to a rule file, or a :class:`RuleSet`.

    Returns:
        an :class:`InductorPass` (a ``CustomGraphPass``: its ``uuid()`` hashes the rule
        set, so the FX graph cache stays correct); ``.reports`` holds what it did.

    Example::

        torch._inductor.config.post_grad_custom_post_pass = graphfuse.inductor_pass()
        fn = torch.compile(model)
    """
    return InductorPass(rules)


class CompileBackend:
    """A ``torch.compile`` backend: AOTAutograd (with Inductor's decompositions), the rule
    set on each inference graph, then Inductor (``inner="inductor"``) or the rewritten
    graph run as it is (``inner="eager"``).

    Attributes:
        rules: the :class:`RuleSet` it runs.
        reports: one :class:`Report` per graph compiled (also on FX-cache hits: the rules
            run before the lookup); a training graph's report says why it was
            ``skipped``, and the first one warns.
    """

    def __init__(self, rules: str | RuleSet = "trtllm", *, inner: str = "inductor") -> None:
        if inner not in ("inductor", "eager"):
            raise ValueError(f"compile_backend: inner is 'inductor' or 'eager', not {inner!r}")
        self.rules = load_patterns(rules)
        self.inner = inner
        self.reports: list[Report] = []

    @property
    def report(self) -> Report | None:
        """The last report, or None before the first graph."""
        return self.reports[-1] if self.reports else None

    def _rewrite(self, gm: fx.GraphModule, is_inference: bool) -> None:
        if not is_inference:
            # Training forward graphs save attention intermediates for the backward; the
            # fused ops have no autograd formula. The rules run on inference graphs only.
            self.reports.append(_skipped_training_graph(self))
            return
        report = run_rules(gm.graph, self.rules)
        if report.total:
            gm.graph.eliminate_dead_code()
            gm.recompile()
        self.reports.append(report)

    def _inductor_inner(self, gm: fx.GraphModule, example_inputs: Sequence[Any], **kw: Any):
        from torch._inductor.compile_fx import compile_fx_inner

        self._rewrite(gm, bool(kw.get("is_inference", False)))
        return compile_fx_inner(gm, example_inputs, **kw)

    def _eager_fw(
        self, gm: fx.GraphModule, example_inputs: Sequence[Any], *, is_inference: bool
    ) -> Callable:
        from functorch.compile import make_boxed_func

        self._rewrite(gm, is_inference)
        return make_boxed_func(gm.forward)

    def __call__(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
        if self.inner == "eager":
            from torch._dynamo.backends.common import aot_autograd
            from torch._inductor.decomposition import select_decomp_table

            backend = aot_autograd(
                fw_compiler=functools.partial(self._eager_fw, is_inference=False),
                inference_compiler=functools.partial(self._eager_fw, is_inference=True),
                decompositions=select_decomp_table(),
            )
            return backend(gm, example_inputs)
        from torch._inductor.compile_fx import compile_fx

        with torch._functorch.config.patch(enable_autograd_cache=False):
            return compile_fx(gm, example_inputs, inner_compile=self._inductor_inner)

    def __repr__(self) -> str:
        return f"CompileBackend({self.rules!r}, inner={self.inner!r})"


def compile_backend(rules: str | RuleSet = "trtllm", *, inner: str = "inductor") -> CompileBackend:
    """A ``torch.compile`` backend that fuses with ``rules`` on the graph Inductor sees.

    Args:
        rules: a bundled rule-set name, a path to a rule file, or a :class:`RuleSet`.
        inner: ``"inductor"`` (compile the rewritten graph with Inductor) or ``"eager"``
            (run the rewritten ATen graph as it is; no C++ compile, for debugging).

    Returns:
        a :class:`CompileBackend`; ``backend.reports`` / ``backend.report`` say what fired.

    Example::

        backend = graphfuse.compile_backend()
        fn = torch.compile(model, backend=backend)
        fn(x)
        print(backend.report.counts)     # {'attention_fp8_out': 2, ...}
    """
    return CompileBackend(rules, inner=inner)
