"""The vLLM 0.32 adapter's pieces, without an engine: the CPU expand-kernel fix and the
request bookkeeping that stands in for the request ids vLLM's custom_class interface lacks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from vllm.platforms import current_platform

from request_sync import RequestSync, Row


def test_cpu_expand_kernel_fix_writes_the_callers_buffer():
    from specdraft.adapters.vllm_v0_32 import expand_kernel_impl

    temperature = torch.tensor([0.7, -1.0, 1.3])          # -1: a greedy row
    cu = torch.tensor([2, 3, 6], dtype=torch.int32)
    out = torch.full((6,), float("nan"))
    expand_kernel_impl(out, temperature, cu, -1.0, 1.0)
    assert out.tolist() == pytest.approx([0.7, 0.7, 1.0, 1.3, 1.3, 1.3])
    top_k = torch.tensor([5, 0], dtype=torch.int32)
    out_k = torch.full((3,), -9, dtype=torch.int32)
    expand_kernel_impl(out_k, top_k, torch.tensor([1, 3]), 0, 50)
    assert out_k.tolist() == [5, 50, 50]


@pytest.mark.conditional_skip("vLLM's expand-kernel shim exists only in the CPU build")
def test_vllm_0_32_cpu_expand_kernel_is_broken():
    """The bug the fix is for: vLLM's shim leaves a float32 output unwritten."""
    if not current_platform.is_cpu():
        pytest.skip("the shim is CPU-only")
    import vllm._custom_ops  # noqa: F401 - loads the CPU kernels
    from vllm.utils import cpu_triton_utils

    # vLLM's own function, also when specdraft's plugin has already replaced it in this process
    original = getattr(cpu_triton_utils, "_specdraft_original_expand_kernel_impl",
                       cpu_triton_utils._expand_kernel_impl)
    out = torch.full((3,), -7.0)
    original(out, torch.tensor([0.7]), torch.tensor([3], dtype=torch.int32), -1, 1)
    assert out.tolist() == [-7.0, -7.0, -7.0]


class Events:
    """A drafter that records the events it receives (stands in for SpecDrafter's lifecycle)."""

    def __init__(self):
        self.log, self.live = [], {}

    def has(self, r):
        return r in self.live

    def start(self, r, prompt):
        self.log.append(("start", r, list(prompt)))
        self.live[r] = list(prompt)

    def extend(self, r, toks, num_accepted=None):
        self.log.append(("extend", r, list(toks), num_accepted))
        self.live[r] += list(toks)

    def finish(self, r):
        self.log.append(("finish", r))
        del self.live[r]

    def abort(self, r):
        self.log.append(("abort", r))
        self.live.pop(r, None)


def test_start_extend_with_accepted_counts_finish():
    d = Events()
    sync = RequestSync(d)
    toks = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    sync.sync(Row("a", toks, num_prompt_tokens=3, num_tokens=4, num_emitted=1))
    assert d.log == [("start", "a", [1, 2, 3]), ("extend", "a", [4], None)]
    # 3 drafted, 2 accepted + 1 bonus emitted
    assert sync.sync(Row("a", toks, 3, 7, num_drafted=3, num_emitted=3)) == 2
    assert d.live["a"] == toks[:7]
    assert sync.drop("a", aborted=False) and d.log[-1] == ("finish", "a")
    assert not sync.drop("a", aborted=True)  # twice: nothing


def test_preemption_and_resumption_keep_the_history():
    d = Events()
    sync = RequestSync(d)
    toks = list(range(20))
    sync.sync(Row("a", toks, 5, 8, num_emitted=1))
    # preempted: the row disappears for some steps, then resumes with one new token
    sync.sync(Row("a", toks, 5, 9, num_emitted=1))
    assert d.live["a"] == toks[:9]
    assert [e[0] for e in d.log] == ["start", "extend", "extend"]


def test_rewound_history_and_reused_ids_restart():
    d = Events()
    sync = RequestSync(d)
    sync.sync(Row("a", list(range(10)), 4, 10, num_emitted=1))
    sync.sync(Row("a", list(range(10)), 4, 7, num_emitted=1))  # the engine discarded tokens
    assert d.log[-3:] == [("abort", "a"), ("start", "a", [0, 1, 2, 3]),
                          ("extend", "a", [4, 5, 6], None)]
    d.live["b"] = [9]  # state from an earlier request with this id that we never tracked
    sync.sync(Row("b", [1, 2, 3], 2, 3, num_emitted=1))
    assert ("abort", "b") in d.log and d.live["b"] == [1, 2, 3]


def test_retain_and_reset_drop_what_the_engine_no_longer_holds():
    d = Events()
    sync = RequestSync(d)
    for r in "abc":
        sync.sync(Row(r, [1, 2, 3], 2, 3, num_emitted=1))
    assert sync.retain(["a"]) == ["b", "c"] and set(d.live) == {"a"}
    sync.reset()
    assert not d.live and len(sync) == 0


def test_with_the_real_drafter():
    from specdraft.proposers import make_drafter

    d = make_drafter({"strategy": "lookup"}, chain_only=True)
    sync = RequestSync(d)
    toks = [5, 6, 7, 8, 5, 6, 7, 8, 5, 6]
    sync.sync(Row("r", toks, 8, 10, num_emitted=2))
    tree = d.draft("r", 4)
    assert tree.token_ids[:2] == [7, 8]
    sync.drop("r", aborted=False)
    assert not d.has("r") and d.counters.finished == 1


def _fake_vllm_config(k=4, max_model_len=64, vocab=100):
    """Stands in for a VllmConfig: the paths below (propose without the runner's hook) are ones
    a real engine never takes while the hook is installed, so they are driven directly."""
    from types import SimpleNamespace

    return SimpleNamespace(
        speculative_config=SimpleNamespace(num_speculative_tokens=k),
        model_config=SimpleNamespace(max_model_len=max_model_len, dtype=torch.float32,
                                     get_vocab_size=lambda: vocab))


def test_propose_without_request_ids_drafts_each_row_from_its_tokens():
    from specdraft.plugins.vllm import LookupProposer

    proposer = LookupProposer(_fake_vllm_config(k=4, max_model_len=64))
    tokens = np.zeros((3, 64), dtype=np.int32)
    tokens[0, :10] = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9]
    tokens[1, :4] = [1, 2, 3, 4]
    tokens[2, :63] = [7, 8] * 31 + [7]                    # 63: one more is max_model_len
    drafts = proposer.propose([[9], [], [7]], np.array([10, 4, 63]), tokens)
    assert drafts[0] == [5, 6, 7, 8]                      # capped at num_speculative_tokens
    assert drafts[1] == []                                # a row still in prefill
    assert drafts[2] == []                                # no room left under max_model_len
    assert proposer.counters["errors"] == 0 and not proposer.tracked
    assert not proposer.drafter.has("specdraft-row-0")    # nothing kept between steps


def test_a_failing_drafter_costs_one_step_of_drafts_not_the_engine():
    from specdraft.plugins.vllm import SuffixProposer

    proposer = SuffixProposer(_fake_vllm_config())
    tokens = np.array([[3, 4, 3, 4, 3, 4] + [0] * 58])

    def boom(*args, **kwargs):
        raise RuntimeError("injected")

    proposer.drafter.step = boom
    assert proposer.propose([[4]], np.array([6]), tokens) == [[]]
    assert proposer.propose([[4]], np.array([6]), tokens) == [[]]
    assert proposer.counters["errors"] == 2 and proposer.drafter.counters.errors == 2
    del proposer.drafter.step                             # the drafter recovers: drafts again
    assert proposer.propose([[4]], np.array([6]), tokens) != [[]]


class _Params:
    def __init__(self, max_tokens=100, stop_token_ids=(), eos_token_id=2, ignore_eos=False):
        self.max_tokens, self.stop_token_ids = max_tokens, stop_token_ids
        self.eos_token_id, self.ignore_eos = eos_token_id, ignore_eos


class _ReqState:
    def __init__(self, prompt, output, **params):
        self.sampling_params = _Params(**params)
        self.output_token_ids = list(output)
        self.num_tokens = len(prompt) + len(output)


@pytest.mark.parametrize("output, num_sampled, params, stopped", [
    ([5, 6, 7], 2, {}, False),
    ([5, 6, 7], 2, {"max_tokens": 3}, True),                    # max_tokens reached
    ([5, 2, 7], 2, {}, True),                                   # EOS among this step's tokens
    ([2, 6, 7], 2, {}, False),                                  # EOS in an earlier step only
    ([5, 2, 7], 2, {"ignore_eos": True}, False),
    ([5, 9, 7], 2, {"stop_token_ids": [9]}, True),
    ([5] * 8, 1, {}, True),                                     # prompt 4 + 8 = max_model_len
])
def test_a_request_this_step_ends_is_finished_in_the_step(output, num_sampled, params, stopped):
    """The step's rows (StepView.step_rows) mark a request that this step's tokens end (the
    scheduler will finish it) and give it no budget, beside a row that goes on."""
    from types import SimpleNamespace

    from specdraft.adapters.vllm_step import RequestRules
    from specdraft.adapters.vllm_v0_32 import StepView

    other = _ReqState([1, 1, 1, 1], [5, 6])
    req = _ReqState([1, 1, 1, 1], output, **params)
    buf = np.zeros((2, 12), dtype=np.int32)
    buf[0, :6] = [1, 1, 1, 1, 5, 6]
    buf[1, :req.num_tokens] = [1, 1, 1, 1] + output
    batch = SimpleNamespace(req_ids=["other", "r"], num_prompt_tokens=np.array([4, 4]))
    view = StepView(SimpleNamespace(input_batch=batch, requests={"other": other, "r": req}),
                    SimpleNamespace(scheduled_spec_decode_tokens={}))
    rows = view.step_rows([[6], output[-num_sampled:]], np.array([6, req.num_tokens]), buf, 4,
                          12, RequestRules())
    assert rows.ended == (["r"] if stopped else [])
    assert np.broadcast_to(rows.budgets, 2).tolist() == [4, 0 if stopped else 4]
