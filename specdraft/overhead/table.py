"""``specdraft overhead``'s results as a Markdown table (also ``specdraft report``'s)."""

from __future__ import annotations

from specdraft.overhead.methods import METHODS


def _fmt(v, nd=2):
    return "-" if v is None else (f"{v:,.{nd}f}" if isinstance(v, float) else f"{v:,}")


def format_overhead_table(report: dict) -> str:
    """Markdown table: us per request-step by method and batch, and specdraft's ratios."""
    lines = ["| batch | specdraft | (native core) | arctic | ngram | specdraft / arctic | "
             "specdraft / ngram | whole run, mean (specdraft / arctic / ngram) | "
             "whole run, per output token (specdraft / arctic / ngram) | "
             "tokens per step (specdraft / arctic / ngram) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for batch, b in report["batches"].items():
        r, q = b["results"], b["ratios"]

        def us(name, key="us_per_request_step_min"):
            return _fmt(r.get(name, {}).get(key))

        def ratio(peer):
            x = q.get(f"specdraft_over_{peer}", {})
            return f"{_fmt(x.get('ratio_of_minimums'))} ({_fmt(x.get('median_of_block_ratios'))})"

        lines.append(f"| {batch} | {us('specdraft')} | "
                     f"{us('specdraft', 'native_core_us_per_request_step_min')} | {us('arctic')} | "
                     f"{us('ngram')} | {ratio('arctic')} | {ratio('ngram')} | "
                     f"{' / '.join(us(m, 'us_per_request_step_mean') for m in METHODS)} | "
                     f"{' / '.join(us(m, 'us_per_output_token_mean') for m in METHODS)} | "
                     f"{' / '.join(us(m, 'tokens_per_step') for m in METHODS)} |")
    lines.append("")
    lines.append("us per request-step, fastest block of each method; ratios: of the fastest "
                 "blocks (median of interleaved block ratios in brackets); whole run: all the "
                 "run's time over all its request-steps, the steps that start and finish requests "
                 "included; per output token: the same time over the tokens the verifier emitted "
                 "(a method that drafts better takes fewer steps per token)")
    return "\n".join(lines)
