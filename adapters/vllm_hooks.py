"""What the vLLM adapter calls on a specdraft proposer, in one place.

The adapter's runner wrappers (``install_runner_hooks``) and worker methods (``collective_rpc``)
read one attribute of the runner's drafter, ``specdraft_hooks`` (``HOOKS_ATTR``), and call only
the methods of the ``RunnerHooks`` it holds. vLLM's own proposers have none: the wrappers then
leave vLLM's calls alone. The fields are callables taken once, when the proposer is built
(bound methods), so a wrapper pays one attribute load per call, every engine step.
This module imports no engine and holds no vLLM-version fact.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

HOOKS_ATTR = "specdraft_hooks"


@dataclasses.dataclass(slots=True, kw_only=True)
class RunnerHooks:
    """A proposer's side of the vLLM adapter's wrappers."""

    # execute_model's start: the adapter's StepBegin (requests that ended since the last step,
    # tokens scheduled, new requests' scopes, the step's start time)
    step_begin: Callable[[Any], None]
    # around propose: the adapter's StepView over the runner's batch, then None
    bind: Callable[[Any], None]
    # before propose: the step's view and sampled rows, whose verified drafts the proposer
    # counts as vLLM counts them (the view's ``verified``), or leaves to its native step
    verified: Callable[[Any, list], None]
    # a hook raised: counted and logged; the engine goes on
    failed: Callable[[Exception], None]
    # the worker's counters (the adapter's METRICS_METHOD)
    metrics: Callable[[], dict]
    # forget every request and the global cache, between benchmark rounds (RESET_METHOD)
    reset: Callable[[], dict]
