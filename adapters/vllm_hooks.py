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
from typing import Any, Callable, Sequence

HOOKS_ATTR = "specdraft_hooks"


@dataclasses.dataclass(slots=True, kw_only=True)
class RunnerHooks:
    """A proposer's side of the vLLM adapter's wrappers."""

    # execute_model's start, as positional arguments (no object built each step): the requests
    # that ended since the last step as (req_id, aborted), the tokens scheduled, the step's start
    # time (perf_counter), new requests' (req_id, scope)
    step_begin: Callable[[Sequence[tuple[str, bool]], int, float, Sequence[tuple[str, str]]], None]
    # the same for a step that ended no request and started none (most steps): (tokens scheduled,
    # start time), one tuple, so that the proposer can take it without a Python frame
    step_started: Callable[[tuple[int, float]], None]
    # around propose: vLLM's runner and scheduler output (the proposer's adapter ``StepView``
    # reads them; the step counts the drafts vLLM verified from its rows)
    bind: Callable[[Any, Any], None]
    # after propose: the step's view released (the proposer can take it without a Python frame)
    unbind: Callable[[], None]
    # a hook raised: counted and logged; the engine goes on
    failed: Callable[[Exception], None]
    # the worker's counters (the adapter's METRICS_METHOD)
    metrics: Callable[[], dict]
    # forget every request and the global cache, between benchmark rounds (RESET_METHOD)
    reset: Callable[[], dict]
