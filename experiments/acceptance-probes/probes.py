"""Ideas for acceptance that were tried and not kept: each as a patch of the plain-Python core.

    python experiments/acceptance-probes/probes.py TRACE [TRACE ...]

writes summary.md and probes.json to benchmarks/results/acceptance-probes/. Every probe replays
specdraft's chain (``specdraft-suffix``, shipped defaults, the Python twin so the patch applies)
at batch 1 beside the unpatched run and arctic's suffix decoding; tokens per pass and drafted per
accepted token.

Probes:
- ``recency ties``: among continuations with equal counts, the most recently seen first (a node's
  occurrence reference is its latest one) instead of the smaller token id.
- ``recency first``: continuations ordered by recency alone (prompt-lookup's rule inside the trie).
- ``kappa 2`` / ``kappa 4``: stronger shrinkage of thin evidence after short matches,
  c / (sum(c) + kappa / d) (shipped: 1).
- ``gate short``: after a match of 0-1 tokens, do not draft when the global cache alone proposes
  the token among several continuations, or when the request's own history proposes one the
  global cache ranks lower (first-token acceptance 9-25% in those cases on the 1.5B traces,
  against 34-52% when both agree).
- ``weight d^2``: the two sources' next-token distributions mixed with weights growing as the
  square of their matched lengths (shipped: linear, the request's own history times
  ``local_weight``), so a long match in the global cache (another request's answer) outweighs a
  short one in the request's own history.
- ``copy pointer``: each request follows the context position it is copying from; once its
  tokens stop following it, the next draft copies from the occurrence of the context tail (1-6
  tokens) nearest that position (up to 4 tokens) when that disagrees with the suffix draft (an
  edited file resumes near where the edit began, not at the tail's latest occurrence).
"""

from __future__ import annotations

import os
import sys

from specdraft.proposers import suffix_core as sc
from specdraft.proposers import suffix_index as si
from specdraft.replay import load_trace, replay
from specdraft.results import write_results

# the results this script writes and reads (it lives in experiments/acceptance-probes/)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks", "results",
                   "acceptance-probes")
PY = {"native": False}


def _recency(first: bool):
    orig = si.SuffixIndex.continuations

    def continuations(self, state):
        out = orig(self, state)  # an open node's children: (token, count, (child, 0))
        if len(out) > 1:
            rec = lambda x: (-self.ref_seq[x[2][0]], -self.ref_pos[x[2][0]])  # noqa: E731
            out.sort(key=rec if first else (lambda x: (-x[1],) + rec(x)))
        return out
    return si.SuffixIndex, "continuations", continuations


def _kappa(k: float):
    orig = sc.SuffixCore.__init__

    def __init__(self, *a, **kw):
        orig(self, *a, **kw)
        self.kappa = k
    return sc.SuffixCore, "__init__", __init__


def _gate():
    orig_expand, orig_draft = sc.SuffixCore._expand, sc.SuffixCore.draft
    state = {"root": False, "kill": False}

    def _expand(self, local_index, states, path_tokens, *scope):  # single-scope traces
        out = orig_expand(self, local_index, states, path_tokens, *scope)
        if state["root"]:
            state["root"] = False
            if out:
                top, info = out[0][0], []
                for k in range(2):
                    st = states[k]
                    idx = self.global_index if k else local_index
                    conts = idx.continuations(st) if st is not None else []
                    info.append((conts[0][0], len(conts), idx.dep[st[0]] + st[1]) if conts else None)
                loc, glo = info
                ml = max(loc[2] if loc else 0, glo[2] if glo else 0)
                multi = (loc is not None and loc[1] > 1) or (glo is not None and glo[1] > 1)
                global_only = loc is None and glo is not None and glo[0] == top
                disagree = loc is not None and loc[0] == top and glo is not None and glo[0] != top
                state["kill"] = ml <= 1 and ((global_only and multi) or disagree)
        return out

    def draft(self, handle, budget, tree=False):
        state["root"], state["kill"] = True, False
        res = orig_draft(self, handle, budget, tree)
        state["root"] = False
        return ([], [], [], res[3]) if state["kill"] else res
    return [(sc.SuffixCore, "_expand", _expand), (sc.SuffixCore, "draft", draft)]


def _weight_squared():
    def _source_weight(self, matched, own):
        return matched * matched * (self.local_weight if own else 1)
    return [(sc.SuffixCore, "_source_weight", _source_weight)]


def _copy_pointer():
    """Per request: the context position it is copying from; on a restart, the occurrence of the
    context tail (1-6 tokens) nearest that position, within 32 before / 256 after."""
    orig_start, orig_extend, orig_draft = sc.SuffixCore.start, sc.SuffixCore.extend, sc.SuffixCore.draft
    ptr: dict = {}

    def start(self, h, prompt):
        orig_start(self, h, prompt)
        ptr[(id(self), h)] = {"align": None, "restart": True}

    def extend(self, h, toks):
        s = self._requests[h].index.seqs[sc._LOCAL_SEQ]
        p = ptr[(id(self), h)]
        for t in toks:
            if p["align"] is not None and p["align"] < len(s) and s[p["align"]] == t:
                p["align"] += 1
            else:
                p["restart"] = True
        orig_extend(self, h, toks)

    def draft(self, h, budget, tree=False):
        res = orig_draft(self, h, budget, tree)
        p = ptr[(id(self), h)]
        s = self._requests[h].index.seqs[sc._LOCAL_SEQ]
        n = len(s)
        if p["align"] is None:  # anchor on the most recent occurrence of a 3-8 token tail
            for m in range(min(8, n - 1), 2, -1):
                hits = [e for e in range(m, n - 1) if s[e - m:e] == s[n - m:]]
                if hits:
                    p["align"] = hits[-1]
                    break
        if tree or not p["restart"] or p["align"] is None or budget <= 0:
            p["restart"] = False
            return res
        p["restart"] = False
        a = p["align"]
        for m in range(min(6, n - 1), 0, -1):
            hits = [e for e in range(max(m, a - 32), min(n - 1, a + 256) + 1)
                    if e + m < n and s[e - m:e] == s[n - m:]]
            if hits:
                e = min(hits, key=lambda e: (abs(e - a), e))
                p["align"] = e
                cand = s[e:e + min(4, budget)]
                if cand and (not res[0] or res[0][0] != cand[0]):
                    k = len(cand)
                    return cand, list(range(-1, k - 1)), [0.5] * k, m
                break
        return res
    return [(sc.SuffixCore, "start", start), (sc.SuffixCore, "extend", extend), (sc.SuffixCore, "draft", draft)]


PROBES = {
    "recency ties": lambda: [_recency(False)],
    "recency first": lambda: [_recency(True)],
    "kappa 2": lambda: [_kappa(2.0)],
    "kappa 4": lambda: [_kappa(4.0)],
    "gate short": _gate,
    "weight d^2": _weight_squared,
    "copy pointer": _copy_pointer,
}


def run(path: str) -> dict:
    recs = load_trace(path)
    common = dict(cost_model="medium", batches=(1,))
    res: dict = {}
    arctic = replay(recs, ["arctic-suffix"], **common)["results"]
    base = replay(recs, ["specdraft-suffix"], specdraft_options=PY, **common)["results"]
    for w in arctic:
        res[w] = {"arctic-suffix": arctic[w]["arctic-suffix"], "shipped": base[w]["specdraft-suffix"]}
    for label, make in PROBES.items():
        patches = make()
        saved = [(cls, name, getattr(cls, name)) for cls, name, _ in patches]
        try:
            for cls, name, fn in patches:
                setattr(cls, name, fn)
            out = replay(recs, ["specdraft-suffix"], specdraft_options=PY, **common)["results"]
        finally:
            for cls, name, fn in saved:
                setattr(cls, name, fn)
        for w in out:
            res[w][label] = out[w]["specdraft-suffix"]
        print(f"[probes] {os.path.basename(path)}: {label} done", file=sys.stderr, flush=True)
    return res


def main(argv: list[str]) -> int:
    head = ["trace", "workload", "arctic tpp / d/a", "shipped tpp / d/a"] + [f"{p} tpp / d/a" for p in PROBES]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out = {}
    for path in argv:
        name = os.path.basename(path).split(".jsonl")[0]
        res = out[name] = run(path)
        for w in sorted(res):
            cells = [f"{res[w][k]['tokens_per_pass']:.3f} / {res[w][k]['drafted_per_accepted']:.2f}"
                     for k in ["arctic-suffix", "shipped", *PROBES]]
            lines.append(f"| {name} | {w} | " + " | ".join(cells) + " |")
    write_results(os.path.join(OUT, "probes.json"), out, tag="probes",
                  say=lambda m: print(m, file=sys.stderr))
    text = ("Generated by `experiments/acceptance-probes/probes.py` (see its docstring for each "
            "probe) from "
            + ", ".join(f"`{p}`" for p in argv) + ". tpp: output tokens per target pass; d/a: "
            "drafted tokens per accepted token. Batch 1, cost model `medium`, budget 16.\n\n"
            + "\n".join(lines) + "\n")
    with open(os.path.join(OUT, "summary.md"), "w", encoding="utf-8") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
