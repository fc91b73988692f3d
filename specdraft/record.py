"""``specdraft record``: greedy traces of a target model on a workload, for ``specdraft replay``.

A trace is JSONL, one request per line in arrival order:

    {"id", "workload", "session", "turn", "prompt_token_ids", "output_token_ids",
     "max_tokens", "finish_reason", "model", "dtype", "tokenizer"}

Outputs are the target's greedy continuations (float32 unless ``--dtype``) with no speculation (vLLM on CPU).
Sessions are recorded turn by turn: a turn with ``history: "previous"`` is sent after the
session's previous turn, with that turn's conversation and generated answer in front of it.
``--lookahead K`` records K + 1 tokens past ``max_tokens`` (generation ignores EOS then), so
replay can judge the drafts of a request's last step exactly as the engine did.
``--top-k K`` also records ``output_topk``: at every output position the ids of the target's K
most likely tokens there, most likely first (vLLM's ``logprobs=K``), what a verification pass
computes at the positions it scores; ``specdraft replay`` feeds them to target-logit recycling.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import sys
import time

from specdraft.cli import parser as cli_parser
from specdraft.proposers.recycle import MAX_TOP_K


def tokenizer_identity(tokenizer) -> str:
    """Name plus a hash of the vocabulary: traces from different tokenizers must not mix."""
    vocab = tokenizer.get_vocab()
    h = hashlib.sha256(json.dumps(sorted(vocab.items()), ensure_ascii=True).encode()).hexdigest()
    name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
    return f"{os.path.basename(str(name).rstrip('/'))}:{len(vocab)}:{h[:16]}"


def topk_ids(position_logprobs: dict, k: int) -> list[int]:
    """The ids of one position's ``k`` most likely tokens, most likely first, from vLLM's
    ``{token_id: Logprob}`` (which also holds the sampled token, whatever its rank)."""
    ranked = sorted(position_logprobs.items(), key=lambda kv: kv[1].rank)
    return [int(t) for t, lp in ranked if lp.rank <= k][:k]


def record(records: list[dict], llm, model_name: str, out_path: str, *, lookahead: int = 0,
           max_model_len: int = 4096, dtype: str = "float32", top_k: int = 0,
           progress=print) -> dict:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from specdraft.live import chat_prompt
    from specdraft.workloads import expand_history

    tok = llm.get_tokenizer()
    tok_id = tokenizer_identity(tok)
    conv: dict[str, object] = {}     # session -> conversation sent for its last turn
    answer: dict[str, str] = {}      # session -> text generated for its last turn
    dropped: set[str] = set()        # sessions cut short by max_model_len
    turns = sorted({int(r.get("turn", 1)) for r in records})
    written = skipped = 0
    t0 = time.perf_counter()
    os.makedirs(os.path.dirname(os.path.abspath(out_path)) or ".", exist_ok=True)
    opener = gzip.open if out_path.endswith(".gz") else open
    with opener(out_path, "wt", encoding="utf-8") as f:
        for turn in turns:
            batch, prompts, params = [], [], []
            for r in records:
                if int(r.get("turn", 1)) != turn:
                    continue
                sess = r.get("session")
                if sess in dropped:
                    skipped += 1
                    continue
                msgs = expand_history(r, conv.get(sess), answer.get(sess))
                ids = chat_prompt(tok, msgs) if isinstance(msgs, list) else \
                    tok.encode(msgs, add_special_tokens=True)
                n_out = int(r["max_tokens"]) + (lookahead + 1 if lookahead else 0)
                if len(ids) + n_out > max_model_len:
                    skipped += 1
                    if sess is not None:
                        dropped.add(sess)
                    continue
                if sess is not None:
                    conv[sess] = msgs
                batch.append(r)
                prompts.append(TokensPrompt(prompt_token_ids=ids))
                params.append(SamplingParams(temperature=0.0, max_tokens=n_out,
                                             ignore_eos=bool(lookahead),
                                             logprobs=top_k or None))
            if not batch:
                continue
            progress(f"[record] turn {turn}: {len(batch)} requests ...")
            # vLLM's own bar (requests done, rate, ETA) on a terminal; the lines always
            outs = llm.generate(prompts, params, use_tqdm=sys.stderr.isatty())
            for r, p, o in zip(batch, prompts, outs):
                out = o.outputs[0]
                if r.get("session") is not None:
                    answer[r["session"]] = tok.decode(list(out.token_ids)[: int(r["max_tokens"])],
                                                      skip_special_tokens=True)
                rec = {
                    "id": r["id"], "workload": r["workload"], "session": r.get("session"),
                    "turn": turn, "prompt_token_ids": list(p["prompt_token_ids"]),
                    "output_token_ids": list(out.token_ids), "max_tokens": int(r["max_tokens"]),
                    "finish_reason": out.finish_reason, "model": model_name, "dtype": dtype,
                    "tokenizer": tok_id}
                if top_k:
                    rec["output_topk"] = [topk_ids(lp, top_k) for lp in out.logprobs]
                f.write(json.dumps(rec) + "\n")
                written += 1
            progress(f"[record] {written} requests written ({time.perf_counter() - t0:.0f}s)")
    return {"written": written, "skipped": skipped, "seconds": time.perf_counter() - t0}


def main(argv=None) -> int:
    ap = cli_parser("specdraft record", __doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--workload", nargs="+", help="built-in workload name(s) (specdraft workloads list)")
    src.add_argument("--workload-file", help="a JSONL workload file (see docs/workloads.md)")
    ap.add_argument("-n", type=int, default=8, help="requests per built-in workload")
    ap.add_argument("--seed", type=int, default=0, help="seed of the built-in workloads")
    ap.add_argument("--model", default="smollm2-135m", help="a name from `specdraft models list`, a model folder, or a Hugging Face id in the local cache")
    ap.add_argument("--max-tokens", type=int, help="cap every request's max_tokens")
    ap.add_argument("--max-model-len", type=int, default=4096, help="vLLM max_model_len (longer requests are skipped)")
    ap.add_argument("--lookahead", type=int, default=0,
                    help="record K+1 tokens past max_tokens, ignoring EOS (for exact live checks)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                    help="target dtype (any deterministic greedy output is a valid trace; "
                         "bfloat16 records ~2x faster on CPU)")
    ap.add_argument("--max-num-seqs", type=int, default=8, help="requests in flight")
    ap.add_argument("--top-k", type=int, default=0,
                    help=f"also record the target's K most likely token ids at every output "
                         f"position (1-{MAX_TOP_K}; 0: none), for target-logit recycling")
    ap.add_argument("--out", required=True, help="trace JSONL to write (.gz: gzipped)")
    args = ap.parse_args(argv)
    if not 0 <= args.top_k <= MAX_TOP_K:
        ap.error(f"--top-k {args.top_k}: accepted values are 0 (off) to {MAX_TOP_K}")

    from specdraft import workloads
    from specdraft import live
    from specdraft.models import resolve_model
    path = resolve_model(args.model)
    print(f"[record] model {args.model} ({path})", flush=True)
    try:
        print(f"[record] {live.plan_engines(path, 1, args.dtype).describe()}", flush=True)
    except live.MemoryPlanError as e:
        print(f"specdraft record: {e}", file=sys.stderr)
        return 2
    try:
        if args.workload_file:
            records = workloads.load_jsonl(args.workload_file)
        else:
            records = []
            for w in args.workload:
                records.extend(workloads.generate(w, args.n, seed=args.seed))
    except (KeyError, ValueError) as e:
        print(f"specdraft record: {e}", file=sys.stderr)
        return 2
    print(f"[record] {len(records)} requests", flush=True)
    if args.max_tokens:
        for r in records:
            r["max_tokens"] = min(int(r["max_tokens"]), args.max_tokens)
    llm = live.make_llm(path, None, max_model_len=args.max_model_len,
                        max_num_seqs=args.max_num_seqs, dtype=args.dtype)
    res = record(records, llm, args.model, args.out, lookahead=args.lookahead,
                 max_model_len=args.max_model_len, dtype=args.dtype, top_k=args.top_k,
                 progress=lambda m: print(m, flush=True))
    print(f"[record] wrote {res['written']} requests ({res['skipped']} skipped: longer than "
          f"--max-model-len) in {res['seconds']:.0f}s -> {args.out}")
    return 0
