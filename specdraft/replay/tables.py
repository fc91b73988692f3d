"""``specdraft replay``'s results as tables: the terminal table, the full Markdown table and the
per-workload summary of BENCHMARKS.md."""

from __future__ import annotations


def _f(v, spec=".2f") -> str:
    return "-" if v is None else format(v, spec)


def format_replay_table(out: dict) -> str:
    bs = out["settings"]["batches"]
    cm = out["settings"]["cost_model"]
    rows = [f"{'workload':<14} {'method':<22} {'tok/pass':>8} {'MAL':>6} {'drafted':>8} "
            f"{'accepted':>8} {'dr/acc':>6} " + " ".join(f"{'x@' + str(b):>6}" for b in bs)
            + " " + " ".join(f"{'dr/st@' + str(b):>8}" for b in bs) + f"   (est x: {cm})"]
    for w, methods in out["results"].items():
        for m, a in methods.items():
            rows.append(f"{w:<14} {m:<22} {a['tokens_per_pass']:>8.2f} "
                        f"{_f(a['mean_acceptance_length']):>6} {a['drafted_tokens']:>8} "
                        f"{a['accepted_tokens']:>8} {_f(a['drafted_per_accepted']):>6} "
                        + " ".join(f"{a['batch'][str(b)]['est_speedup']:>6.2f}" for b in bs) + " "
                        + " ".join(f"{a['batch'][str(b)]['drafted_per_step']:>8.2f}" for b in bs))
    return "\n".join(rows)


def markdown_table(out: dict) -> str:
    """Per workload and method: tokens per pass, MAL, drafted per accepted, and per batch size
    the estimated speedup and draft tokens per decode step."""
    bs = out["settings"]["batches"]
    head = (["workload", "method", "tokens/pass", "MAL", "passes", "drafted", "accepted",
             "drafted/acc"] + [f"est x b{b}" for b in bs] + [f"drafted/step b{b}" for b in bs])
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for w, methods in out["results"].items():
        for m, a in methods.items():
            rows.append("| " + " | ".join(
                [w, m, f"{a['tokens_per_pass']:.2f}", _f(a["mean_acceptance_length"]),
                 str(a["target_passes"]), str(a["drafted_tokens"]), str(a["accepted_tokens"]),
                 _f(a["drafted_per_accepted"])]
                + [f"{a['batch'][str(b)]['est_speedup']:.2f}" for b in bs]
                + [f"{a['batch'][str(b)]['drafted_per_step']:.2f}" for b in bs]) + " |")
    return "\n".join(rows)


def summary_table(out: dict, ours: str = "specdraft-suffix", peer: str = "arctic-suffix",
                  other: str = "vllm-ngram") -> str:
    """Per workload: the default strategy against arctic (and vLLM ngram), and the default's
    estimated speedup and draft tokens per step at each batch size."""
    bs = out["settings"]["batches"]
    at = " / ".join(f"b{b}" for b in bs)
    head = ["workload", f"tokens/pass: {ours} / {peer} / {other}", "ratio to arctic",
            f"MAL: {ours} / {peer}", f"drafted/acc: {ours} / {peer}",
            f"{ours} est x {at}", f"{ours} drafted/step {at}"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def get(a, key):
        return None if a is None else a[key]

    for w, methods in out["results"].items():
        a, p, o = methods.get(ours), methods.get(peer), methods.get(other)
        if a is None:
            continue
        ratio = a["tokens_per_pass"] / p["tokens_per_pass"] if p else None
        rows.append("| " + " | ".join([
            w, " / ".join(_f(get(x, "tokens_per_pass")) for x in (a, p, o)), _f(ratio),
            " / ".join(_f(get(x, "mean_acceptance_length")) for x in (a, p)),
            " / ".join(_f(get(x, "drafted_per_accepted")) for x in (a, p)),
            " / ".join(f"{a['batch'][str(b)]['est_speedup']:.2f}" for b in bs),
            " / ".join(f"{a['batch'][str(b)]['drafted_per_step']:.2f}" for b in bs)]) + " |")
    return "\n".join(rows)
