"""``FakePropagator.scan`` keys a call's arguments the same whether its nodes' values were
keyed before (every node a cache hit: the parts are returned as found) or not (the misses
are keyed after the pass): both equal ``_key_parts``."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from graphfuse._fake import _MISSING, FakePropagator

from .test_builder_scan import CASES, _args, _graph, _other


@pytest.mark.parametrize("target,spec", CASES)
def test_keys_agree_cold_and_warm(target: Any, spec: tuple) -> None:
    g, nodes = _graph()
    args = _args(spec, nodes, _other())
    fake = FakePropagator()
    cold = fake.scan(args, g)
    warm = fake.scan(args, g)  # (every value now keyed, unless it has none)
    want = fake._key_parts(args)
    if cold is None:
        assert warm is None
        return
    assert (cold is _MISSING) == (warm is _MISSING) == (want is None)
    if want is not None:
        assert cold == warm == want
        assert all(type(p) is not torch.fx.Node for p in warm)


def test_a_value_keyed_through_another_node_is_a_hit() -> None:
    g, nodes = _graph()
    fake = FakePropagator()
    first = fake.scan((nodes["x"], 2.0), g)
    same_val = g.placeholder("x2")
    same_val.meta["val"] = nodes["x"].meta["val"]
    assert fake.scan((same_val, 2.0), g) == first
    assert first[1] == (float, 2.0)
