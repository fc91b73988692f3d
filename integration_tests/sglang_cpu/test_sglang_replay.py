"""A recorded greedy trace through the SGLang adapter gives ``specdraft replay``'s tree counts.

Each step runs SGLang's own code where it can run here: ``NGRAMWorker._prepare_draft_tokens``
(tails, lengths, the overlap splice) calling specdraft's corpus, then SGLang's Triton tree kernels
(Triton's CPU interpreter) to derive the verify links and walk the tree greedily against the
recorded output. What stands in for the engine: ``Req``/batch objects carrying the fields that
method reads, and the trace's next tokens as the target's argmax. Requests run one at a time
in trace order, as ``specdraft replay`` does.
"""

from __future__ import annotations

import os

import pytest

from specdraft.replay import METHODS, load_trace, replay_request

TRACE = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "traces",
                     "qwen2.5-coder-1.5b.jsonl")
N = 12            # SGLang's default --speculative-num-draft-tokens for NGRAM: 11 draft nodes
TRIE_DEPTH = 18   # SGLang's default --speculative-ngram-max-trie-depth (the tail length)


class Req:
    """The fields of SGLang's ``Req`` that the NGRAM worker and specdraft's corpus read."""

    def __init__(self, rid, prompt):
        self.rid = rid
        self.origin_input_ids_unpadded = list(prompt)
        self.output_ids = []
        self.finished_reason = None

    def finished(self):
        return self.finished_reason is not None


class Batch:
    def __init__(self, reqs, spec_info=None):
        self.reqs = reqs
        self.spec_info = spec_info

    def grammar_needs_sync(self):
        return False


class Relay:
    """Overlap scheduling: last step's accepted tokens, not yet in ``req.output_ids``."""

    def __init__(self, accept_tokens, accept_lens):
        self.accept_tokens = accept_tokens
        self.accept_lens = accept_lens


def make_worker(overlap: bool):
    from specdraft.adapters import sglang_v0_5 as adapter

    cls = adapter.worker_class()
    worker = cls.__new__(cls)  # the attributes NGRAMWorker.__init__ sets that drafting reads
    worker.enable_overlap = overlap
    worker.draft_token_num = N
    worker.max_trie_depth = TRIE_DEPTH
    drafter = adapter.make_drafter({"strategy": "tree", "cost_model": "gpu"})
    worker.ngram_corpus = adapter.SpecdraftCorpus(drafter, N)
    return worker, drafter


def verify(tokens, mask, seq_len, truth):
    """SGLang's greedy tree verification of one request against the recorded continuation."""
    import torch
    from sglang.kernels.ops.speculative.reconstruct_tree import (
        reconstruct_indices_from_tree_mask_triton)
    from sglang.kernels.ops.speculative.spec_tree import verify_tree_greedy_triton

    m = mask.reshape(N, N)
    positions = torch.empty(N, dtype=torch.int64)
    ri, nt, ns = (torch.empty(1, N, dtype=torch.int64) for _ in range(3))
    reconstruct_indices_from_tree_mask_triton(torch.from_numpy(mask).to(torch.bool),
                                              torch.tensor([seq_len]), positions, ri, nt, ns, 1, N)
    target = torch.full((1, N), -1, dtype=torch.int64)  # off the recorded path: no match
    for i in range(N):
        if not m[i, 0]:
            continue  # padding: its own root, unreachable
        path = [int(tokens[a]) for a in range(1, i + 1) if m[i, a]]
        if path == truth[:len(path)] and len(path) < len(truth):
            target[0, i] = truth[len(path)]
    predicts = torch.zeros(N, dtype=torch.int32)
    accept_index = torch.full((1, N), -1, dtype=torch.int32)
    accept_num = torch.empty(1, dtype=torch.int32)
    verify_tree_greedy_triton(predicts, accept_index, accept_num,
                              torch.from_numpy(tokens).view(1, N), ri, nt, ns, target)
    drafted = int(m[1:, 0].sum())
    return int(accept_num.item()), drafted


def run_request(worker, rid, prompt, output, limit, overlap):
    """One request through the adapter; counts as ``replay_request`` reports them."""
    from sglang.srt.managers.schedule_batch import FINISH_LENGTH

    import torch

    req = Req(rid, prompt)
    # prefill: one pass, no draft; under overlap its token reaches output_ids one step late
    relay = None
    if overlap:
        relay = Relay(torch.tensor(output[:1] + [0] * (N - 1)), torch.tensor([1]))
        relay.pending = output[:1]
    else:
        req.output_ids.append(output[0])
    passes, drafted_total, accepted_total, pos = 1, 0, 0, 1
    while pos < limit:
        tokens, mask = worker._prepare_draft_tokens(Batch([req], relay))
        if relay is not None:  # the scheduler appends last step's tokens after the relay
            req.output_ids.extend(relay.pending)
        acc, drafted = verify(tokens, mask, len(prompt) + pos, output[pos:])
        acc = min(acc, len(output) - pos - 1)  # the last recorded token is the target's own
        emitted = output[pos:pos + acc + 1]
        passes, drafted_total, accepted_total = passes + 1, drafted_total + drafted, accepted_total + acc
        pos += len(emitted)
        if overlap:
            padded = emitted + [0] * (N - len(emitted))
            relay = Relay(torch.tensor(padded), torch.tensor([len(emitted)]))
            relay.pending = emitted
        else:
            req.output_ids.extend(emitted)
    if relay is not None:
        req.output_ids.extend(relay.pending)
    req.finished_reason = FINISH_LENGTH(length=len(req.output_ids))
    worker.ngram_corpus.erase_match_state([rid])  # it left the decode batch
    return {"target_passes": passes, "drafted_tokens": drafted_total,
            "accepted_tokens": accepted_total}


# CI time (the Triton interpreter is slow): sync scheduling on every workload but math (its
# three long requests), overlap scheduling on the first 10 requests; each in trace order.
@pytest.mark.parametrize("overlap", [False, True], ids=["sync", "overlap"])
def test_trace_replay_through_the_adapter_matches_specdraft_replay(sglang_cpu, overlap):
    records = load_trace(TRACE)
    records = records[:10] if overlap else [r for r in records if r["workload"] != "math"]
    method = METHODS["specdraft-tree"](cost_model="gpu")
    worker, drafter = make_worker(overlap)
    totals = {"ours": [0, 0, 0], "replay": [0, 0, 0]}
    for i, rec in enumerate(records):
        limit = min(rec.get("max_tokens") or len(rec["output_token_ids"]),
                    len(rec["output_token_ids"]))
        want = replay_request(method, rec["prompt_token_ids"], rec["output_token_ids"], N - 1,
                              rec.get("max_tokens"))
        got = run_request(worker, f"req-{i}", rec["prompt_token_ids"], rec["output_token_ids"],
                          limit, overlap)
        assert got == {k: want[k] for k in got}, (rec["id"], got, want)
        for name, r in (("ours", got), ("replay", want)):
            totals[name] = [a + r[k] for a, k in zip(totals[name], got)]
    assert totals["ours"] == totals["replay"]
    assert totals["ours"][2] > 100  # the trace has real acceptance to compare
    # the last request is finished when the next decode step settles departures
    worker.ngram_corpus.batch_get([], [], [])
    assert drafter.counters.finished == len(records) and drafter.counters.aborted == 0
    assert drafter.counters.drafted_tokens == totals["ours"][1]
