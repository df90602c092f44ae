"""Run in a fresh process by test_cache.py: compile the Llama block with the FX graph cache
on (cache dir from TORCHINDUCTOR_CACHE_DIR), run it, print one JSON line of what happened.

Usage: python _cache_child.py {pass,backend,plain}
"""

from __future__ import annotations

import json
import os
import sys

import torch
from torch._dynamo.utils import counters
from torch._inductor import config

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import graphfuse  # noqa: E402
from tests.compile._compile_model import (  # noqa: E402
    check_fp8_output,
    make_input,
    make_model,
    run_counted,
)  # noqa: E402


def main(form: str) -> None:
    config.fx_graph_cache = True
    config.compile_threads = 1
    model, x = make_model(), make_input(8, seed=3)
    hook = None
    if form == "pass":
        hook = graphfuse.inductor_pass()
        config.post_grad_custom_post_pass = hook
        fn = torch.compile(model)
    elif form == "backend":
        hook = graphfuse.compile_backend()
        fn = torch.compile(model, backend=hook)
    else:
        fn = torch.compile(model)
    with torch.no_grad():
        fn(x)  # compile (or load) outside the counted run
    out, ops = run_counted(fn, x)
    try:
        check_fp8_output(model, x, out)
        numerics = "ok"
    except AssertionError as exc:
        numerics = str(exc)
    result = {
        "fx_hit": counters["inductor"]["fxgraph_cache_hit"],
        "fx_miss": counters["inductor"]["fxgraph_cache_miss"],
        "aot_hit": counters["aot_autograd"]["autograd_cache_hit"],
        "ops": dict(ops),
        "reports": [r.counts for r in hook.reports] if hook is not None else [],
        "numerics": numerics,
    }
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
