"""How much target-logit recycling could add at most, on a trace recorded with --top-k.

    python experiments/recycling/bound.py benchmarks/traces/qwen2.5-coder-0.5b-topk-seed2.jsonl.gz

Per workload, batch 1, draft budget 16: specdraft without recycling, with recycling as
``specdraft replay`` runs it (the table fed the top-k of every position the pass emitted), and
with hindsight (the table filled beforehand from every position of every request: each
request's own future successors included, which no engine can know; the positions after
rejected draft tokens that an engine also scores, and a trace does not hold, add less than this).
"""

from __future__ import annotations

import sys

from specdraft.replay import METHODS, load_trace, replay_batched


def tokens_per_pass(method, records) -> float:
    r = replay_batched(method, records, 16, 1, None)
    return r["output_tokens"] / r["target_passes"]


def main(path: str) -> None:
    records = load_trace(path)
    for w in sorted({r["workload"] for r in records}):
        recs = [r for r in records if r["workload"] == w]
        arctic = tokens_per_pass(METHODS["arctic-suffix"](), recs)
        for base, name in (("specdraft-suffix", "specdraft-recycle"),
                           ("specdraft-tree", "specdraft-recycle-tree")):
            plain = tokens_per_pass(METHODS[base](), recs)
            fed = tokens_per_pass(METHODS[name](), recs)
            hindsight = METHODS[name]()
            for r in recs:
                hindsight.table.update([r["prompt_token_ids"][-1]] + r["output_token_ids"][:-1],
                                       r["output_topk"])
            bound = tokens_per_pass(hindsight, recs)
            print(f"{w:<12} {base:<17} {plain:.2f}  {name:<23} {fed:.2f}  hindsight {bound:.2f}"
                  f"  (arctic-suffix {arctic:.2f}: x{plain / arctic:.2f} / x{fed / arctic:.2f} / "
                  f"x{bound / arctic:.2f})", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
