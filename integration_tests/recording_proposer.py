"""A specdraft proposer that writes down every step a live vLLM 0.32 engine hands it (imported by
vLLM's worker; integration_tests/record_steps.py runs it).

One JSON line per ``propose`` call, to the file named by ``$SPECDRAFT_RECORD_STEPS``: the
requests that ended since the last call (``finished``: [req_id, aborted]), the tokens the step
scheduled (``scored``), the batch's request ids, what each row sampled, each row's token count,
the drafts vLLM verified (``scheduled``) and ``num_spec_tokens_to_schedule``, the prompt and
sampling parameters of each request seen for the first time (``new``), and the drafts this
proposer answered (``drafts``). integration_tests/test_vllm034.py replays them through both
vLLM adapters.
"""

from __future__ import annotations

import json
import os

from specdraft.plugins.vllm import SuffixProposer

RECORD_ENV = "SPECDRAFT_RECORD_STEPS"


def _params(sp) -> dict:
    return {"max_tokens": sp.max_tokens, "stop_token_ids": list(sp.stop_token_ids or ()),
            "eos_token_id": getattr(sp, "eos_token_id", None),
            "ignore_eos": bool(getattr(sp, "ignore_eos", False)),
            "extra_args": sp.extra_args}


class RecordingSuffixProposer(SuffixProposer):
    def __init__(self, vllm_config):
        super().__init__(vllm_config)
        self._record = open(os.environ[RECORD_ENV], "a")  # noqa: SIM115 - open for the engine's life
        self._finished: list = []
        self._scored = None
        self._bound = None
        self._seen: set[str] = set()
        hooks = self.specdraft_hooks
        begin, started, bind = hooks.step_begin, hooks.step_started, hooks.bind

        def step_begin(finished, scored, started_at, scopes):
            self._finished.extend([r, bool(a)] for r, a in finished)
            self._scored = scored
            begin(finished, scored, started_at, scopes)

        def step_started(pair):
            self._scored = pair[0]
            started(pair)

        def bound(runner, scheduler_output):
            self._bound = (runner, scheduler_output)
            bind(runner, scheduler_output)

        hooks.step_begin, hooks.step_started, hooks.bind = step_begin, step_started, bound

    def propose(self, *args, **kwargs):
        drafts = super().propose(*args, **kwargs)
        sampled, num_tokens, _ = self.adapter.propose_arguments(args, kwargs)
        runner, out = self._bound
        req_ids = list(runner.input_batch.req_ids[:len(sampled)])
        new = {}
        for r in req_ids:
            if r not in self._seen:
                self._seen.add(r)
                state = runner.requests[r]
                new[r] = {"prompt": list(state.prompt_token_ids), **_params(state.sampling_params)}
        scheduled = out.scheduled_spec_decode_tokens or {}
        self._record.write(json.dumps({
            "finished": self._finished, "scored": self._scored, "req_ids": req_ids,
            "sampled": [list(map(int, s)) for s in sampled],
            "num_tokens": [int(n) for n in num_tokens[:len(sampled)]],
            "scheduled": {r: list(map(int, d)) for r, d in scheduled.items()},
            "num_spec": int(out.num_spec_tokens_to_schedule or 0), "new": new,
            "drafts": [list(map(int, d)) for d in drafts]}) + "\n")
        self._record.flush()
        self._finished, self._scored = [], None
        return drafts
