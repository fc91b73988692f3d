"""The vLLM adapter's runner wrappers and worker methods around a specdraft proposer, without an
engine: a stand-in runner class holding the fields the wrappers read is hooked as vLLM's
``GPUModelRunner`` is (``install_runner_hooks``), then driven through ``execute_model`` and
``propose_draft_token_ids`` as vLLM's step drives them; the worker methods are called on a
stand-in worker. The integration tests drive the same wrappers in a real engine."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from specdraft.adapters.vllm_hooks import RunnerHooks

K, MAX_LEN, VOCAB = 4, 64, 40


def _config(native: bool | str = "auto"):
    return SimpleNamespace(
        speculative_config=SimpleNamespace(num_speculative_tokens=K,
                                           specdraft_options={"strategy": "suffix",
                                                              "native": native}),
        model_config=SimpleNamespace(max_model_len=MAX_LEN, dtype=None,
                                     get_vocab_size=lambda: VOCAB))


class _Runner:
    """The fields of vLLM's GPUModelRunner the wrappers read; execute_model and
    propose_draft_token_ids stand in for vLLM's (propose calls the drafter as vLLM's does)."""

    max_model_len = MAX_LEN
    num_spec_tokens = K

    def __init__(self, drafter):
        self.drafter = drafter
        self.requests: dict = {}
        self.input_batch = SimpleNamespace(req_ids=[], num_prompt_tokens=np.zeros(4, np.int32))
        self.buf = np.zeros((4, MAX_LEN), dtype=np.int32)
        self.num_tokens = np.zeros(4, dtype=np.int32)
        self.executed = 0

    def execute_model(self, scheduler_output):
        self.executed += 1
        return "executed"

    def propose_draft_token_ids(self, scheduler_output, sampled_token_ids):
        return self.drafter.propose(sampled_token_ids, self.num_tokens, self.buf,
                                    slot_mappings=None)


def _out(finished=(), scheduled=None, invalid=None, tokens=3):
    return SimpleNamespace(finished_req_ids=set(finished), scheduled_new_reqs=[],
                           total_num_scheduled_tokens=tokens, num_spec_tokens_to_schedule=K,
                           scheduled_spec_decode_tokens=scheduled or {},
                           num_invalid_spec_tokens=invalid)


@pytest.fixture
def hooked(monkeypatch):
    """The adapter's install_runner_hooks applied to a fresh stand-in runner class."""
    from specdraft.adapters.vllm_v0_32 import runner as runner_module

    cls = type("Runner", (_Runner,), {})
    monkeypatch.setattr(runner_module, "_runner_class", lambda: cls)
    return cls


def _request(prompt, output):
    return SimpleNamespace(sampling_params=SimpleNamespace(max_tokens=100, stop_token_ids=(),
                                                           eos_token_id=None, extra_args=None),
                           output_token_ids=list(output), num_tokens=len(prompt) + len(output))


def _step(runner, tokens, sampled, out):
    runner.input_batch.req_ids = ["a"]
    runner.input_batch.num_prompt_tokens[0] = 3
    runner.buf[0, :len(tokens)] = tokens
    runner.num_tokens[0] = len(tokens)
    runner.requests["a"] = _request(tokens[:3], tokens[3:])
    assert runner.execute_model(out) == "executed"
    return runner.propose_draft_token_ids(out, sampled)


@pytest.mark.parametrize("native", [True, False], ids=["native-core", "python-core"])
def test_the_wrappers_drive_a_specdraft_proposer(hooked, native):
    from specdraft.plugins.vllm import SuffixProposer

    prop = SuffixProposer(_config(native))
    assert prop.hook_problem is None and isinstance(prop.specdraft_hooks, RunnerHooks)
    assert prop.drafter.native is native
    runner = hooked(prop)
    hist = [5, 6, 7, 8, 5, 6, 7, 8, 5, 6]
    assert _step(runner, hist[:4], [[8]], _out()) == [[]]      # first row: its start
    assert prop.tracked and prop.drafter.has("a")
    drafts = _step(runner, hist[:8], [[5, 6, 7, 8]], _out(scheduled={"a": [5, 6, 7, 9]}))
    assert drafts == [[5, 6, 7, 8]]
    # the drafts vLLM verified this step, counted as vLLM's spec_decode counters count them
    # (the step counts them as it reads the rows; the counters as published)
    snap = prop._snapshot()
    assert (snap["drafts"], snap["draft_tokens"], snap["accepted_tokens"]) == (1, 4, 3)
    # draft tokens the scheduler marked invalid are not counted as drafted (vLLM's rule)
    _step(runner, hist[:9], [[5, 6]], _out(scheduled={"a": [5, 6, 7]}, invalid={"a": 2}))
    snap = prop._snapshot()
    assert (snap["drafts"], snap["draft_tokens"], snap["accepted_tokens"]) == (2, 5, 4)
    hist = hist + [7]
    assert prop.steps.view is None                             # unbound after propose
    _step(runner, hist[:10], [[7]], _out(finished={"zz"}))         # an id the drafter never saw
    assert prop.counters["errors"] == 0 and runner.executed == 4
    assert len(prop.steps.pass_log) == 4


@pytest.mark.parametrize("native", [True, False], ids=["native-core", "python-core"])
def test_ends_reported_in_steps_without_propose_are_applied_when_metrics_are_read(hooked, native):
    """vLLM skips ``propose`` in some steps (near max_model_len, an empty batch): the finish it
    reported there reaches the drafter (and its global cache) when the worker's metrics are read."""
    from specdraft.adapters.vllm_v0_32 import worker as worker_module
    from specdraft.plugins.vllm import SuffixProposer

    prop = SuffixProposer(_config(native))
    runner = hooked(prop)
    _step(runner, [5, 6, 7, 8], [[8]], _out())
    _step(runner, [5, 6, 7, 8, 8], [[9]], _out())
    assert prop.drafter.has("a")
    runner.requests["a"].sampling_params.max_tokens = 2  # it ended at its length
    assert runner.execute_model(_out(finished={"a", "zz"})) == "executed"  # no propose follows
    wrapper = SimpleNamespace(worker=SimpleNamespace(model_runner=SimpleNamespace(drafter=prop)))
    m = worker_module._worker_drafter_metrics(wrapper)
    assert m["live_requests"] == 0 and m["finished"] == 1 and m["global_cache_tokens"] == 2  # its output
    assert prop.counters["errors"] == 0 and not prop.drafter.has("a")


def test_ends_in_a_step_that_schedules_nothing_are_applied_at_once(hooked):
    """An idle server's last ends (a cancelled stream, say) reach the worker in a step that
    schedules nothing and has no ``propose``: the drafter lets the request go in that step, so
    the live-request count is back to 0 without waiting for the next request."""
    from specdraft.plugins.vllm import SuffixProposer

    prop = SuffixProposer(_config())
    runner = hooked(prop)
    _step(runner, [5, 6, 7, 8], [[8]], _out())
    assert prop.drafter.has("a")
    runner.requests.pop("a")  # aborted: vLLM's runner drops its state in that step too
    assert runner.execute_model(_out(finished={"a"}, tokens=0)) == "executed"
    assert not prop.drafter.has("a") and prop.drafter.counters.aborted == 1
    assert prop._snapshot()["requests_aborted"] == 1 and prop.counters["errors"] == 0


def test_a_failing_step_begin_is_counted_and_the_engine_steps_on(hooked, monkeypatch):
    from specdraft.plugins.vllm import SuffixProposer

    prop = SuffixProposer(_config())
    runner = hooked(prop)

    def boom(*begin):
        raise RuntimeError("injected")

    monkeypatch.setattr(prop.specdraft_hooks, "step_begin", boom)
    monkeypatch.setattr(prop.specdraft_hooks, "step_started", boom)
    assert _step(runner, [5, 6, 7, 8], [[8]], _out()) == [[]]
    assert runner.executed == 1 and prop.counters["errors"] == 1


def test_a_runner_without_a_specdraft_proposer_is_left_alone(hooked):
    from specdraft.plugins.vllm import SuffixProposer

    SuffixProposer(_config())  # hooks the class
    other = SimpleNamespace(propose=lambda *a, **k: [[1, 2]])
    runner = hooked(other)
    assert _step(runner, [5, 6, 7, 8], [[8]], _out()) == [[1, 2]]
    assert runner.executed == 1


def test_worker_methods_read_the_proposer():
    from specdraft.adapters.vllm_v0_32 import worker as worker_module
    from specdraft.plugins.vllm import SuffixProposer

    prop = SuffixProposer(_config())
    prop.counters["proposer_seconds"], prop.counters["steps"] = 0.5, 3
    prop.steps.count_pass(2, 7, 0.25)

    def wrapper(drafter):
        return SimpleNamespace(worker=SimpleNamespace(model_runner=SimpleNamespace(drafter=drafter)))

    m = worker_module._worker_drafter_metrics(wrapper(prop))
    assert m["proposer_seconds"] == 0.5 and m["proposer_steps"] == 3
    assert m["pass_costs"] == [[2, 7, 1, 0.25]] and m["pass_log"] == [[2, 7, 0.25]]
    assert m["global_cache_tokens"] == prop.drafter.metrics()["global_cache_tokens"]
    assert worker_module._worker_drafter_metrics(wrapper(None)) is None
    assert worker_module._worker_drafter_metrics(wrapper(SimpleNamespace())) is None

    prop.drafter.add_to_global_cache([1, 2, 3, 4, 5])
    old = prop.drafter
    reset = worker_module._reset_worker_state(wrapper(prop))
    assert reset == {"drafter": "SuffixProposer", "dropped_requests": 0,
                     "dropped_cache_tokens": old.metrics()["global_cache_tokens"]}
    assert prop.drafter is not old and prop.steps.drafter is prop.drafter
    assert worker_module._reset_worker_state(wrapper(None)) == {"drafter": None}
    assert worker_module._reset_worker_state(wrapper(SimpleNamespace())) == {
        "drafter": "SimpleNamespace"}
