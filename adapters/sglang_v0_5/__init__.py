"""Everything specdraft knows about SGLang 0.5.x, in one place (checked against 0.5.23).

SGLang facts this module relies on:

* Plugins: every SGLang process runs the ``sglang.srt.plugins`` entry points
  (``sglang.srt.plugins.load_plugins``); an exception there is logged and swallowed, so errors
  that must stop start-up are raised from the algorithm's server-argument hooks instead.
* ``SpeculativeAlgorithm.register(NAME, supports_overlap=..., validate_server_args=...,
  spec_class=...)`` (``srt/speculative/spec_info.py`` -> ``spec_registry.py``) registers a
  ``CustomSpecAlgo``. In 0.5.23 that class lacks ``create_future_map``,
  ``carries_draft_hidden_states``, ``need_topk`` and ``get_platform_worker_cls``, which the
  scheduler calls on the algorithm object, and its ``is_*``/``supports_*``/``has_draft_kv``
  answers are those of no built-in algorithm. The scheduler, the overlap future map, the CUDA
  graph runner and the KV sizing branch on ``is_ngram()``; answering every such question as
  ``SpeculativeAlgorithm.NGRAM`` does gives this algorithm NGRAM's schedule: tree verification
  in one target pass with a custom mask, greedy tree walk or tree rejection sampling, and the
  accepted path compacted in the paged KV cache (``move_accept_tokens_to_target_kvcache``).
* ``handle_speculative_decoding`` runs a custom algorithm's ``validate_server_args`` and then its
  ``handle_server_args`` on a stand-in that records field writes (``record_foreign_defaults``).
  NGRAM's own hook, ``_handle_ngram``, sets max_running_requests (48), mixed chunk off,
  ``speculative_eagle_topk`` (= ``speculative_ngram_max_bfs_breadth``), the default of 12 draft
  tokens, ``speculative_num_steps``, and overlap off on CPU; called with the stand-in, its
  declarations land on the record being resolved.
* ``NGRAMWorker`` (``srt/speculative/ngram_worker.py``) builds its corpus as
  ``NgramCorpus(min_bfs_breadth=..., max_bfs_breadth=..., match_type=..., capacity=...,
  max_trie_depth=..., draft_token_num=N, ...)`` in ``__init__`` and per decode step calls
  ``synchronize()``, then ``batch_get(req_ids, tails, total_lens)`` from
  ``_prepare_draft_tokens(batch)``: ``tails[i]`` are the last ``max_trie_depth`` tokens of
  request i (prompt + output + the tokens accepted last step under overlap scheduling),
  ``total_lens[i]`` its full length. The answer is ``(tokens[bs*N], mask[bs*N*N])``: per
  request N nodes, node 0 the last context token, ``mask[i, j]`` true when node j is node i or
  one of its ancestors. Positions, retrieve indices and sibling links are derived from the mask
  (``reconstruct_indices_from_tree_mask``: parent = the largest ancestor index). After the
  verify pass it calls ``batch_put(tails)`` and ``erase_match_state(rids)`` for the requests
  that left the decode batch (finished, aborted or retracted; ``req.finished()`` may flip one
  iteration later under overlap scheduling). ``clear_cache_pool`` calls ``reset()``;
  the external-corpus endpoints call ``load_external_corpus_named``,
  ``commit_external_corpus_load``, ``remove_external_corpus`` and ``list_external_corpora``.
* ``Req``: ``rid``, ``origin_input_ids_unpadded`` (the prompt), ``output_ids`` (kept across
  retraction), ``finished()``, ``finished_reason`` (``FINISH_ABORT`` for aborts), and
  ``cache_salt`` (the request's ``cache_salt`` field, SGLang's per-request key for isolating
  its prefix cache: specdraft's tenant scope; None or "" without one).

The facts are kept by job, one module each; this package gives them all under one name (the
module ``specdraft.adapters`` resolves for an SGLang 0.5 release):

* ``options``: the supported range, the algorithm's name, the options variable and the
  server-argument checks;
* ``corpus``: ``SpecdraftCorpus`` (SGLang's NGRAM corpus interface, one ``SpecDrafter.step`` a
  batch) and ``pack_tree`` (a draft tree in NGRAM's verification layout);
* ``register``: the worker and the ``CustomSpecAlgo`` subclass SGLang dispatches on, and their
  registration.
"""

from __future__ import annotations

from specdraft.adapters.sglang_v0_5.corpus import SpecdraftCorpus, pack_tree, request_scope
from specdraft.adapters.sglang_v0_5.options import (
    ALGORITHM,
    DEFAULT_NUM_DRAFT_TOKENS,
    OPTIONS_ENV,
    SUPPORTED,
    check_server_args,
    load_options,
    logger,
    tree_breadth,
)
from specdraft.adapters.sglang_v0_5.register import (
    make_drafter,
    missing_methods,
    register,
    spec_class,
    validate_server_args_fn,
    worker_class,
)

__all__ = [
    "ALGORITHM", "DEFAULT_NUM_DRAFT_TOKENS", "OPTIONS_ENV", "SUPPORTED", "SpecdraftCorpus",
    "check_server_args", "load_options", "logger", "make_drafter", "missing_methods",
    "pack_tree", "register", "request_scope", "spec_class", "tree_breadth",
    "validate_server_args_fn", "worker_class",
]
