"""``specdraft replay``: exact acceptance of every drafting method on recorded greedy traces.

The command line: reads the traces, replays the methods (``specdraft.replay.sweep``), prints the
table and writes the JSON results, the chart and optionally the Markdown table.
"""

from __future__ import annotations

import json
import sys

from specdraft.cli import parser as cli_parser
from specdraft.proposers.controller import COST_MODELS
from specdraft.replay.methods import DEFAULT_METHODS, METHODS
from specdraft.replay.plot import plot_replay
from specdraft.replay.sweep import default_cost_model, replay
from specdraft.replay.tables import format_replay_table, markdown_table
from specdraft.replay.traces import load_trace
from specdraft.results import write_results


def load_cost_model(spec: str | None) -> tuple[str | None, object]:
    """(name, model) of a preset name, or of NAME=FILE.json (a list of [tokens, relative cost]
    points or a dict of the cost model's parameters); (None, None): the trace's default."""
    if spec is None or spec in COST_MODELS:
        return spec, spec
    if "=" in spec:
        name, path = spec.split("=", 1)
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return name, data if isinstance(data, dict) else [tuple(p) for p in data]
    raise SystemExit(f"--cost-model {spec!r}: accepted {', '.join(COST_MODELS)} or NAME=FILE.json")


def main(argv=None) -> int:
    ap = cli_parser("specdraft replay", __doc__.split("\n\n")[0])
    ap.add_argument("--traces", required=True, nargs="+",
                    help="trace JSONL file(s) from specdraft record (.jsonl or .jsonl.gz)")
    ap.add_argument("--methods", nargs="+", default=DEFAULT_METHODS, choices=list(METHODS),
                    metavar="METHOD", help=f"methods to replay, of: {' '.join(METHODS)}")
    ap.add_argument("--max-draft", type=int, default=16, help="draft budget per step")
    ap.add_argument("--cost-model", help=f"verification cost model: a preset ({', '.join(COST_MODELS)}) "
                    "or NAME=FILE.json; default: the GPU preset for the trace's model size")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64],
                    help="batch sizes to estimate speedup at; counts are the first's")
    ap.add_argument("--specdraft-options", default="{}", metavar="JSON",
                    help='options for every specdraft method, e.g. \'{"max_waste": 64}\' (ablations)')
    ap.add_argument("--fixed-width", action="store_true",
                    help="verify every decoding row --max-draft wide whatever its draft's length "
                    "(vLLM 0.34 without adaptive verification; chains padded with the last token)")
    ap.add_argument("--json", required=True, help="where to write the results")
    ap.add_argument("--png", help="chart path (default: next to --json)")
    ap.add_argument("--markdown", help="also write the table as Markdown here")
    args = ap.parse_args(argv)
    if args.max_draft < 1:
        ap.error(f"--max-draft must be >= 1, got {args.max_draft}")
    if min(args.batches) < 1:
        ap.error(f"--batches must be >= 1, got {args.batches}")
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
    name, spec = load_cost_model(args.cost_model)
    name = name or default_cost_model(records)
    print(f"[replay] {len(records)} requests, {sum(len(r['output_token_ids']) for r in records):,} "
          f"output tokens, cost model {name}, batches {' '.join(map(str, args.batches))}, "
          f"methods: {' '.join(args.methods)}", flush=True)
    from specdraft.progress import Progress
    workloads = len({r["workload"] for r in records})
    with Progress(len(args.methods) * workloads, "[replay]", "workload") as bar:
        out = replay(records, args.methods, args.max_draft, spec or name, args.batches,
                     progress=bar.say, specdraft_options=sd_opts, advance=bar.advance,
                     fixed_width=args.fixed_width)
    out["settings"]["cost_model"] = name
    print(format_replay_table(out))
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(markdown_table(out) + "\n")
        print(f"[replay] markdown table: {args.markdown}")
    write_results(args.json, out, plot=lambda png: plot_replay(out, png), png=args.png,
                  tag="replay")
    return 0
