"""The SPECDRAFT worker built by SGLang's own code, and one draft step of its NGRAM verify prep.

SGLang resolves the server arguments and publishes its runtime context (as a scheduler process
does), the registered algorithm creates the worker class, and ``NGRAMWorker.__init__`` /
``alloc_memory_pool`` / ``_prepare_for_speculative_decoding`` run for real on CPU torch.
Stand-ins: the target worker (no model runs here: it only hands over its config and memory
pools), the ``Req``/batch fields the step reads, and the device dispatch of two kernels, which
has no branch for a machine without an accelerator: they run SGLang's own Triton kernels (the
XPU/CUDA branches) in Triton's CPU interpreter.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

N = 6


class Req:
    def __init__(self, rid, prompt, output):
        self.rid, self.origin_input_ids_unpadded, self.output_ids = rid, list(prompt), list(output)
        self.finished_reason = None

    def finished(self):
        return self.finished_reason is not None


@pytest.fixture(scope="module")
def worker(sglang_cpu, model_dir):
    from sglang.srt.runtime_context import SpawnRanks, publish
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.speculative import ngram_worker
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    args = prepare_server_args(["--model-path", model_dir, "--device", "cpu",
                                "--speculative-algorithm", "SPECDRAFT",
                                "--speculative-num-draft-tokens", str(N)])
    args.resolve_once()
    publish(args, role="scheduler", ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0))
    algo = SpeculativeAlgorithm.from_string(args.speculative_algorithm)
    cls = algo.create_worker(args)
    assert issubclass(cls, ngram_worker.NGRAMWorker)
    pools = SimpleNamespace(req_to_token=None)
    target = SimpleNamespace(
        model_runner=SimpleNamespace(model_config=SimpleNamespace(vocab_size=49152),
                                     max_running_requests=4),
        tokenizer=None, get_memory_pool=lambda: (pools, None))
    w = cls(server_args=args, gpu_id=0, nccl_port=0, target_worker=target)
    w.alloc_memory_pool()
    w._pools = pools
    yield w
    from sglang.srt.runtime_context import reset_context

    reset_context()


def test_sglang_builds_the_worker_with_a_specdraft_corpus(worker):
    from sglang.srt.speculative import ngram_worker
    from sglang.srt.speculative.cpp_ngram.ngram_corpus import NgramCorpus

    from specdraft.adapters.sglang_v0_5 import SpecdraftCorpus

    assert isinstance(worker.ngram_corpus, SpecdraftCorpus)
    assert ngram_worker.NgramCorpus is NgramCorpus  # SGLang's own corpus class is put back
    assert worker.draft_token_num == worker.ngram_corpus.draft_token_num == N
    assert worker.enable_overlap is False  # resolved for CPU by NGRAM's hook
    assert worker.draft_tokens.shape == (4 * N,)


def test_one_decode_step_of_verify_prep(worker, monkeypatch):
    import torch
    from sglang.kernels.ops.speculative import reconstruct_tree
    from sglang.kernels.ops.speculative.cache_locs import assign_extend_cache_locs
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative import ngram_worker
    from sglang.srt.speculative.ngram_info import NgramVerifyInput
    from sglang.srt.utils import next_power_of_2

    def assign_extend_cache_locs_func(req_pool_indices, req_to_token, start_offset, end_offset,
                                      batch_size, draft_token_num, device):
        out = torch.empty(batch_size * draft_token_num, dtype=torch.int64, device=device)
        assign_extend_cache_locs[(batch_size,)](req_pool_indices, req_to_token, start_offset,
                                                end_offset, out, req_to_token.shape[1],
                                                next_power_of_2(batch_size))
        return out

    monkeypatch.setattr(reconstruct_tree, "reconstruct_indices_from_tree_mask",
                        reconstruct_tree.reconstruct_indices_from_tree_mask_triton)
    monkeypatch.setattr(ngram_worker, "assign_extend_cache_locs_func",
                        assign_extend_cache_locs_func)

    story = [5, 6, 7, 8, 9, 10, 11]
    reqs = [Req("r0", story * 3 + [5, 6], [7]), Req("r1", [1, 2, 3, 4], [99])]
    seq_lens = [len(r.origin_input_ids_unpadded) + len(r.output_ids) - 1 for r in reqs]
    req_to_token = torch.arange(4 * 64, dtype=torch.int32).view(4, 64) + 1000
    worker._pools.req_to_token = req_to_token
    batch = SimpleNamespace(
        reqs=reqs, forward_mode=ForwardMode.DECODE, seq_lens=torch.tensor(seq_lens),
        seq_lens_cpu=torch.tensor(seq_lens), req_pool_indices=torch.tensor([2, 0]),
        req_to_token_pool=worker._pools, has_grammar=False, spec_info=None,
        grammar_needs_sync=lambda: False)
    worker._prepare_for_speculative_decoding(batch)

    info = batch.spec_info
    assert isinstance(info, NgramVerifyInput) and batch.forward_mode == ForwardMode.TARGET_VERIFY
    drafts = batch.input_ids.view(2, N).tolist()
    assert drafts[0][:4] == [7, 8, 9, 10]  # last token, then the prompt's continuation
    assert drafts[1][0] == 99
    positions = info.positions.view(2, N).tolist()
    assert positions[0][:4] == [seq_lens[0] + d for d in range(4)]
    assert info.retrieve_next_token[0, :3].tolist() == [1, 2, 3]
    assert info.retrieve_index.tolist() == [list(range(N)), list(range(N, 2 * N))]
    # KV slots of the verify tokens: each request's next N entries of its req_to_token row
    assert batch.out_cache_loc.tolist() == (
        req_to_token[2, seq_lens[0]:seq_lens[0] + N].tolist()
        + req_to_token[0, seq_lens[1]:seq_lens[1] + N].tolist())
    # the full custom mask: every verify token sees the whole prefix, then its tree row
    assert info.custom_mask.numel() == sum(N * (s + N) for s in seq_lens)
    row0 = info.custom_mask[: seq_lens[0] + N].tolist()
    assert row0 == [True] * (seq_lens[0] + 1) + [False] * (N - 1)
