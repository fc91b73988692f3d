"""The algorithm SGLang sees: the worker drafting with specdraft, the ``CustomSpecAlgo``
subclass SGLang dispatches on, and their registration (facts: the package's docstring)."""

from __future__ import annotations

import functools
import threading
from typing import Any

from specdraft.adapters.sglang_v0_5.corpus import SpecdraftCorpus
from specdraft.adapters.sglang_v0_5.options import ALGORITHM, check_server_args, load_options, logger, tree_breadth


def make_drafter(options: dict, vocab_size: int | None = None, tokenizer: Any = None):
    from specdraft.proposers import make_drafter as _make

    return _make(options, tokenizer=tokenizer, vocab_size=vocab_size)


@functools.lru_cache(maxsize=None)
def worker_class() -> type:
    """``NGRAMWorker`` drafting with specdraft (imports SGLang's GPU modules: call in workers)."""
    from sglang.srt.speculative import ngram_worker

    class SpecdraftWorker(ngram_worker.NGRAMWorker):
        def __init__(self, server_args, gpu_id, nccl_port, target_worker):
            options = load_options()
            model_config = target_worker.model_runner.model_config
            drafter = make_drafter(options, vocab_size=getattr(model_config, "vocab_size", None),
                                   tokenizer=getattr(target_worker, "tokenizer", None))

            def corpus(*, draft_token_num: int, **_ngram_settings) -> SpecdraftCorpus:
                return SpecdraftCorpus(drafter, draft_token_num)

            # NGRAMWorker.__init__ builds its corpus from the module-level name NgramCorpus
            # (a JIT-compiled C++ trie); build ours there instead, for this call only.
            with _CORPUS_SWAP:
                original = ngram_worker.NgramCorpus
                ngram_worker.NgramCorpus = corpus
                try:
                    super().__init__(server_args, gpu_id, nccl_port, target_worker)
                finally:
                    ngram_worker.NgramCorpus = original
            self.specdraft_drafter = drafter
            logger.info("specdraft: %s drafting %d-node trees (options: %s)", ALGORITHM,
                        self.draft_token_num, options or "defaults")

        def _prepare_draft_tokens(self, batch):
            self.ngram_corpus.bind_requests(batch.reqs)
            return super()._prepare_draft_tokens(batch)

    return SpecdraftWorker


_CORPUS_SWAP = threading.Lock()


def _ngram():
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    return SpeculativeAlgorithm.NGRAM


def missing_methods() -> list[str]:
    """Methods ``SpeculativeAlgorithm`` has that SGLang's ``CustomSpecAlgo`` lacks."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_registry import CustomSpecAlgo

    return sorted(name for name, v in vars(SpeculativeAlgorithm).items()
                  if callable(v) and not name.startswith("_") and not hasattr(CustomSpecAlgo, name)
                  and name not in ("from_string", "register"))


# Questions the scheduler asks an algorithm, answered as NGRAM answers them.
_AS_NGRAM_PREFIXES = ("is_", "supports_", "has_", "need_", "carries_")


def spec_class(version_error: str | None = None) -> type:
    """The ``CustomSpecAlgo`` subclass SGLang dispatches on (``version_error``: refuse to start)."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_registry import CustomSpecAlgo

    def as_ngram(name: str):
        def method(self, *args, **kwargs):
            return getattr(_ngram(), name)(*args, **kwargs)
        method.__name__ = name
        method.__doc__ = f"As SpeculativeAlgorithm.NGRAM.{name}()."
        return method

    namespace: dict[str, Any] = {
        name: as_ngram(name) for name, v in vars(SpeculativeAlgorithm).items()
        if callable(v) and name.startswith(_AS_NGRAM_PREFIXES)}

    def create_future_map(self, device, req_to_token_pool, needs_cpu_seq_lens=True,
                          needs_confidence_relay=False):
        from sglang.srt.managers.overlap_utils import FutureMap

        return FutureMap(device, self, req_to_token_pool, needs_cpu_seq_lens,
                         needs_confidence_relay)

    def get_platform_worker_cls(self):
        return None  # out-of-tree platforms replace built-in workers, not plugin ones

    def handle_server_args(self, server_args):
        if version_error:
            raise RuntimeError(version_error)
        # NGRAM's hook, with the tree breadth of specdraft's drafts as SGLang's topk
        server_args.speculative_ngram_max_bfs_breadth = tree_breadth(load_options())
        from sglang.srt.arg_groups.speculative_hook import _handle_ngram

        _handle_ngram(server_args)

    def create_worker(self, server_args):
        if version_error:
            raise RuntimeError(version_error)
        return CustomSpecAlgo.create_worker(self, server_args)

    namespace.update(create_future_map=create_future_map,
                     get_platform_worker_cls=get_platform_worker_cls,
                     handle_server_args=handle_server_args, create_worker=create_worker,
                     __doc__="specdraft drafts verified by SGLang's NGRAM tree verification.")
    cls = type("SpecdraftAlgorithm", (CustomSpecAlgo,), namespace)
    still_missing = [m for m in missing_methods() if not hasattr(cls, m)]
    if still_missing:
        raise RuntimeError(f"specdraft's SGLang adapter does not define {still_missing}")
    return cls


def validate_server_args_fn(version_error: str | None = None):
    def validate_server_args(server_args) -> None:
        if version_error:
            raise RuntimeError(version_error)
        check_server_args(server_args)
    return validate_server_args


def register(version_error: str | None = None) -> str:
    """Register ``SPECDRAFT`` with SGLang (idempotent); returns what happened."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.speculative.spec_registry import get_spec

    if get_spec(ALGORITHM) is not None:
        return "already registered"

    def factory(server_args) -> type:
        return worker_class()

    SpeculativeAlgorithm.register(
        ALGORITHM, supports_overlap=True,
        validate_server_args=validate_server_args_fn(version_error),
        spec_class=spec_class(version_error))(factory)
    return "registered"
