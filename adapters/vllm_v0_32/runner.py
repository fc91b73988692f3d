"""vLLM 0.32 model-runner hooks: request identity for each ``propose`` call.

``install_runner_hooks`` wraps ``GPUModelRunner.execute_model`` (the step's begin: the requests
that ended since the last step, the tokens scheduled, new requests' scopes) and
``propose_draft_token_ids`` (a bound ``StepView`` over the runner's batch and scheduler output).
``StepRows`` is one propose call as ``SpecDrafter.step`` arguments.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import time
from itertools import repeat
from typing import Any, Callable, Sequence

import numpy as np

from specdraft.adapters.vllm_hooks import HOOKS_ATTR
from specdraft.adapters.vllm_step import ends_in_step, stop_token_ids as _stop_token_ids
from specdraft.adapters.vllm_v0_32.config import request_scope
from specdraft.proposers.base import accepted_count


def ended_normally(req_state: Any, max_model_len: int, lookback: int) -> bool:
    """Did a request in ``finished_req_ids`` stop on its own (stop token, max_tokens, length)?

    The engine core reports finished and aborted requests alike. vLLM implements stop strings
    as an abort from the front end, so those count as aborted here too.
    """
    sp = getattr(req_state, "sampling_params", None)
    out = getattr(req_state, "output_token_ids", None) or []
    if sp is None:
        return False
    # With speculation, tokens accepted after a stop token stay in the runner's copy.
    return ends_in_step(len(out), req_state.num_tokens, getattr(sp, "max_tokens", None),
                        _stop_token_ids(sp), out[-lookback:], max_model_len)


def stopped_in_step(req_state: Any, max_model_len: int, num_sampled: int) -> bool:
    """Did the tokens sampled in this step end the request (the scheduler will finish it)?

    Read in the step itself, so a request's history reaches the global cache without waiting
    for the next step (``finished_req_ids`` arrives only then, if traffic goes on at all).
    ``runner.requests[id].output_token_ids`` already holds this step's tokens at ``propose``.
    Stop strings are found by the front end, which then aborts: those wait for the next step.
    """
    sp = getattr(req_state, "sampling_params", None)
    out = getattr(req_state, "output_token_ids", None)
    if sp is None or out is None or num_sampled <= 0:
        return False
    n = len(out)
    return ends_in_step(n, req_state.num_tokens, getattr(sp, "max_tokens", None),
                        _stop_token_ids(sp), out[n - num_sampled:], max_model_len)


def _request_speculates(req_state: Any) -> bool:
    from specdraft.proposers.config import request_speculates

    sp = getattr(req_state, "sampling_params", None)
    return request_speculates(getattr(sp, "extra_args", None) if sp is not None else None)


class StepView:
    """Request identity for one ``propose`` call, read from the model runner."""

    __slots__ = ("runner", "scheduler_output")

    def __init__(self, runner: Any, scheduler_output: Any):
        self.runner = runner
        self.scheduler_output = scheduler_output

    def budget(self, num_speculative_tokens: int) -> int:
        n = getattr(self.scheduler_output, "num_spec_tokens_to_schedule", None)
        return n if n and 0 < n < num_speculative_tokens else num_speculative_tokens

    def verified(self, sampled_token_ids: list[list[int]]) -> tuple[int, int, int]:
        """(drafts, draft tokens, accepted tokens) verified in this step, counted as the
        scheduler counts ``vllm:spec_decode_*`` (``Scheduler.update_from_output``)."""
        scheduled = self.scheduler_output.scheduled_spec_decode_tokens
        if not scheduled:
            return 0, 0, 0
        invalid = getattr(self.scheduler_output, "num_invalid_spec_tokens", None) or {}
        req_ids = self.runner.input_batch.req_ids
        drafts = draft_tokens = accepted = 0
        for i, sampled in enumerate(sampled_token_ids):
            spec = scheduled.get(req_ids[i]) if sampled else None
            if spec:
                drafts += 1
                draft_tokens += len(spec) - invalid.get(req_ids[i], 0)
                accepted += accepted_count(len(sampled), len(spec))  # both non-empty here: >= 0
        return drafts, draft_tokens, accepted

    def invalid_draft_tokens(self, sampled_token_ids: list[list[int]]) -> int:
        """Draft tokens of this step's verified drafts that the scheduler marked invalid (left
        out of ``vllm:spec_decode_num_draft_tokens``); 0 in most steps."""
        invalid = getattr(self.scheduler_output, "num_invalid_spec_tokens", None)
        if not invalid:
            return 0
        scheduled = self.scheduler_output.scheduled_spec_decode_tokens
        req_ids = self.runner.input_batch.req_ids
        return sum(invalid.get(req_ids[i], 0) for i, sampled in enumerate(sampled_token_ids)
                   if sampled and scheduled.get(req_ids[i]))

    def live_req_ids(self):
        return self.runner.requests.keys()

    def step_rows(self, sampled_token_ids: list[list[int]], num_tokens_no_spec: Any,
                  num_speculative_tokens: int, max_model_len: int, speculates: Any) -> "StepRows":
        """The batch as flat arrays, for ``SpecDrafter.step`` (no Python loop over rows that
        decode; rows still in prefill emit nothing and are left out)."""
        num_rows = len(sampled_token_ids)
        batch = self.runner.input_batch
        all_ids = batch.req_ids
        if len(all_ids) < num_rows:
            raise RuntimeError(
                f"vLLM batch has {len(all_ids)} request ids for {num_rows} rows")
        emitted = list(map(len, sampled_token_ids))
        num_tokens = num_tokens_no_spec[:num_rows]
        num_prompt = batch.num_prompt_tokens[:num_rows]
        if 0 in emitted:  # some rows are still in prefill
            rows = [i for i, e in enumerate(emitted) if e]
            req_ids = [all_ids[i] for i in rows]
            emitted = [emitted[i] for i in rows]
            num_tokens, num_prompt = num_tokens[rows], num_prompt[rows]
        else:
            rows, req_ids = None, all_ids[:num_rows]
        scheduled = self.scheduler_output.scheduled_spec_decode_tokens
        num_drafted = map(len, map(scheduled.get, req_ids, repeat(())))
        num_accepted = list(map(accepted_count, emitted, num_drafted))
        budget = self.budget(num_speculative_tokens)
        wanted = list(map(speculates.__getitem__, req_ids))
        # requests this step's tokens ended: finished (into the global cache) in this step, not
        # at the next one (finished_req_ids arrives only then, if traffic goes on at all)
        requests = self.runner.requests
        ended = [r for r, e in zip(req_ids, emitted)
                 if stopped_in_step(requests.get(r), max_model_len, e)]
        if ended:
            gone = set(ended)
            wanted = [w and r not in gone for w, r in zip(wanted, req_ids)]
        budgets = budget if all(wanted) else [budget if w else 0 for w in wanted]
        return StepRows(num_rows, rows, req_ids, num_tokens, num_prompt, budgets, num_accepted,
                        emitted, max_model_len - 1, ended)

    def request_speculates(self, req_id: str) -> bool:
        req_state = self.runner.requests.get(req_id)
        return req_state is None or _request_speculates(req_state)

    def engine_step(self, engine: Any, core: Any, args: tuple, kwargs: dict,
                    num_speculative_tokens: int, max_model_len: int, finished: list,
                    aborted: list, scored_tokens: int, scored_seconds: float) -> list[list[int]]:
        """The propose call handed to the native engine step (proposers/native/engine_step.h)
        with vLLM's arrays as they are: the same rows, accepted counts, budgets and ended requests
        as ``step_rows`` (its plain-Python twin), and vLLM's ``list[list[int]]`` back.

        0.32 facts it relies on: at ``propose`` the sampled tokens are already in
        ``token_ids_cpu[i, :num_tokens_no_spec[i]]``, and ``num_tokens_no_spec[i]`` equals
        ``requests[req_ids[i]].num_tokens`` (= ``num_prompt_tokens[i]`` + its output tokens).
        """
        sampled, num_tokens_no_spec, token_ids_cpu = (
            args if len(args) == 3 else propose_arguments(args, kwargs))  # 0.32: three by position
        batch = self.runner.input_batch
        out = self.scheduler_output
        return engine.step(core, batch.req_ids, sampled, num_tokens_no_spec, token_ids_cpu,
                           batch.num_prompt_tokens, out.scheduled_spec_decode_tokens,
                           self.budget(num_speculative_tokens),
                           max_model_len - 1, max_model_len, self.request_rule, finished, aborted,
                           scored_tokens, scored_seconds)

    def request_rule(self, req_id: str) -> tuple | None:
        """What the native step needs of a request, asked once: (speculates, max_tokens,
        stop token ids), the rules of ``request_speculates`` and ``stopped_in_step``; None
        for a request without sampling parameters (speculates, never ended here)."""
        req_state = self.runner.requests.get(req_id)
        sp = getattr(req_state, "sampling_params", None)
        if sp is None or getattr(req_state, "output_token_ids", None) is None:
            return None
        return (_request_speculates(req_state), getattr(sp, "max_tokens", None),
                tuple(_stop_token_ids(sp)))


# ---------------------------------------------------------------------------------------------
# The engine step: vLLM's propose call as SpecDrafter.step arguments
# ---------------------------------------------------------------------------------------------

# vLLM 0.32 calls ``drafter.propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu,
# slot_mappings=...)`` (GPUModelRunner.propose_draft_token_ids, custom_class branch).
PROPOSE_PARAMS = ("sampled_token_ids", "num_tokens_no_spec", "token_ids_cpu", "slot_mappings")


def propose_arguments(args: tuple, kwargs: dict) -> tuple[list[list[int]], Any, Any]:
    """(sampled_token_ids, num_tokens_no_spec, token_ids_cpu) from vLLM's propose call."""
    if len(args) >= 3:
        return args[0], args[1], args[2]
    bound = dict(zip(PROPOSE_PARAMS, args))
    bound.update(kwargs)
    try:
        return bound["sampled_token_ids"], bound["num_tokens_no_spec"], bound["token_ids_cpu"]
    except KeyError as e:
        raise TypeError(f"propose() called without {e.args[0]}; vLLM 0.32 passes "
                        f"{', '.join(PROPOSE_PARAMS)}") from None


@dataclasses.dataclass
class StepRows:
    """One propose call as ``SpecDrafter.step`` arguments (per-row values: lists or arrays)."""

    num_rows: int           # rows in vLLM's batch (len(sampled_token_ids))
    rows: Any               # the batch rows handed to the drafter (None: all of them; rows still
    #                         in prefill emit nothing and are left out)
    req_ids: list           # their request ids
    num_tokens: Any
    num_prompt_tokens: Any
    budgets: Any            # an int for every row, or one per row (0: the request opted out)
    num_accepted: Any
    num_emitted: Any
    # A sequence may not grow past max_model_len, and the step emits one token past the draft:
    # a draft ends at max_model_len - 1 tokens. (vLLM also skips drafting for a step whose
    # longest sequence + K exceeds max_model_len.)
    max_len: int
    ended: list = dataclasses.field(default_factory=list)  # requests this step's tokens ended


def stateless_rows(sampled_token_ids: list[list[int]], num_tokens_no_spec: Any,
                   num_speculative_tokens: int, max_model_len: int) -> StepRows:
    """Rows without request ids (propose called outside the runner hook): each row its own
    throwaway request."""
    num_rows = len(sampled_token_ids)
    rows = [i for i, s in enumerate(sampled_token_ids) if s]
    num_tokens = np.asarray(num_tokens_no_spec[:num_rows], dtype=np.int64)[rows]
    return StepRows(num_rows, rows, [f"specdraft-row-{i}" for i in rows], num_tokens, num_tokens,
                    num_speculative_tokens, None, None, max_model_len - 1)


def _runner_class():
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    return GPUModelRunner


def _has_params(fn: Callable, names: tuple[str, ...]) -> bool:
    params = list(inspect.signature(fn).parameters)
    return params[: len(names)] == list(names)


def hooked_step_begin(hooks: Any, runner: Any, scheduler_output: Any) -> None:
    """What the wrapped ``execute_model`` does before vLLM's: the step's start, to the hooks
    (``RunnerHooks.step_begin``: the requests that ended since the last step as (req_id,
    aborted), the tokens scheduled, the start time, new requests' (req_id, scope)). Most steps
    end no request and start none: those go to ``step_started`` (tokens scheduled, start time)."""
    try:
        started_at = time.perf_counter()
        ended = scheduler_output.finished_req_ids
        new_reqs = scheduler_output.scheduled_new_reqs
        if ended or new_reqs:
            hooks.step_begin(_ended(runner, ended) if ended else (),
                             scheduler_output.total_num_scheduled_tokens, started_at,
                             _scopes(new_reqs) if new_reqs else ())
        else:
            hooks.step_started((scheduler_output.total_num_scheduled_tokens, started_at))
    except Exception as e:  # noqa: BLE001 - never take the engine down
        hooks.failed(e)


def hooked_propose(hooks: Any, propose: Callable, runner: Any, scheduler_output: Any,
                   args: tuple, kwargs: dict) -> Any:
    """The wrapped ``propose_draft_token_ids``: the runner and the scheduler's output bound (the
    proposer's ``StepView`` over them) with the rows vLLM sampled (whose verified drafts the
    hooks count), vLLM's ``propose``, then unbound (the benchmark of the proposer's cost calls
    this too, so it times what the engine runs)."""
    try:
        hooks.bind(runner, scheduler_output, args[0] if args else kwargs.get("sampled_token_ids"))
    except Exception as e:  # noqa: BLE001 - never take the engine down (the view is bound)
        hooks.failed(e)
    try:
        return propose(runner, scheduler_output, *args, **kwargs)
    finally:
        hooks.unbind()


def install_runner_hooks() -> str | None:
    """Wrap the runner's step entry and propose call site; None on success, else the reason.

    Called from the proposer's constructor: the runner module is loaded by then (it is building
    the proposer), and engines without a specdraft proposer are never touched. The wrappers do
    nothing unless the runner's drafter holds a ``RunnerHooks`` (specdraft.adapters.vllm_hooks).
    """
    try:
        runner_cls = _runner_class()
    except Exception as e:  # noqa: BLE001
        return f"cannot import vLLM's model runner ({e!r})"
    if getattr(runner_cls, "_specdraft_hooked", False):
        return None
    execute_model = getattr(runner_cls, "execute_model", None)
    propose = getattr(runner_cls, "propose_draft_token_ids", None)
    if execute_model is None or propose is None:
        return "vLLM's model runner has no execute_model/propose_draft_token_ids"
    if not (_has_params(execute_model, ("self", "scheduler_output"))
            and _has_params(propose, ("self", "scheduler_output", "sampled_token_ids"))):
        return "vLLM's model runner methods have unexpected signatures"

    @functools.wraps(execute_model)
    def execute_model_hooked(self, scheduler_output, *args, **kwargs):
        hooks = getattr(getattr(self, "drafter", None), HOOKS_ATTR, None)
        if hooks is not None:
            hooked_step_begin(hooks, self, scheduler_output)
        return execute_model(self, scheduler_output, *args, **kwargs)

    @functools.wraps(propose)
    def propose_hooked(self, scheduler_output, *args, **kwargs):
        hooks = getattr(getattr(self, "drafter", None), HOOKS_ATTR, None)
        if hooks is None:
            return propose(self, scheduler_output, *args, **kwargs)
        return hooked_propose(hooks, propose, self, scheduler_output, args, kwargs)

    runner_cls.execute_model = execute_model_hooked
    runner_cls.propose_draft_token_ids = propose_hooked
    runner_cls._specdraft_hooked = True
    return None


# Step timing for benchmarks, in any engine (vLLM's own proposers, no speculation, specdraft's):
# the time from one execute_model call to the next, filed under the first's shape (requests
# scheduled, tokens scheduled). It covers the whole step as the worker sees it (forward pass,
# sampling or verification, the proposer, output handling and waiting for the next schedule).
# Installed in a worker the first time a benchmark asks for the times (worker.STEP_TIMES_METHOD).
STEP_TIMES_ATTR = "_specdraft_step_times"


def install_step_timer() -> bool:
    """Wrap the runner's execute_model to time steps (idempotent); False if it cannot."""
    runner_cls = _runner_class()
    if getattr(runner_cls, "_specdraft_step_timer", False):
        return True
    execute_model = getattr(runner_cls, "execute_model", None)
    if execute_model is None or not _has_params(execute_model, ("self", "scheduler_output")):
        return False

    @functools.wraps(execute_model)
    def execute_model_timed(self, scheduler_output, *args, **kwargs):
        timer = self.__dict__.get(STEP_TIMES_ATTR)
        if timer is not None:
            now = time.perf_counter()
            last = timer.get("last")
            if last is not None:
                cell = timer["shapes"].setdefault(last[:2], [0, 0.0])
                cell[0] += 1
                cell[1] += now - last[2]
            tokens = int(scheduler_output.total_num_scheduled_tokens)
            timer["last"] = ((len(scheduler_output.num_scheduled_tokens), tokens, now)
                             if tokens else None)
        return execute_model(self, scheduler_output, *args, **kwargs)

    runner_cls.execute_model = execute_model_timed
    runner_cls._specdraft_step_timer = True
    return True


def take_step_times(runner: Any) -> list[list] | None:
    """[requests, tokens scheduled, steps, mean seconds] per step shape since the last call, and
    a fresh start (the step running at the call is not counted); None if steps cannot be timed."""
    if not install_step_timer():
        return None
    timer = runner.__dict__.get(STEP_TIMES_ATTR)
    runner.__dict__[STEP_TIMES_ATTR] = {"shapes": {}, "last": None}
    if timer is None:
        return []
    return [[r, t, n, secs / n] for (r, t), (n, secs) in sorted(timer["shapes"].items())]


def _ended(runner: Any, ended: Any) -> list[tuple[str, bool]]:
    """(req_id, aborted) for the requests in the step's ``finished_req_ids``."""
    max_model_len = runner.max_model_len
    lookback = runner.num_spec_tokens + 1 if getattr(runner, "num_spec_tokens", 0) else 1
    requests = runner.requests
    finished = []
    for req_id in ended:
        req_state = requests.get(req_id)
        aborted = req_state is None or not ended_normally(req_state, max_model_len, lookback)
        finished.append((req_id, aborted))
    return finished


def _scopes(new_reqs: Any) -> list[tuple[str, str]]:
    """(req_id, scope) of the step's new requests that carry a tenant scope."""
    scopes = []
    for new in new_reqs:
        scope = request_scope(new.sampling_params)
        if scope is not None:
            scopes.append((new.req_id, scope))
    return scopes
