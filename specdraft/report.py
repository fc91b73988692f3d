"""``specdraft report``: the tables in BENCHMARKS.md and README.md, generated from the committed
result files.

A generated block in a Markdown file looks like this::

    <!-- generated: live benchmarks/results/bench-smollm2-135m.json -->
    ... (replaced by `specdraft report`) ...
    <!-- end generated -->

``specdraft report`` rewrites every block from the JSON it names; ``--check`` changes nothing and
exits 1 when a block differs from what its JSON gives (a test runs it, so typed edits to a
generated table fail). Kinds: ``live`` (``specdraft bench`` / ``demo`` results), ``demo`` (what
``specdraft demo`` prints first, from a demo result: README's first screen), ``replay`` (the full
``specdraft replay`` table), ``replay-summary`` (the default strategy against arctic) and
``overhead`` (``specdraft overhead`` results).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from specdraft.cli import parser as cli_parser

FILES = ("BENCHMARKS.md", "README.md")  # what `specdraft report` regenerates by default
BLOCK = re.compile(r"(<!-- generated: ([\w-]+) (\S+) -->\n)(.*?)(<!-- end generated -->)", re.S)


def _fmt(v, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def live_table(result: dict) -> str:
    """Summary per method, then the rounds one by one (tokens/s; ratio to no speculation). A
    demo result: these for each of its workloads, then its notes (rounds run again, noise)."""
    if result.get("workloads"):
        from specdraft.demo import demo_notes

        parts = [f"**{w}**: {wl['about']}.\n\n" + live_table(dict(result, table=wl["table"],
                                                                     workloads=None))
                 for w, wl in result["workloads"].items()]
        notes = demo_notes(result)
        return "\n".join(parts) + ("".join(f"\n{n}.\n" for n in notes))
    table = result["table"]
    plan = result.get("memory_plan") or {}
    lines = ["| method | tokens/s (median) | x, fastest rounds | x, median of rounds | x, round 1 (cold) "
             "| TTFT ms | TPOT ms | decode x | x suffix: end to end / decode "
             "| MAL | drafts | drafted | accepted | drafted / accepted | replayed: drafted / accepted "
             "| identical to none |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for m, t in table.items():
        per_acc = t["drafted_tokens"] / t["accepted_tokens"] if t["accepted_tokens"] else None
        vs = t.get("vs_suffix") or {}
        rep = t.get("replayed")
        replayed = f"{rep['drafted_tokens']} / {rep['accepted_tokens']}" if rep else "-"
        ident = ("yes" if t["identical_to_no_spec"] else
                 f"{t['identical_fraction']:.0%} of requests" if "identical_fraction" in t else "NO")
        lines.append(f"| {m} | {t['tokens_per_s_median']:.1f} | {t['speedup_ratio_of_min']:.2f} | "
                     f"{t['speedup_median_per_round']:.2f} | {t['cold_speedup']:.2f} | "
                     f"{_fmt(t.get('ttft_ms_median'), '.0f')} | {_fmt(t.get('tpot_ms_median'), '.1f')} | "
                     f"{_fmt(t.get('decode_speedup_median_per_round'))} | "
                     f"{_fmt(vs.get('tokens_per_s'))} / {_fmt(vs.get('decode'))} | "
                     f"{_fmt(t['mean_acceptance_length'])} | {t['drafts']} | {t['drafted_tokens']} | "
                     f"{t['accepted_tokens']} | {_fmt(per_acc)} | {replayed} | {ident} |")
    methods = list(table)
    lines += ["", "| round | " + " | ".join(methods) + " |", "|---" * (len(methods) + 1) + "|"]
    for r in range(len(table[methods[0]]["rounds"])):
        cells = []
        for m in methods:
            p = table[m]["rounds"][r]
            cells.append(f"{p['tokens_per_s']:.1f} tok/s, {p['speedup']:.2f}x, MAL "
                         f"{_fmt(p['mean_acceptance_length'])}, accepted {p['accepted_tokens']}")
        lines.append(f"| {r + 1} | " + " | ".join(cells) + " |")
    flagged = [m for m, t in table.items() if t.get("rounds_disagree")]
    notes = []
    if plan:
        notes.append(f"engines {plan['mode']}")
    if flagged:
        notes.append("rounds disagree (noisy machine) for " + ", ".join(flagged))
    for m, t in table.items():
        if t.get("proposer_share") is not None:
            notes.append(f"{m}'s propose: {t['proposer_share']:.2%} of the runs' wall time")
    if notes:
        lines += ["", f"({'; '.join(notes)}.)"]
    steps = [(m, t["steps"]) for m, t in table.items() if t.get("steps")]
    if steps:  # runs from before the engine's steps were timed have none
        lines += ["", "| where the time went (median of rounds) | engine steps | seconds | decode "
                  "steps | their seconds | tokens per decode step | requests per decode step | ms "
                  "per decode step | steps that prefill | their seconds |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for m, st in steps:
            lines.append(f"| {m} | {st['steps']:.0f} | {st['seconds']:.1f} | {st['decode_steps']:.0f} "
                         f"| {st['decode_seconds']:.1f} | {_fmt(st['decode_tokens_per_step'], '.1f')} "
                         f"| {_fmt(st['decode_requests_per_step'], '.1f')} "
                         f"| {_fmt(st['decode_ms_per_step'], '.1f')} | {st['prefill_steps']:.0f} "
                         f"| {st['prefill_seconds']:.1f} |")
    return "\n".join(lines) + "\n"


def demo_screen(result: dict) -> str:
    """The demo's title line, summary table and warnings, as it prints them, in a code block."""
    from specdraft.demo import demo_screen as screen

    return "```\n" + screen(result) + "\n```\n"


def replay_table(result: dict) -> str:
    from specdraft.replay import markdown_table

    s = result["settings"]
    return (markdown_table(result) + f"\n\n(est x: cost model `{s['cost_model']}`, batches "
            f"{', '.join(map(str, s['batches']))}; draft budget {s['max_draft']}; "
            f"{s['requests']} requests.)\n")


def replay_summary(result: dict) -> str:
    from specdraft.replay import summary_table

    return summary_table(result) + "\n"


def overhead_table(result: dict) -> str:
    """Microseconds per request-step by method and batch, and specdraft's ratios to the peers."""
    from specdraft.overhead import format_overhead_table

    return format_overhead_table(result) + "\n"


def propose_034_table(result: dict) -> str:
    """benchmarks/vllm034_overhead.py: host time of each adapter's propose by batch."""
    lines = ["| requests in flight (most) | mean rows a step | steps | 0.32 propose, us/step | "
             "0.34 propose, us/step | 0.34 / 0.32 | same drafts |",
             "|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        a, b = r["us_per_step_0.32"], r["us_per_step_0.34"]
        lines.append(f"| {r['batch']} | {r['rows_per_step']:.1f} | {r['steps']} | {a:.0f} | "
                     f"{b:.0f} | {b / a:.1f}x | {'yes' if r['same_drafts'] else 'no'} |")
    return "\n".join(lines) + "\n"


def host_sync_table(result: dict) -> str:
    """integration_tests/gpu/host_sync_cost.py: the 0.34 speculator's device traffic by rows."""
    wait = any("wait_us" in r for r in result["rows"])
    head = "| rows | device to host (gather + copy), us | host to device (drafts), us |"
    lines = [head + (" wait behind a busy device, us |" if wait else ""),
             "|---|---|---|" + ("---|" if wait else "")]
    for r in result["rows"]:
        lines.append(f"| {r['rows']} | {r['d2h_us']:.0f} | {r['h2d_us']:.0f} |"
                     + (f" {r['wait_us']:.0f} |" if wait else ""))
    return (f"{result['device']}, torch {result['torch']}, K = {result['rows'][0]['k']}, "
            f"max_model_len {result['max_model_len']}, {result['max_num_seqs']} slots\n\n"
            + "\n".join(lines) + "\n")


def served_table(result: dict) -> str:
    """``specdraft served``: per load and method, vLLM's latency percentiles and throughput
    (medians over repeats), MAL and draft tokens scored / accepted from vLLM's counters, and
    throughput against no speculation."""
    import statistics

    cells: dict = {}
    for r in result["runs"]:
        cells.setdefault((r["load"], r["method"]), []).append(r)

    def med(runs, key):
        values = [r[key] for r in runs if r.get(key) is not None]
        return statistics.median(values) if values else None

    def counted(runs, name):
        return statistics.median(r["counters"].get(name, 0.0) for r in runs)

    lines = ["| load | method | TTFT p50 / p99 ms | TPOT p50 / p99 ms | ITL p50 / p99 ms | "
             "output tok/s | x none | MAL | drafted / accepted | runs |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for load in result["loads"]:
        base = med(cells.get((load, "none"), []), "output_throughput")
        for (ld, method), runs in cells.items():
            if ld != load:
                continue
            tput = med(runs, "output_throughput")
            mal = med(runs, "mal")
            ratio = f"{tput / base:.2f}" if base else "-"
            drafted = ("-" if mal is None else
                       f"{counted(runs, 'vllm:spec_decode_num_draft_tokens'):.0f} / "
                       f"{counted(runs, 'vllm:spec_decode_num_accepted_tokens'):.0f}")
            lines.append(
                f"| {load} | {method} | {med(runs, 'median_ttft_ms'):.0f} / "
                f"{med(runs, 'p99_ttft_ms'):.0f} | {med(runs, 'median_tpot_ms'):.1f} / "
                f"{med(runs, 'p99_tpot_ms'):.1f} | {med(runs, 'median_itl_ms'):.1f} / "
                f"{med(runs, 'p99_itl_ms'):.1f} | {tput:.1f} | {ratio} | "
                f"{'-' if mal is None else f'{mal:.2f}'} | {drafted} | {len(runs)} |")
    return "\n".join(lines) + "\n"


KINDS = {"live": live_table, "demo": demo_screen, "replay": replay_table, "replay-summary": replay_summary,
         "overhead": overhead_table, "vllm034-propose": propose_034_table,
         "host-sync": host_sync_table, "served": served_table}


def render(text: str, root: Path) -> str:
    def one(m: re.Match) -> str:
        kind, rel = m.group(2), m.group(3)
        if kind not in KINDS:
            raise ValueError(f"generated block of unknown kind {kind!r} (known: {', '.join(KINDS)})")
        with open(root / rel, encoding="utf-8") as f:
            body = KINDS[kind](json.load(f))
        return m.group(1) + body + m.group(5)

    return BLOCK.sub(one, text)


def main(argv=None) -> int:
    ap = cli_parser("specdraft report", __doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", default=list(FILES), help="Markdown files")
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block is stale")
    args = ap.parse_args(argv)
    stale = []
    for name in args.files:
        path = Path(name)
        text = path.read_text(encoding="utf-8")
        new = render(text, path.resolve().parent)
        blocks = len(BLOCK.findall(text))
        if new != text:
            stale.append(name)
            if not args.check:
                path.write_text(new, encoding="utf-8")
        print(f"[report] {name}: {blocks} generated blocks, "
              f"{'stale' if new != text else 'up to date'}{'' if args.check or new == text else ' -> rewritten'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
