"""vLLM 0.32's propose call through the adapter's one mapping onto ``SpecDrafter.step``.

``SpecdraftProposer.propose`` reads vLLM's arrays as flat arrays (``StepView.step_rows``: request
ids, tokens emitted, vLLM's token buffer as is, the drafts verified this step, budgets, the
requests this step ended) and runs the batch as one ``SpecDrafter.step``. Random engine runs drive
two proposers, one on the native core and one on the Python core (``native: false``), with the
same calls vLLM's runner makes: requests arrive (a prefill step first), emit the accepted part of
their draft plus one token, are reordered, preempted and resumed, hit stop tokens, ``max_tokens``
or ``max_model_len``, are aborted, opt out of speculation; small global caches so eviction
happens. Every step both must return the same drafts, within each row's budget; at the end both
hold the same requests and global cache, and their verified-draft counters equal what the
stand-in scheduler counted, as vLLM's scheduler counts ``vllm:spec_decode_*``.

The runner and scheduler output are stand-ins holding the fields the adapter reads (no engine
runs here); the integration tests drive the same path in a real vLLM engine.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdraft.adapters import vllm_adapter, vllm_step

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

VOCAB = 40


def _config(k: int, max_model_len: int, options: dict):
    return SimpleNamespace(
        speculative_config=SimpleNamespace(num_speculative_tokens=k, specdraft_options=options),
        model_config=SimpleNamespace(max_model_len=max_model_len, dtype=None,
                                     get_vocab_size=lambda: VOCAB))


class _Params:
    def __init__(self, rng: random.Random):
        self.max_tokens = rng.choice([None, rng.randint(1, 60)])
        self.stop_token_ids = rng.sample(range(VOCAB), rng.choice([0, 0, 1, 2]))
        self.eos_token_id = rng.choice([None, VOCAB - 1])
        self.ignore_eos = rng.random() < 0.2
        self.extra_args = {"specdraft": {"speculate": False}} if rng.random() < 0.1 else None


class _Request:
    """The runner's CachedRequestState fields the adapter reads."""

    def __init__(self, rng: random.Random, prompt: list[int]):
        self.sampling_params = None if rng.random() < 0.1 else _Params(rng)
        self.prompt = prompt
        self.output_token_ids: list[int] = []

    @property
    def num_tokens(self) -> int:
        return len(self.prompt) + len(self.output_token_ids)


def _ends(req: _Request, num_sampled: int, max_model_len: int) -> bool:
    """The scheduler's check_stop for this step's tokens, written plainly (the stand-in
    engine's own rule, not the adapter's)."""
    sp = req.sampling_params
    if req.num_tokens >= max_model_len:
        return True
    if sp is None:
        return False
    if sp.max_tokens is not None and len(req.output_token_ids) >= sp.max_tokens:
        return True
    stops = set(sp.stop_token_ids) | ({sp.eos_token_id} if sp.eos_token_id is not None
                                      and not sp.ignore_eos else set())
    return any(t in stops for t in req.output_token_ids[-num_sampled:])


def _stream(rng: random.Random, n: int, motifs: list[list[int]]) -> list[int]:
    out: list[int] = []
    while len(out) < n:
        out.extend(rng.choice(motifs) if rng.random() < 0.7 else [rng.randrange(VOCAB)])
    return out[:n]


def _run(seed: int, options: dict, k: int, max_model_len: int, steps: int, monkeypatch) -> None:
    from specdraft.plugins.vllm import SpecdraftProposer

    adapter = vllm_adapter()
    rng = random.Random(seed)
    native = SpecdraftProposer(_config(k, max_model_len, {**options, "native": True}))
    twin = SpecdraftProposer(_config(k, max_model_len, {**options, "native": False}))
    assert native.drafter.native and not twin.drafter.native
    clock = [1000.0]  # the step timings both controllers learn from must be the same
    monkeypatch.setattr(vllm_step, "time", SimpleNamespace(perf_counter=lambda: clock[0]))

    motifs = [[rng.randrange(VOCAB) for _ in range(rng.randint(2, 6))] for _ in range(6)]
    requests: dict[str, _Request] = {}
    batch: list[str] = []          # the runner's rows, in order
    prefill: set[str] = set()      # rows whose first step is their prefill
    paused: list[str] = []         # preempted requests, back later
    ended: list[tuple[str, bool]] = []  # reported with the next step (finished_req_ids)
    last: dict[str, list[int]] = {}     # each request's draft from the previous step
    next_id = 0
    verified = {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0}  # as vLLM's scheduler counts
    for step in range(steps):
        for rid, _ in ended:  # the runner drops requests that ended (their events may be lost)
            requests.pop(rid, None)
        for _ in range(rng.choice([0, 0, 0, 1, 2]) if batch else 2):
            rid = f"r{next_id}"
            next_id += 1
            requests[rid] = _Request(rng, _stream(rng, rng.randint(1, 30), motifs))
            batch.append(rid)
            prefill.add(rid)
        if paused and rng.random() < 0.3:
            batch.append(paused.pop(rng.randrange(len(paused))))
        if len(batch) > 1 and rng.random() < 0.3:
            rng.shuffle(batch)
        # the tokens each row emits: the accepted prefix of its draft, then one more
        sampled, scheduled = [], {}
        for rid in batch:
            req = requests[rid]
            if rid in prefill:
                prefill.discard(rid)
                sampled.append([])
                continue
            draft = last.pop(rid, [])
            if draft:
                scheduled[rid] = draft
            acc = rng.randint(0, len(draft)) if rng.random() < 0.8 else 0
            bonus = rng.randrange(VOCAB) if rng.random() < 0.5 else rng.choice(motifs)[0]
            toks = draft[:acc] + [bonus]
            toks = toks[:max(1, max_model_len - req.num_tokens)]
            req.output_token_ids.extend(toks)
            sampled.append(toks)
            if draft:
                verified["drafts"] += 1
                verified["draft_tokens"] += len(draft)
                verified["accepted_tokens"] += len(toks) - 1
        num_rows = len(batch)
        buf = np.zeros((num_rows + 2, max_model_len), dtype=np.int32)
        num_tokens = np.zeros(num_rows + 2, dtype=np.int32)
        num_prompt = np.zeros(num_rows + 2, dtype=np.int32)
        for i, rid in enumerate(batch):
            req = requests[rid]
            hist = req.prompt + req.output_token_ids
            buf[i, :len(hist)] = hist
            num_tokens[i], num_prompt[i] = len(hist), len(req.prompt)
        input_batch = SimpleNamespace(req_ids=list(batch), num_prompt_tokens=num_prompt,
                                      token_ids_cpu=buf, num_tokens_no_spec=num_tokens)
        runner = SimpleNamespace(input_batch=input_batch, requests=requests)
        out = SimpleNamespace(scheduled_spec_decode_tokens=scheduled,
                              num_spec_tokens_to_schedule=rng.choice([0, k, max(1, k - 2)]))
        started_at = clock[0] - rng.choice([0.001, 0.02, 0.3])
        scored = sum(map(len, sampled)) + sum(map(len, scheduled.values()))
        answers = []
        begin = rng.random() < 0.9 or step == 0  # else the step's events never arrive
        for prop in (native, twin):
            if begin:
                prop.specdraft_hooks.step_begin(list(ended), scored, started_at, ())
            prop.specdraft_hooks.bind(runner, out)
            answers.append(prop.propose(sampled, num_tokens, buf, slot_mappings=None))
            prop.specdraft_hooks.unbind()
        assert native.counters["errors"] == twin.counters["errors"] == 0, f"step {step}"
        assert answers[0] == answers[1], f"step {step}"
        drafts = answers[0]
        assert len(drafts) == num_rows
        ended = []
        for i, rid in enumerate(list(batch)):
            req = requests[rid]
            assert len(drafts[i]) <= k and req.num_tokens + len(drafts[i]) < max_model_len or not drafts[i]
            sp = req.sampling_params
            if sp is not None and sp.extra_args:  # opted out
                assert not drafts[i]
            if sampled[i] and _ends(req, len(sampled[i]), max_model_len):
                assert not drafts[i]
                batch.remove(rid)
                ended.append((rid, False))
            elif req.num_tokens >= max_model_len - 1:  # the scheduler's length limit
                batch.remove(rid)
                ended.append((rid, False))
            elif rng.random() < 0.03:
                batch.remove(rid)
                ended.append((rid, True))
            elif rng.random() < 0.04 and rid not in prefill:
                batch.remove(rid)
                paused.append(rid)
            elif drafts[i]:
                last[rid] = drafts[i]
    for prop in (native, twin):
        prop._count_lengths()
        assert {key: prop.counters[key] for key in verified} == verified
    stats = [p.drafter.counters.as_dict() for p in (native, twin)]
    for s in stats:
        s.pop("draft_time_s")
        s.pop("update_time_s")
    assert stats[0] == stats[1]
    for key in ("rows", "proposed_drafts", "proposed_draft_tokens", "steps", "errors"):
        assert native.counters[key] == twin.counters[key], key
    assert native._length_counts.tolist() == twin._length_counts.tolist()
    assert sorted(native.drafter.req_ids()) == sorted(twin.drafter.req_ids())
    assert native.drafter.core.global_tokens() == twin.drafter.core.global_tokens()
    assert stats[0]["drafts"] > 0


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), strategy=st.sampled_from(["suffix", "tree"]),
       adaptive=st.booleans(), cache=st.sampled_from([50, 400, 100000]),
       k=st.sampled_from([1, 4, 16]))
def test_vllm_step_on_the_native_and_python_cores(seed, strategy, adaptive, cache, k, monkeypatch):
    options = {"strategy": strategy, "adaptive": adaptive, "global_cache_tokens": cache,
               "cost_model": "gpu", "max_depth": 12}
    _run(seed, options, k, max_model_len=96, steps=70, monkeypatch=monkeypatch)  # past RETAIN_EVERY


def test_a_bad_token_in_vllms_buffer_costs_one_step_of_drafts_not_the_engine():
    """A failure inside the step (here a token id outside the vocabulary in vLLM's buffer)
    returns no drafts for the step, is counted, and the next step drafts again."""
    from specdraft.plugins.vllm import SpecdraftProposer

    prop = SpecdraftProposer(_config(4, 64, {"native": True, "cost_model": "gpu"}))
    assert prop.drafter.native
    hist = [3, 4, 5, 3, 4, 5, 3, 4]
    buf = np.zeros((1, 64), dtype=np.int32)
    buf[0, :8] = hist
    req = SimpleNamespace(sampling_params=None, output_token_ids=[4], num_tokens=8)

    def call(sampled, n):
        batch = SimpleNamespace(req_ids=["a"], num_prompt_tokens=np.array([7], dtype=np.int32))
        runner = SimpleNamespace(input_batch=batch, requests={"a": req})
        out = SimpleNamespace(scheduled_spec_decode_tokens={}, num_spec_tokens_to_schedule=4)
        prop.specdraft_hooks.bind(runner, out)
        try:
            return prop.propose(sampled, np.array([n], dtype=np.int32), buf)
        finally:
            prop.specdraft_hooks.unbind()

    buf[0, 3] = VOCAB + 5  # out of range: the engine step refuses the row
    assert call([[4]], 8) == [[]]
    assert prop.counters["errors"] == 1 and prop.drafter.counters.errors == 1
    buf[0, 3] = 3
    assert call([[4]], 8)[0][:3] == [5, 3, 4]
    assert prop.counters["errors"] == 1
    assert prop.tracked


def test_a_planted_change_to_the_accepted_count_rule_fails(monkeypatch):
    """The accepted-count rule (emitted tokens minus one, capped by what was drafted) is written
    once (``proposers.base.accepted_counts``); a planted change to it (forgetting that the last
    emitted token is the target's own) makes the verified-draft counters disagree with the
    stand-in scheduler's."""
    from specdraft.adapters.vllm_v0_32 import runner
    from specdraft.proposers.base import accepted_counts

    assert accepted_counts(np.array([3, 1]), np.array([5, 0])).tolist() == [2, -1]

    def planted(num_emitted, num_drafted):
        return np.where(num_drafted > 0, np.minimum(num_emitted, num_drafted), -1)

    options = {"strategy": "suffix", "adaptive": False, "global_cache_tokens": 100000,
               "cost_model": "gpu", "max_depth": 12}
    _run(1, options, 4, max_model_len=96, steps=70, monkeypatch=monkeypatch)  # as it is: passes
    monkeypatch.setattr(runner, "accepted_counts", planted)
    with pytest.raises(AssertionError, match="accepted_tokens"):
        _run(1, options, 4, max_model_len=96, steps=70, monkeypatch=monkeypatch)
