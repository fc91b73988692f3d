"""``specdraft replay``: exact acceptance of every drafting method on recorded greedy traces.

No model runs. A trace records, per request in arrival order, the prompt and the target's greedy
output. Under greedy verification a draft's fate is fully determined by that output: at each step
the method drafts from the context so far, the accepted length is the longest prefix of the draft
(for a tree, the longest root path) that matches the recorded continuation, and the target adds
one token of its own. So the number of target passes, drafted and accepted tokens are exactly
what the engine would see, and a cost curve turns them into an estimated speedup.

The step sequence mirrors vLLM: prefill emits the first output token without a draft; from then
on every pass verifies the draft proposed after the previous pass. Global caches see requests in
trace order (each request finishes before the next starts, as in a batch-1 run).

Methods: every specdraft strategy (adaptive and fixed-length), vLLM's own ``ngram`` proposer
function and arctic-inference's own ``SuffixDecodingCache`` (imported from their packages), and
Hugging Face's prompt-lookup candidate generator (imported from transformers).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Iterable

from specdraft.jsonl import located, read_jsonl, token_ids
from specdraft.proposers.controller import CURVES, CostModel

TRACE_FIELDS = {"id": str, "prompt_token_ids": list, "output_token_ids": list}


# ----------------------------------------------------------------------------- traces
def _trace_vocab_size(rec: dict) -> int | None:
    """The vocabulary size in a recorded ``tokenizer`` stamp ("NAME:VOCAB:HASH"), if any."""
    parts = str(rec.get("tokenizer", "")).split(":")
    return int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else None


def _check_trace_record(rec) -> dict:
    if not isinstance(rec, dict):
        raise ValueError("expected a JSON object per line")
    for field, typ in TRACE_FIELDS.items():
        if field not in rec:
            raise ValueError(f"missing field {field!r}")
        if not isinstance(rec[field], typ):
            raise ValueError(f"field {field!r} must be a {typ.__name__}")
    vocab_size = _trace_vocab_size(rec)
    for field in ("prompt_token_ids", "output_token_ids"):
        token_ids(rec[field], field, vocab_size)
    if not rec["output_token_ids"]:
        raise ValueError("field 'output_token_ids' is empty")
    max_tokens = rec.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool)
                                   or max_tokens < 1):
        raise ValueError(f"field 'max_tokens' must be an integer >= 1, got {json.dumps(max_tokens)}")
    rec.setdefault("workload", "default")
    rec.setdefault("session", None)
    return rec


def load_trace(path: str) -> list[dict]:
    """Records of a trace file; a bad line raises ValueError naming the file and line."""
    out = []
    for lineno, rec in read_jsonl(path):
        try:
            out.append(_check_trace_record(rec))
        except ValueError as e:
            raise located(path, lineno, e) from None
    if not out:
        raise ValueError(f"{path}: no records")
    return out


# ---------------------------------------------------------------------------- methods
class Method:
    """One drafting method driven through a trace (batch of one)."""
    name = "method"

    def start(self, prompt: list[int]) -> None: ...
    def extend(self, tokens: list[int], num_accepted: int | None) -> None: ...
    def draft(self, max_k: int) -> tuple[list[int], list[int]]:
        """(token_ids, parents) of the draft; a chain has parents i-1."""
        raise NotImplementedError
    def finish(self) -> None: ...


class SpecdraftMethod(Method):
    def __init__(self, name: str, options: dict, chain_only: bool = False):
        from specdraft.proposers import make_drafter
        self.name = name
        self.drafter = make_drafter(options, chain_only=chain_only)
        self._n = 0

    def start(self, prompt):
        self._n += 1
        self.drafter.start(self._n, prompt)

    def extend(self, tokens, num_accepted):
        self.drafter.extend(self._n, tokens, num_accepted)

    def draft(self, max_k):
        t = self.drafter.draft_batch([self._n], max_k)[0]
        return t.token_ids, t.parents

    def finish(self):
        self.drafter.finish(self._n)


class VllmNgramMethod(Method):
    """vLLM's ``ngram`` proposer: its own numba function, as its NgramProposer calls it.

    n-gram sizes 2..5, as `specdraft bench` configures it live (vLLM defaults to 5..5 when neither
    is given).
    """

    def __init__(self, name: str, prompt_lookup_min: int = 2, prompt_lookup_max: int = 5,
                 max_model_len: int = 1 << 30):
        import numpy as np

        from specdraft.adapters import vllm_adapter
        self.name = name
        self._np = np
        self._fn = vllm_adapter().ngram_match_function()
        self.min_n, self.max_n, self.max_model_len = prompt_lookup_min, prompt_lookup_max, max_model_len
        self._buf = np.zeros(1024, dtype=np.int32)
        self._len = 0

    def start(self, prompt):
        self._len = 0
        self._append(prompt)

    def _append(self, tokens):
        np = self._np
        need = self._len + len(tokens)
        if need > len(self._buf):
            buf = np.zeros(max(need, 2 * len(self._buf)), dtype=np.int32)
            buf[: self._len] = self._buf[: self._len]
            self._buf = buf
        self._buf[self._len:need] = tokens
        self._len = need

    def extend(self, tokens, num_accepted):
        self._append(tokens)

    def draft(self, max_k):
        d = self._fn(self._buf[: self._len], self.min_n, self.max_n, self.max_model_len, max_k)
        toks = [int(t) for t in d]
        return toks, list(range(-1, len(toks) - 1))


class ArcticSuffixMethod(Method):
    """arctic-inference's SuffixDecodingCache, driven the way vLLM's ``suffix`` method drives it."""

    def __init__(self, name: str, max_tree_depth: int = 24, max_cached_requests: int = 10000,
                 max_spec_factor: float = 1.0, min_token_prob: float = 0.1):
        import numpy as np
        from arctic_inference.suffix_decoding import SuffixDecodingCache
        self.name = name
        self._np = np
        self.cache = SuffixDecodingCache(max_tree_depth=max_tree_depth,
                                         max_cached_requests=max_cached_requests)
        self.depth, self.factor, self.min_prob = max_tree_depth, max_spec_factor, min_token_prob
        self._n = 0
        self._tokens: list[int] = []
        self._prompt: list[int] | None = None

    def start(self, prompt):
        self._n += 1
        self._tokens = list(prompt)
        self._prompt = list(prompt)

    def extend(self, tokens, num_accepted):
        rid = str(self._n)
        if self._prompt is not None:  # vLLM starts the request when the first token is sampled
            self.cache.start_request(rid, self._np.asarray(self._prompt, dtype=self._np.int32))
            self._prompt = None
        self.cache.add_active_response(rid, list(tokens))
        self._tokens.extend(tokens)

    def draft(self, max_k):
        pattern = self._np.asarray(self._tokens[-self.depth:], dtype=self._np.int32)
        d = self.cache.speculate(str(self._n), pattern, max_spec_tokens=max_k,
                                 max_spec_factor=self.factor, min_token_prob=self.min_prob)
        return list(d.token_ids), list(d.parents)

    def finish(self):
        self.cache.stop_request(str(self._n))


class HFPromptLookupMethod(Method):
    """Hugging Face's prompt lookup decoding (transformers' PromptLookupCandidateGenerator)."""

    def __init__(self, name: str, max_matching_ngram_size: int = 2):
        import torch
        from transformers.generation.candidate_generator import PromptLookupCandidateGenerator
        self.name = name
        self._torch = torch
        self._cls = PromptLookupCandidateGenerator
        self.ngram = max_matching_ngram_size
        self._tokens: list[int] = []

    def start(self, prompt):
        self._tokens = list(prompt)

    def extend(self, tokens, num_accepted):
        self._tokens.extend(tokens)

    def draft(self, max_k):
        if max_k <= 0:
            return [], []
        gen = self._cls(num_output_tokens=max_k, max_matching_ngram_size=self.ngram,
                        max_length=len(self._tokens) + max_k + 1)
        ids = self._torch.tensor([self._tokens], dtype=self._torch.long)
        cand, _ = gen.get_candidates(ids)
        toks = cand[0, len(self._tokens):].tolist()
        return toks, list(range(-1, len(toks) - 1))


def _specdraft(name: str, chain_only: bool = False, **options):
    def make(cost_model=None, overrides: dict | None = None):
        opts = {**options, **(overrides or {})}
        if cost_model is not None:
            opts["cost_model"] = cost_model
        return SpecdraftMethod(name, opts, chain_only=chain_only)
    make.adaptive = options.get("adaptive", True)  # its controller needs the cost curve
    make.specdraft = True  # takes option overrides (--specdraft-options)
    return make


METHODS = {
    "specdraft-suffix": _specdraft("specdraft-suffix", strategy="suffix"),
    "specdraft-suffix-fixed": _specdraft("specdraft-suffix-fixed", strategy="suffix", adaptive=False),
    "specdraft-tree": _specdraft("specdraft-tree", strategy="tree"),
    "specdraft-tree-fixed": _specdraft("specdraft-tree-fixed", strategy="tree", adaptive=False),
    # the tree reduced to its best path, as specdraft runs in chain-verifying engines (vLLM)
    "specdraft-tree-path": _specdraft("specdraft-tree-path", chain_only=True, strategy="tree"),
    "specdraft-lookup": _specdraft("specdraft-lookup", strategy="lookup"),
    "vllm-ngram": lambda cost_model=None: VllmNgramMethod("vllm-ngram"),
    "arctic-suffix": lambda cost_model=None: ArcticSuffixMethod("arctic-suffix"),
    "hf-prompt-lookup": lambda cost_model=None: HFPromptLookupMethod("hf-prompt-lookup"),
}
DEFAULT_METHODS = ["specdraft-suffix", "specdraft-suffix-fixed", "specdraft-tree",
                   "specdraft-tree-path", "specdraft-lookup", "vllm-ngram", "arctic-suffix", "hf-prompt-lookup"]


# ----------------------------------------------------------------------------- replay
def accepted_length(tokens: list[int], parents: list[int], truth: list[int]) -> int:
    """Longest root path of the draft that matches ``truth`` (the recorded continuation)."""
    children: dict[int, list[int]] = {}
    for i, p in enumerate(parents):
        children.setdefault(p, []).append(i)
    node, depth = -1, 0
    while depth < len(truth):
        nxt = next((c for c in children.get(node, ()) if tokens[c] == truth[depth]), None)
        if nxt is None:
            break
        node, depth = nxt, depth + 1
    return depth


def replay_request(method: Method, prompt: list[int], output: list[int], max_k: int,
                   limit: int | None = None) -> dict:
    """Replay one request; ``limit`` is the live generation limit when the recorded output
    extends past it (record --lookahead), so drafts in the last step can be judged as vLLM did."""
    limit = len(output) if limit is None else min(limit, len(output))
    method.start(prompt)
    method.extend(output[:1], None)  # prefill: one pass, no draft
    passes, drafted, accepted, drafts = 1, 0, 0, 0
    pass_sizes = [1]
    pos = 1
    while pos < limit:
        toks, parents = method.draft(max_k)
        if len(toks) > max_k:
            raise RuntimeError(f"{method.name} drafted {len(toks)} > {max_k} tokens")
        acc = accepted_length(toks, parents, output[pos:]) if toks else 0
        acc = min(acc, len(output) - pos - 1)  # the last recorded token is the target's own
        emitted = output[pos:pos + acc + 1]
        passes += 1
        drafted += len(toks)
        drafts += bool(toks)
        accepted += acc
        pass_sizes.append(1 + len(toks))
        pos += len(emitted)
        method.extend(emitted, acc if toks else None)
    method.finish()
    return {"target_passes": passes, "drafted_tokens": drafted, "accepted_tokens": accepted,
            "drafts": drafts, "output_tokens": limit, "pass_sizes": pass_sizes}


def est_speedup(pass_sizes: Iterable[int], output_tokens: int, curve) -> float:
    """No-speculation cost (one single-token pass per output token) over speculation's cost."""
    cm = CostModel(curve)
    spec = sum(cm.base_cost(k) for k in pass_sizes)
    return output_tokens * cm.base_cost(1) / spec if spec else 1.0


def _replay_method(method: Method, records: list[dict], max_k: int, workloads, progress) -> dict:
    per_w = {w: {"target_passes": 0, "drafted_tokens": 0, "accepted_tokens": 0, "drafts": 0,
                 "output_tokens": 0, "requests": 0, "pass_sizes": []} for w in workloads}
    for i, rec in enumerate(records):
        r = replay_request(method, rec["prompt_token_ids"], rec["output_token_ids"], max_k,
                           rec.get("max_tokens"))
        agg = per_w[rec["workload"]]
        for k in ("target_passes", "drafted_tokens", "accepted_tokens", "drafts", "output_tokens"):
            agg[k] += r[k]
        agg["requests"] += 1
        agg["pass_sizes"].extend(r["pass_sizes"])
        if progress and (i + 1) % 50 == 0:
            progress(f"[replay] {method.name}: {i + 1}/{len(records)} requests")
    return per_w


def replay(records: list[dict], methods: list[str], max_k: int = 16,
           cost_models: dict | None = None, progress=None,
           specdraft_options: dict | None = None) -> dict:
    """Replay every method over the records.

    ``specdraft_options`` override the options of every specdraft method (ablations).

    Counts come from one run per method. A method with the adaptive controller is run once per
    cost model, its controller using that curve, and each estimated speedup comes from the run
    whose controller assumed the same costs (its counts are those of the first cost model's run).
    """
    cost_models = cost_models or {name: name for name in CURVES}
    workloads = sorted({r["workload"] for r in records})
    results: dict = {w: {} for w in workloads}
    speed: dict = {}
    for mname in methods:
        if mname not in METHODS:
            raise ValueError(f"unknown method {mname!r}; accepted: {', '.join(METHODS)}")
        factory = METHODS[mname]
        adaptive = getattr(factory, "adaptive", False)
        runs = {}
        t0 = time.perf_counter()
        for cm, curve in (cost_models.items() if adaptive else [(None, None)]):
            method = (factory(curve, specdraft_options) if getattr(factory, "specdraft", False)
                      else factory(curve))
            runs[cm] = _replay_method(method, records, max_k, workloads, progress)
            if cm is not None and len(runs) == 1:
                secs = time.perf_counter() - t0  # the speed of one pass over the trace
        if not adaptive:
            secs = time.perf_counter() - t0
        per_w = next(iter(runs.values()))
        total_out = sum(a["output_tokens"] for a in per_w.values())
        speed[mname] = {"seconds": secs, "replayed_tokens_per_s": total_out / secs if secs else 0.0}
        for w, agg in per_w.items():
            agg = dict(agg)
            sizes = agg.pop("pass_sizes")
            agg["mean_acceptance_length"] = agg["output_tokens"] / agg["target_passes"]
            agg["drafted_per_accepted"] = (agg["drafted_tokens"] / agg["accepted_tokens"]
                                           if agg["accepted_tokens"] else None)
            agg["est_speedup"] = {
                cm: est_speedup(runs[cm][w]["pass_sizes"] if adaptive else sizes,
                                agg["output_tokens"], curve)
                for cm, curve in cost_models.items()}
            results[w][mname] = agg
        if progress:
            progress(f"[replay] {mname}: done in {secs:.1f}s per pass "
                     f"({speed[mname]['replayed_tokens_per_s']:,.0f} tokens/s)")
    return {"results": results, "speed": speed, "settings": {
        "max_draft": max_k, "methods": methods, "cost_models": cost_models,
        "requests": len(records), "models": sorted({str(r.get("model")) for r in records}),
        "specdraft_options": specdraft_options or {}}}


# ------------------------------------------------------------------------------ output
def format_table(out: dict, cost_model: str) -> str:
    rows = [f"{'workload':<14} {'method':<24} {'MAL':>6} {'passes':>8} {'drafted':>9} "
            f"{'accepted':>9} {'est x (' + cost_model + ')':>16}"]
    for w, methods in out["results"].items():
        for m, a in methods.items():
            rows.append(f"{w:<14} {m:<24} {a['mean_acceptance_length']:>6.2f} {a['target_passes']:>8} "
                        f"{a['drafted_tokens']:>9} {a['accepted_tokens']:>9} "
                        f"{a['est_speedup'].get(cost_model, float('nan')):>16.2f}")
    return "\n".join(rows)


def markdown_table(out: dict) -> str:
    """Per workload and method: tokens per pass, drafted per accepted, estimated speedups."""
    cms = list(out["settings"]["cost_models"])
    head = ["workload", "method", "MAL", "passes", "drafted", "accepted", "drafted/acc"] + \
        [f"est x {cm}" for cm in cms]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for w, methods in out["results"].items():
        for m, a in methods.items():
            dpa = a["drafted_per_accepted"]
            rows.append("| " + " | ".join(
                [w, m, f"{a['mean_acceptance_length']:.2f}", str(a["target_passes"]),
                 str(a["drafted_tokens"]), str(a["accepted_tokens"]),
                 f"{dpa:.2f}" if dpa is not None else "-"] +
                [f"{a['est_speedup'][cm]:.2f}" for cm in cms]) + " |")
    return "\n".join(rows)


def plot(out: dict, path: str, cost_model: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    workloads = list(out["results"])
    methods = out["settings"]["methods"]
    fig, axes = plt.subplots(2, 1, figsize=(max(9, 1.3 * len(workloads)), 8))
    width = 0.8 / max(1, len(methods))
    for ax, key, title in ((axes[0], "mean_acceptance_length", "tokens per target pass"),
                           (axes[1], "est_speedup", f"estimated speedup ({cost_model})")):
        for j, m in enumerate(methods):
            vals = []
            for w in workloads:
                a = out["results"][w].get(m)
                v = a[key] if key != "est_speedup" else a[key][cost_model] if a else 0
                vals.append(v if a else 0)
            ax.bar([i + j * width for i in range(len(workloads))], vals, width, label=m)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(workloads))])
        ax.set_xticklabels(workloads, rotation=30, ha="right")
        ax.set_title(title)
        ax.axhline(1.0, color="grey", lw=0.8)
    axes[0].legend(fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def load_cost_models(specs: list[str] | None) -> dict:
    """Named presets, or NAME=FILE.json with a list of [tokens, relative cost] points."""
    if not specs:
        return {name: name for name in CURVES}
    out = {}
    for s in specs:
        if s in CURVES:
            out[s] = s
        elif "=" in s:
            name, path = s.split("=", 1)
            with open(path, encoding="utf-8") as f:
                out[name] = [tuple(p) for p in json.load(f)]
        else:
            raise SystemExit(f"--cost-model {s!r}: accepted {', '.join(CURVES)} or NAME=FILE.json")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="specdraft replay", description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", required=True, nargs="+", help="trace JSONL file(s) from specdraft record")
    ap.add_argument("--methods", nargs="+", default=DEFAULT_METHODS,
                    help=f"methods to replay (default: {' '.join(DEFAULT_METHODS)}; "
                         f"all: {' '.join(METHODS)})")
    ap.add_argument("--max-draft", type=int, default=16, help="draft budget per step (default 16)")
    ap.add_argument("--cost-model", nargs="+", help="cost curves: preset names "
                    f"({', '.join(CURVES)}) or NAME=FILE.json; default: all presets")
    ap.add_argument("--specdraft-options", default="{}", metavar="JSON",
                    help='options for every specdraft method, e.g. \'{"max_waste": 64}\' (ablations)')
    ap.add_argument("--json", required=True, help="where to write the results")
    ap.add_argument("--png", help="chart path (default: next to --json)")
    ap.add_argument("--markdown", help="also write the table as Markdown here")
    args = ap.parse_args(argv)
    if args.max_draft < 1:
        ap.error(f"--max-draft must be >= 1, got {args.max_draft}")
    from specdraft.proposers.base import SpecdraftConfigError
    from specdraft.proposers.config import DrafterConfig
    try:
        sd_opts = json.loads(args.specdraft_options)
        if not isinstance(sd_opts, dict):
            raise SpecdraftConfigError("--specdraft-options must be a JSON object")
        DrafterConfig.from_dict(sd_opts)
    except (json.JSONDecodeError, SpecdraftConfigError) as e:
        print(f"specdraft replay: --specdraft-options: {e}", file=sys.stderr)
        return 2
    records = []
    for path in args.traces:
        try:
            records.extend(load_trace(path))
        except (OSError, ValueError) as e:
            print(f"specdraft replay: {e}", file=sys.stderr)
            return 2
    cms = load_cost_models(args.cost_model)
    print(f"[replay] {len(records)} requests, {sum(len(r['output_token_ids']) for r in records):,} "
          f"output tokens, methods: {' '.join(args.methods)}", flush=True)
    out = replay(records, args.methods, args.max_draft, cms,
                 progress=lambda m: print(m, flush=True), specdraft_options=sd_opts)
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    first_cm = next(iter(cms))
    print(format_table(out, first_cm))
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(markdown_table(out) + "\n")
        print(f"[replay] markdown table: {args.markdown}")
    png = args.png or os.path.splitext(args.json)[0] + ".png"
    try:
        plot(out, png, first_cm)
        print(f"[replay] chart: {png}")
    except ImportError:
        print("[replay] matplotlib not installed: no chart")
    print(f"[replay] results: {args.json}")
    return 0
