"""``specdraft hf-bench``: tree vs chain verification in transformers, against its own methods.

One interleaved run, batch size 1, over the prompts of a trace. Methods:

    generate         plain ``model.generate`` (greedy): the reference
    hf-lookup        transformers' prompt lookup (``prompt_lookup_num_tokens=k``)
    hf-assisted      transformers' assisted generation with a draft model (``--assistant``;
                     Qwen2.5-Coder-0.5B by default when the target is Qwen2.5-Coder-1.5B), with
                     transformers' own draft settings (up to 20 draft tokens a pass, drafting
                     stops where the draft model's confidence drops below 0.4); its draft
                     model's time is in its tokens per second
    specdraft-chain  specdraft's suffix drafter (chains), verified by specdraft.hf_generate
    specdraft-tree   specdraft's tree drafter, whole trees verified in one pass

For each prompt every method runs once, in an order rotated per prompt and round, so a noisy
neighbour hits all alike. Reported per method: tokens per second (all tokens / all seconds), the
ratio of the fastest round and the median of per-round ratios against each baseline, target
passes, tokens per target pass, mean acceptance length (vLLM's: 1 + accepted / drafts), drafted
nodes per accepted token, and whether the outputs are token-identical to ``generate``.
specdraft's drafters are fresh each round, so no round sees outputs of an earlier one.
Counts for the transformers methods come from a forward pre-hook on the target: a pass that feeds
q tokens after the cache verifies q - 1 draft tokens; each pass emits accepted + 1 tokens.
"""

from __future__ import annotations

import statistics
import sys
import time

from specdraft.cli import parser as cli_parser
from specdraft.live import cpu_pressure
from specdraft.results import write_results

METHODS = ("generate", "hf-lookup", "hf-assisted", "specdraft-chain", "specdraft-tree")
DTYPES = ("bfloat16", "float32")
DEFAULT_ASSISTANT = {"qwen2.5-coder-1.5b": "qwen2.5-coder-0.5b"}
DEFAULT_TRACES = {"qwen2.5-coder-1.5b": "benchmarks/traces/qwen2.5-coder-1.5b.jsonl",
                  "smollm2-135m": "benchmarks/traces/smollm2-135m.jsonl"}


def load_model(name: str, dtype: str):
    import torch
    from transformers import AutoModelForCausalLM

    from specdraft.models import resolve_model

    path = resolve_model(name)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    model.eval()
    return model


def _hf_counts(calls: list[int], prompt_len: int, generated: int) -> dict:
    passes = len(calls)
    drafted = sum(max(0, q - (prompt_len if i == 0 else 1)) for i, q in enumerate(calls))
    drafts = sum(1 for i, q in enumerate(calls) if q > (prompt_len if i == 0 else 1))
    return {"target_passes": passes, "drafts": drafts, "drafted_tokens": drafted,
            "accepted_tokens": max(0, generated - passes)}


class Runner:
    """Runs one method on one prompt; returns (tokens, seconds, counts)."""

    def __init__(self, model, assistant, k: int):
        self.model, self.assistant, self.k = model, assistant, k
        self._gens: dict[str, object] = {}

    def new_round(self) -> None:
        from specdraft.hf_generate import SpeculativeGenerator

        self._gens = {"specdraft-chain": SpeculativeGenerator(self.model, {"strategy": "suffix"},
                                                              max_draft_tokens=self.k),
                      "specdraft-tree": SpeculativeGenerator(self.model, {"strategy": "tree"},
                                                             max_draft_tokens=self.k)}

    def run(self, method: str, prompt: list[int], max_new: int):
        import torch

        from specdraft.adapters import transformers as hf

        if method.startswith("specdraft-"):
            res = self._gens[method].generate(prompt, max_new)
            s = res.stats
            return res.token_ids, s.seconds, {
                "target_passes": s.target_passes, "drafts": s.drafts,
                "drafted_tokens": s.drafted_tokens, "accepted_tokens": s.accepted_tokens}
        kwargs = dict(max_new_tokens=max_new, do_sample=False, top_k=None, top_p=None,
                      temperature=None)
        if method == "hf-lookup":
            kwargs["prompt_lookup_num_tokens"] = self.k
        elif method == "hf-assisted":
            kwargs["assistant_model"] = self.assistant
        ids = torch.tensor([prompt], device=self.model.device)
        calls, handle = hf.count_forward_passes(self.model)
        try:
            with torch.inference_mode():
                t0 = time.perf_counter()
                out = self.model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
                secs = time.perf_counter() - t0
        finally:
            handle.remove()
        toks = out[0, len(prompt):].tolist()
        return toks, secs, _hf_counts(calls, len(prompt), len(toks))


def summarize(runs: dict, baselines: list[str]) -> dict:
    """``runs[method]``: one dict per round with tokens, seconds, counts and outputs."""
    ref = runs["generate"][0]["outputs"]
    table = {}
    for m, rs in runs.items():
        c = {k: sum(r[k] for r in rs) for k in
             ("tokens", "target_passes", "drafts", "drafted_tokens", "accepted_tokens")}
        secs = [r["seconds"] for r in rs]
        row = {
            "tokens_per_s": c["tokens"] / sum(secs),
            "tokens_per_s_rounds": [r["tokens"] / r["seconds"] for r in rs],
            "tokens_per_pass": c["tokens"] / c["target_passes"],
            "mean_acceptance_length": (1 + c["accepted_tokens"] / c["drafts"]) if c["drafts"] else None,
            "nodes_per_accepted_token": (c["drafted_tokens"] / c["accepted_tokens"]
                                         if c["accepted_tokens"] else None),
            "identical_to_generate": sum(o == e for r in rs for o, e in zip(r["outputs"], ref))
            / sum(len(r["outputs"]) for r in rs),
            **c,
        }
        for b in baselines:
            bs = [r["seconds"] for r in runs[b]]
            row[f"x_{b}_min"] = min(bs) / min(secs)
            row[f"x_{b}_median"] = statistics.median(x / y for x, y in zip(bs, secs))
        table[m] = row
    return table


def format_hf_table(table: dict, baselines: list[str]) -> str:
    ratio_cols = [f"x {b}" for b in baselines]
    hdr = (f"| method | tok/s | {' | '.join(ratio_cols)} | tokens/pass | MAL | nodes/accepted "
           f"| drafted | accepted | identical |")
    lines = [hdr, "|" + "---|" * (hdr.count("|") - 1)]
    for m, t in table.items():
        ratios = " | ".join(f"{t[f'x_{b}_min']:.2f} ({t[f'x_{b}_median']:.2f})" for b in baselines)
        npa, mal = t["nodes_per_accepted_token"], t["mean_acceptance_length"]
        lines.append(f"| {m} | {t['tokens_per_s']:.1f} | {ratios} | {t['tokens_per_pass']:.2f} | "
                     f"{'-' if mal is None else f'{mal:.2f}'} | {'-' if npa is None else f'{npa:.2f}'} | "
                     f"{t['drafted_tokens']} | {t['accepted_tokens']} | "
                     f"{t['identical_to_generate']:.0%} |")
    lines.append("")
    lines.append("x B: ratio of the fastest round's seconds to B's fastest (in parentheses: the "
                 "median of per-round ratios); MAL: 1 + accepted / drafts; tokens/pass: tokens "
                 "emitted per target forward pass (the prompt's pass included); identical: share "
                 "of outputs token-identical to plain generate.")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = cli_parser("specdraft hf-bench", __doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m", help="a name from `specdraft models list`, "
                    "a model folder, or a Hugging Face id in the local cache")
    ap.add_argument("--assistant", help="draft model for hf-assisted (default: Qwen2.5-Coder-0.5B "
                    "when the model is Qwen2.5-Coder-1.5B; none otherwise)")
    ap.add_argument("--dtype", default="bfloat16", choices=DTYPES, help="target dtype")
    ap.add_argument("--traces", help="trace JSONL whose prompts are used (default: the model's "
                    "trace under benchmarks/traces/)")
    ap.add_argument("--limit", type=int, default=4, help="the first N prompts of the trace")
    ap.add_argument("--workloads", nargs="+", help="only these workloads of the trace")
    ap.add_argument("--per-workload", type=int, metavar="N",
                    help="the first N prompts of each workload (before --limit)")
    ap.add_argument("--max-new-tokens", type=int, default=128,
                    help="cap on each request's max_tokens from the trace")
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS, metavar="METHOD",
                    help=f"methods to run, of: {' '.join(METHODS)}")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds")
    ap.add_argument("-k", "--max-draft-tokens", type=int, default=8,
                    help="draft tokens per pass: tree nodes (specdraft), "
                    "prompt_lookup_num_tokens (hf-lookup)")
    ap.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    ap.add_argument("--json", required=True, help="where to write the results")
    args = ap.parse_args(argv)

    def progress(msg):
        print(msg, flush=True)

    import torch

    from specdraft.replay import load_trace

    if args.threads:
        torch.set_num_threads(args.threads)
    if "generate" not in args.methods:
        ap.error("--methods must include 'generate' (the reference)")
    traces = args.traces or DEFAULT_TRACES.get(args.model)
    if traces is None:
        ap.error(f"--traces is required for model {args.model!r}")
    try:
        records = load_trace(traces)
    except (OSError, ValueError) as e:
        print(f"specdraft hf-bench: {e}", file=sys.stderr)
        return 2
    if args.workloads:
        records = [r for r in records if r.get("workload") in args.workloads]
    if args.per_workload is not None:
        if args.per_workload < 1:
            ap.error(f"--per-workload must be >= 1 (got {args.per_workload})")
        taken: dict = {}
        kept = []
        for r in records:
            taken[r.get("workload")] = taken.get(r.get("workload"), 0) + 1
            if taken[r.get("workload")] <= args.per_workload:
                kept.append(r)
        records = kept
    records = records[: args.limit]
    prompts = [r["prompt_token_ids"] for r in records]
    maxes = [min(args.max_new_tokens, int(r.get("max_tokens") or args.max_new_tokens))
             for r in records]
    assistant_name = args.assistant or DEFAULT_ASSISTANT.get(args.model)
    methods = list(args.methods)
    if "hf-assisted" in methods and assistant_name is None:
        progress(f"[hf-bench] no draft model for {args.model}: hf-assisted left out "
                 "(--assistant NAME to add it)")
        methods.remove("hf-assisted")
    progress(f"[hf-bench] {len(prompts)} prompts from {traces}, model {args.model} ({args.dtype}), "
             f"methods {' '.join(methods)}, {args.rounds} rounds, k={args.max_draft_tokens}, "
             f"torch threads {torch.get_num_threads()}")
    model = load_model(args.model, args.dtype)
    assistant = load_model(assistant_name, args.dtype) if "hf-assisted" in methods else None
    runner = Runner(model, assistant, args.max_draft_tokens)

    runs = {m: [] for m in methods}
    for r in range(args.rounds):
        runner.new_round()
        acc = {m: {"tokens": 0, "seconds": 0.0, "target_passes": 0, "drafts": 0,
                   "drafted_tokens": 0, "accepted_tokens": 0, "outputs": []} for m in methods}
        for i, (prompt, n) in enumerate(zip(prompts, maxes)):
            shift = (r * len(prompts) + i) % len(methods)
            for m in methods[shift:] + methods[:shift]:
                toks, secs, counts = runner.run(m, prompt, n)
                a = acc[m]
                a["tokens"] += len(toks)
                a["seconds"] += secs
                a["outputs"].append(toks)
                for k, v in counts.items():
                    a[k] += v
            progress(f"[hf-bench] round {r + 1}/{args.rounds} prompt {i + 1}/{len(prompts)}: "
                     + "  ".join(f"{m} {acc[m]['tokens'] / acc[m]['seconds']:.1f}" for m in methods)
                     + f" tok/s so far  (cpu {cpu_pressure() or 'n/a'})")
        for m in methods:
            acc[m]["cpu_pressure"] = cpu_pressure()
            runs[m].append(acc[m])

    baselines = [b for b in ("generate", "hf-lookup", "hf-assisted") if b in methods]
    table = summarize(runs, baselines)
    title = (f"{args.model} {args.dtype} on {torch.get_num_threads()} threads: {len(prompts)} "
             f"prompts, up to {args.max_new_tokens} new tokens, k={args.max_draft_tokens}, "
             f"{args.rounds} interleaved rounds, batch 1")
    print()
    print(title)
    print(format_hf_table(table, baselines))
    payload = {"settings": {**vars(args), "traces": traces, "assistant": assistant_name,
                            "methods": methods, "dtype": args.dtype,
                            "transformers": __import__("transformers").__version__,
                            "torch": torch.__version__},
               "title": title, "table": table,
               "runs": {m: [{k: v for k, v in r.items() if k != "outputs"} for r in rs]
                        for m, rs in runs.items()}}
    write_results(args.json, payload, say=progress, tag="hf-bench")
    return 0


if __name__ == "__main__":
    sys.exit(main())
