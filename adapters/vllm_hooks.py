"""What the vLLM adapter calls on a specdraft proposer, in one place.

The adapter's runner wrappers (``install_runner_hooks``) and worker methods (``collective_rpc``)
read one attribute of the runner's drafter, ``specdraft_hooks`` (``HOOKS_ATTR``), and call only
the methods of the ``RunnerHooks`` it holds. vLLM's own proposers have none: the wrappers then
leave vLLM's calls alone. The fields are callables taken once, when the proposer is built
(bound methods), so a wrapper pays one attribute load per call, every engine step.
This module imports no engine and holds no vLLM-version fact.
"""

from __future__ import annotations

from typing import Any, Callable

HOOKS_ATTR = "specdraft_hooks"


class RunnerHooks:
    """A proposer's side of the vLLM adapter's wrappers."""

    __slots__ = ("step_begin", "bind", "verified", "failed", "metrics", "reset")

    def __init__(self, *, step_begin: Callable[[Any], None], bind: Callable[[Any], None],
                 verified: Callable[[int, int, int], None], failed: Callable[[Exception], None],
                 metrics: Callable[[], dict], reset: Callable[[], dict]):
        # execute_model's start: the adapter's StepBegin (requests that ended since the last
        # step, tokens scheduled, new requests' scopes, the step's start time)
        self.step_begin = step_begin
        # around propose: the adapter's StepView over the runner's batch, then None
        self.bind = bind
        # before propose: (drafts, draft tokens, accepted tokens) vLLM verified in this step
        self.verified = verified
        # a hook raised: counted and logged; the engine goes on
        self.failed = failed
        # the worker's figures (the adapter's METRICS_METHOD)
        self.metrics = metrics
        # forget every request and the global cache, between benchmark rounds (RESET_METHOD)
        self.reset = reset
