"""The one vLLM 0.34 runner patch: each new request's ``SamplingParams`` handed to specdraft's
speculator before the runner adds the request.

vLLM's ``BaseSpeculator.add_request(req_index)`` carries the slot only. specdraft needs, per
request, its tenant scope (``cache_salt``, which process 0 copies into
``SamplingParams.extra_args``), whether it opted out of speculation, and its stop rules
(``max_tokens``, stop ids), all in ``NewRequestData.sampling_params``. The wrapper is installed by
the speculator's constructor, so engines that do not use specdraft are never touched, and it
reads only the scheduler output it is given (``contract.SOURCE_FUNCTIONS`` lists
``GPUModelRunner.add_requests``; tests/test_vllm034_speculator.py drives it).
"""

from __future__ import annotations

import functools
from typing import Any

PATCHED_ATTR = "_specdraft_request_params"


def runner_class():
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner

    return GPUModelRunner


def install_request_params(runner_cls: Any = None) -> str | None:
    """Wrap ``runner_cls.add_requests`` (default vLLM 0.34's GPUModelRunner, which the CPU runner
    inherits) once; None if done, else why it could not be (the speculator then drafts with no
    scope, opt-out or stop rules)."""
    try:
        cls = runner_class() if runner_cls is None else runner_cls
        original = cls.add_requests
    except Exception as e:  # noqa: BLE001 - reported by the caller, serving goes on
        return f"GPUModelRunner.add_requests not found ({e})"
    if getattr(original, PATCHED_ATTR, False):
        return None

    @functools.wraps(original)
    def add_requests(self, scheduler_output, *args, **kwargs):
        speculator = getattr(self, "speculator", None)
        take = getattr(speculator, "new_request", None)
        if take is not None:
            for new in scheduler_output.scheduled_new_reqs:
                take(new.req_id, new.sampling_params)
        return original(self, scheduler_output, *args, **kwargs)

    setattr(add_requests, PATCHED_ATTR, True)
    cls.add_requests = add_requests
    return None
