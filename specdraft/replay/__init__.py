"""``specdraft replay``: exact acceptance of every drafting method on recorded greedy traces.

No model runs. A trace records, per request in arrival order, the prompt and the target's greedy
output. Under greedy verification a draft's fate is fully determined by that output: at each step
the method drafts from the context so far, the accepted length is the longest prefix of the draft
(for a tree, the longest root path) that matches the recorded continuation, and the target adds
one token of its own. So the number of target passes, drafted and accepted tokens are exactly
what the engine would see, and a cost model turns them into an estimated speedup.

The step sequence mirrors vLLM: prefill emits the first output token without a draft; from then
on every pass verifies the draft proposed after the previous pass. Each workload is replayed on
its own (a fresh method per workload and batch size), with up to B requests in flight
(``replay_batched``): the methods see requests start and end in trace order, and specdraft's
adaptive controller sizes drafts for the whole batch under the chosen cost model (by default the
GPU preset for the trace's model size; ``--cost-model medium`` for an 8B shape).

Counters (names as vLLM uses them):

- tokens per pass: output tokens / target passes (prefill passes included), what sets the
  speedup when verification is cheap;
- mean acceptance length (MAL): 1 + accepted / drafts, vLLM's definition (a step without a
  draft does not count);
- drafted per accepted: draft tokens sent per draft token accepted (waste);
- est. speedup at batch B: cost of the same schedule without drafts / cost with drafts, each
  pass priced by the cost model for its batch (requests, contexts, tokens scored);
- drafted per step at batch B: draft tokens per decode row per pass (what the controller chose).

Methods: every specdraft strategy (adaptive and fixed-length), vLLM's own ``ngram`` proposer
function and arctic-inference's own ``SuffixDecodingCache`` (imported from their packages),
vLLM 0.34's GPU ``suffix`` rule (``vllm034-suffix``, re-implemented), and Hugging Face's
prompt-lookup candidate generator (imported from transformers).

Fixed width (``fixed_width=True``, ``--fixed-width``): every decoding row is verified as wide as
the budget, short chains padded with the request's last token, as vLLM 0.34 verifies without
adaptive verification.

The parts, one module each (this package gives their names under ``specdraft.replay``):

- ``traces``: loading and checking trace files (``load_trace``);
- ``methods``: the drafting methods a replay drives (``METHODS``);
- ``batched``: one request alone and up to B in flight (``replay_request``, ``replay_batched``),
  and the no-draft baseline;
- ``engine``: requests sent at once to a live engine, as vLLM schedules them (``replay_engine``);
- ``pricing``: passes priced with measured H200 pass times (``pricing.h200``);
- ``sweep``: every method per workload and batch size (``replay``);
- ``tables`` and ``plot``: the results as text, Markdown and a chart;
- ``command``: the ``specdraft replay`` command line (``main``).
"""

from __future__ import annotations

from specdraft.replay.batched import (
    accepted_length,
    baseline_cost,
    batch_queue,
    fixed_width_draft,
    output_limit,
    replay_batched,
    replay_request,
)
from specdraft.replay.command import load_cost_model, main
from specdraft.replay.engine import EngineSchedule, _cached_prefix, replay_engine
from specdraft.replay.methods import (
    DEFAULT_METHODS,
    METHODS,
    ArcticSuffixMethod,
    HFPromptLookupMethod,
    Method,
    NoDraftMethod,
    OracleMethod,
    SpecdraftMethod,
    SpecdraftRecycleMethod,
    Vllm034SuffixMethod,
    VllmNgramMethod,
)
from specdraft.replay.plot import plot_replay
from specdraft.replay.sweep import default_cost_model, replay
from specdraft.replay.tables import format_replay_table, markdown_table, summary_table
from specdraft.replay.traces import TRACE_FIELDS, load_trace

__all__ = [
    "TRACE_FIELDS", "load_trace",
    "Method", "NoDraftMethod", "SpecdraftMethod", "SpecdraftRecycleMethod", "OracleMethod",
    "VllmNgramMethod", "ArcticSuffixMethod", "Vllm034SuffixMethod", "HFPromptLookupMethod", "METHODS",
    "DEFAULT_METHODS",
    "accepted_length", "replay_request", "output_limit", "batch_queue", "replay_batched",
    "fixed_width_draft",
    "baseline_cost",
    "EngineSchedule", "replay_engine",
    "default_cost_model", "replay",
    "format_replay_table", "markdown_table", "summary_table", "plot_replay",
    "load_cost_model", "main",
]
