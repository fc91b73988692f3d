"""``specdraft workloads`` / ``python -m specdraft.workloads``: list, show, write, validate."""

from __future__ import annotations

import json
import sys
from typing import Sequence

from specdraft.cli import HelpFormatter
from specdraft.cli import parser as cli_parser
from specdraft.workloads.records import dump_jsonl, dumps_jsonl, load_jsonl
from specdraft.workloads.registry import WORKLOADS, generate, generate_all


def _short(text: str, width: int) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= width else text[: width - 3] + "..."


def _show(records: list[dict], width: int) -> None:
    for r in records:
        head = f"{r['id']}  turn={r['turn']}"
        if r["session"]:
            head += f" session={r['session']}"
        if r["history"]:
            head += f" history={r['history']}"
        print(f"{head}  max_tokens={r['max_tokens']} temperature={r['temperature']}")
        if "messages" in r:
            for m in r["messages"]:
                print(f"  [{m['role']}] {_short(m['content'], width)}")
        else:
            print(f"  [prompt] {_short(r['prompt'], width)}")
        print(f"  meta: {_short(json.dumps(r['meta'], ensure_ascii=False), width)}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = cli_parser("specdraft workloads", "benchmark workloads from data that installs offline")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="list the workloads", formatter_class=HelpFormatter)
    sp = sub.add_parser("show", help="print a few records of a workload", formatter_class=HelpFormatter)
    sp.add_argument("name", choices=list(WORKLOADS), help="the workload")
    sp.add_argument("-n", type=int, default=3, help="records to show")
    sp.add_argument("--seed", type=int, default=0, help="generator seed")
    sp.add_argument("--width", type=int, default=300, help="characters shown per message")
    sp.add_argument("--full", action="store_true", help="print the JSONL records instead")
    wp = sub.add_parser("write", help="write a workload (or 'all') as JSONL", formatter_class=HelpFormatter)
    wp.add_argument("name", choices=[*WORKLOADS, "all"], help="the workload, or all")
    wp.add_argument("-n", type=int, required=True, help="requests (per workload for 'all')")
    wp.add_argument("--seed", type=int, default=0, help="generator seed")
    wp.add_argument("--out", required=True, help="output .jsonl file")
    vp = sub.add_parser("validate", help="check a workload JSONL file against the schema",
                        formatter_class=HelpFormatter)
    vp.add_argument("file", help="the JSONL file")
    args = ap.parse_args(list(sys.argv[1:] if argv is None else argv))

    try:
        if args.cmd == "list":
            for w in WORKLOADS.values():
                print(f"{w.name:<14} {w.description}")
                print(f"{'':<14} data: {w.source}")
            return 0
        if args.cmd == "show":
            recs = generate(args.name, args.n, args.seed)
            if args.full:
                sys.stdout.write(dumps_jsonl(recs))
            else:
                _show(recs, args.width)
            return 0
        if args.cmd == "write":
            recs = (generate_all(args.n, args.seed) if args.name == "all"
                    else generate(args.name, args.n, args.seed))
            path = dump_jsonl(recs, args.out)
            print(f"wrote {len(recs)} records to {path}")
            return 0
        if args.cmd == "validate":
            recs = load_jsonl(args.file)
            counts: dict[str, int] = {}
            for r in recs:
                counts[r["workload"]] = counts.get(r["workload"], 0) + 1
            sessions = len({r["session"] for r in recs if r["session"]})
            print(f"{args.file}: {len(recs)} valid records, {sessions} sessions; "
                  + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
            return 0
    except (ValueError, KeyError, RuntimeError) as e:
        print(f"specdraft workloads: {e}", file=sys.stderr)
        return 1
    return 2
