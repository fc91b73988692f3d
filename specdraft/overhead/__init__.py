"""``specdraft overhead``: proposer cost per request-step, each method driven the way vLLM drives it.

Every method is called through the object vLLM's model runner calls, with the arguments it passes
(vLLM internals are reached only through specdraft's version adapter):

  specdraft  ``SuffixProposer.propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)``,
             preceded by the runner hooks' events (step begin with the requests that ended, the
             bound StepView over the runner's batch): the whole path a user pays, one native call
             per step inside. Its native-core-only time (inside that call) is reported beside it,
             so the Python share is visible.
  arctic     vLLM 0.32's ``SuffixDecodingProposer.propose(k, input_batch, sampled_token_ids)``
             (arctic-inference's C++ suffix tree), built by its own ``__init__``; max_tree_depth
             24, vLLM's defaults max_spec_factor 1.0 and min_token_prob 0.1.
  ngram      vLLM's ``NgramProposer.propose(k, sampled_token_ids, num_tokens_no_spec,
             token_ids_cpu)`` (numba batch path), built by its own ``__init__`` (JIT warm-up),
             prompt_lookup_min/max 2/5.

The runner's own work (writing the sampled tokens into its token buffer, building the scheduler
output) is done for every method outside the timed call.

Workload (all methods see the same token streams):

* Token streams come from a seeded generator (``StreamGen``): a Zipf(1.1) unigram over the
  vocabulary mixed with a sparse first-order Markov chain (each token has 8 likely successors,
  Zipf-weighted), interrupted by copied spans: from a pool of shared "documents" (boilerplate,
  templates: repeats *across* requests, what a global cache can exploit) and from the request's
  own prompt and output so far (repeats *within* a request: quoting, code edits). Span lengths are
  geometric (mean ~24 tokens). Drafts therefore hit sometimes, not always.
* The global caches are pre-filled before timing with earlier synthetic requests whose outputs
  total ``--global-cache-tokens`` (specdraft: start/extend/finish; arctic: start_request /
  add_active_response / stop_request with max_cached_requests sized to the same token budget).
* The measured batch: each size in ``--batches`` is one run, with that many requests of
  ``--prompt-tokens`` prompts and pre-generated ground-truth outputs of ``--output-tokens``.
  Each step, every live request appends what a verifier would have emitted after the method's
  previous draft: the longest draft prefix that matches the ground truth, plus one token (so each
  method advances at its own acceptance rate over the same streams; the report includes tokens
  per step). A request that ends is reported to specdraft with the next step's events (vLLM's
  ``finished_req_ids``), so feeding it to the global cache is inside the timed step; for arctic
  the request leaves the runner's batch and the next ``propose`` stops it in the suffix cache
  (vLLM 0.32 stops "requests that were not seen in the input batch" there), inside the timed step
  too.
* Methods alternate in blocks of ``--block-steps`` steps (A B C A B C ...); each block's time
  divided by its request-steps is one sample. On a shared machine single timings swing widely:
  the report gives each method's fastest block and median block, and specdraft's ratios to the
  peers as the ratio of fastest blocks and the median of interleaved block ratios; the table adds
  each method's whole-run mean (all timed steps, those that start and finish requests included),
  per request-step and per output token, since the fastest blocks come after the first step
  (which indexes every prompt) and before requests finish. The JSON gives the first step's share
  of the whole run and that of the steps right after a request ended (``first_step_share``,
  ``after_end_share``).

Usage: ``specdraft overhead --json FILE`` (or ``python -m specdraft.overhead``).

The parts, one module each (this package gives their names under ``specdraft.overhead``):
``streams`` (``StreamGen``), ``methods`` (the timed methods), ``driver`` (the streams and one
interleaved run per batch size), ``table`` (the Markdown table) and ``command`` (the command line).
"""

from __future__ import annotations

from specdraft.overhead.command import DEFAULTS, build_parser, main
from specdraft.overhead.driver import generate, log, run_batch
from specdraft.overhead.methods import (
    METHODS,
    TimedArctic,
    TimedMethod,
    TimedNgram,
    TimedSpecdraft,
    accepted_len,
)
from specdraft.overhead.streams import StreamGen
from specdraft.overhead.table import format_overhead_table

__all__ = [
    "StreamGen", "accepted_len", "TimedMethod", "TimedSpecdraft", "TimedArctic", "TimedNgram",
    "METHODS", "log", "generate", "run_batch", "DEFAULTS", "build_parser", "main",
    "format_overhead_table",
]
