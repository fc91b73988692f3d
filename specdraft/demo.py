"""``specdraft demo``: vLLM on CPU with no speculation, vLLM ``suffix`` and specdraft, on two
workloads: multi-turn code edits and fresh chat.

Multi-turn edits are where specdraft's design should matter: each turn asks for another edit of
the function the previous turn returned, and is sent only once that turn has finished, so the
earlier answers come back (in the prompt, and in the global cache of earlier outputs). On fresh
chat (new questions, nothing earlier to copy) little can help. Both run through one engine per
method, interleaved round by round, and one table shows them: tokens per second, speed against
no speculation and against vLLM ``suffix``, mean acceptance length, drafted and accepted tokens
from vLLM's own counters, and whether each output is token-identical to no speculation. A round
that disagrees with the others beyond the margins is run once more; if the rounds still
disagree, a line says the machine was noisy and how close a ratio must be to count as a tie.
"""

from __future__ import annotations

import argparse
import inspect
import math
import os
import statistics
import sys
import textwrap

DEFAULT_METHODS = ["none", "vllm-suffix", "specdraft"]  # vllm-ngram left out: a shorter run

# Multi-turn edits: per session a function from the Python standard library (the source of the
# Python that runs the demo) and the name its third turn renames.
EDIT_TURNS = (
    "Add type hints to this Python function and return the whole function.\n\n"
    "```python\n{source}\n```",
    "Now add a docstring to the function you returned, and return the whole function.",
    "Now rename `{old}` to `{new}` everywhere in that function, and return the whole function.",
)
FRESH_CHAT = (
    "Why is the sky blue? Answer in a short paragraph.",
    "Give me three tips for writing readable Python code.",
    "What is the difference between a process and a thread?",
    "Suggest a name for a bakery and explain it in two sentences.",
)
ABOUT = {
    "multi_turn_edit": "2 sessions x 3 turns (type hints, docstring, rename) on standard-library "
                       "functions, each turn sent once the one before has finished, with its answer",
    "fresh_chat": "4 new questions, sent at once",
}


def edit_sessions() -> list[tuple[str, list[str]]]:
    """(name, the user's message of each turn) per multi-turn editing session."""
    import fnmatch
    import shlex

    out = []
    for fn, old, new in ((shlex.quote, "s", "text"), (fnmatch.filter, "result", "matches")):
        source = textwrap.dedent(inspect.getsource(fn)).strip()
        out.append((f"{fn.__module__}.{fn.__name__}",
                    [t.format(source=source, old=old, new=new) for t in EDIT_TURNS]))
    return out


def build_workloads(tokenizer, llm_none, max_tokens: int, progress) -> dict[str, dict]:
    """{workload: {"names", "prompts", "waves"}}: fresh chat's prompts, sent at once, and the
    edit sessions' turns, turn by turn (a wave per turn). A later turn's prompt holds the
    earlier turns and their answers: greedy, so every method gives the same answers, and no
    speculation's are used (run here, untimed, each turn in one burst as the timed runs send it)."""
    from specdraft.live import chat_prompt, generate

    sessions = edit_sessions()
    convs: list[list[dict]] = [[] for _ in sessions]
    names, prompts, waves = [], [], []
    for turn in range(len(EDIT_TURNS)):
        wave = []
        for conv, (name, messages) in zip(convs, sessions):
            conv.append({"role": "user", "content": messages[turn]})
            wave.append(len(prompts))
            names.append(f"{name}/turn{turn + 1}")
            prompts.append(chat_prompt(tokenizer, conv))
        waves.append(wave)
        if turn + 1 < len(EDIT_TURNS):
            answers = generate(llm_none, [prompts[i] for i in wave], max_tokens).outputs
            for conv, answer in zip(convs, answers):
                conv.append({"role": "assistant",
                             "content": tokenizer.decode(answer, skip_special_tokens=True)})
    chat = [chat_prompt(tokenizer, [{"role": "user", "content": q}]) for q in FRESH_CHAT]
    out = {"multi_turn_edit": {"names": names, "prompts": prompts, "waves": waves},
           "fresh_chat": {"names": [f"chat{i + 1}" for i in range(len(chat))], "prompts": chat,
                          "waves": None}}
    for w, b in out.items():
        progress(f"[demo] {w}: {len(b['prompts'])} prompts, {sum(map(len, b['prompts']))} prompt "
                 f"tokens")
    return out


def _spreads(t: dict) -> dict[str, float]:
    """The spreads of a method's rounds that are beyond the margins (bench.summarize's rule):
    {"speed": ..., "accepted tokens": ...}."""
    from specdraft.bench import COUNT_MARGIN, SPEED_MARGIN

    out = {}
    if t["speedup_spread"] > SPEED_MARGIN:  # no speculation's is 0: its speedups are all 1
        out["speed"] = t["speedup_spread"]
    if t["accepted_spread"] > COUNT_MARGIN:
        out["accepted tokens"] = t["accepted_spread"]
    return out


def rounds_to_rerun(table: dict) -> list[int]:
    """The rounds (0-based) to run once more: for each method whose rounds disagree beyond the
    margins, the round farthest from the median of its rounds (in speed against no speculation,
    or in accepted tokens when only those disagree)."""
    out = set()
    for m, t in table.items():
        if not t["rounds_disagree"]:
            continue
        key = "speedup" if m != "none" and "speed" in _spreads(t) else "accepted_tokens"
        vals = [max(p[key], 1e-9) for p in t["rounds"]]
        mid = statistics.median(vals)
        out.add(max(range(len(vals)), key=lambda i: abs(math.log(vals[i] / mid))))
    return sorted(out)


def rerun_record(workload: str, rnd: int, table: dict) -> dict:
    """What a re-run replaced: the round, the methods whose rounds disagreed, the round's figures."""
    return {"workload": workload, "round": rnd + 1,
            "disagreeing": {m: _spreads(t) for m, t in table.items() if t["rounds_disagree"]},
            "replaced": {m: {k: t["rounds"][rnd][k] for k in ("tokens_per_s", "speedup",
                                                                "accepted_tokens")}
                         for m, t in table.items()}}


def _pct(spreads: dict[str, float]) -> str:
    return " and ".join(f"{v:.0%} in {k}" for k, v in spreads.items())


def demo_notes(result: dict) -> list[str]:
    """One line per re-run round, and one per method whose rounds still disagree after it:
    the machine was noisy, and ratios within that spread are ties."""
    lines = []
    for rr in result.get("reruns", []):
        why = "; ".join(f"{m} {_pct(s)}" for m, s in rr["disagreeing"].items())
        lines.append(f"round {rr['round']} of {rr['workload']} was run once more (rounds differed "
                     f"beyond the margins: {why}); the table has the new round")
    for w, wl in result["workloads"].items():
        for m, t in wl["table"].items():
            if t["rounds_disagree"] and (s := _spreads(t)):
                n = max(s.values())
                lines.append(f"rounds of {m} on {w} differ by {_pct(s)} even after a re-run: this "
                             f"machine was noisy; treat ratios within {n:.0%} as ties")
    return lines


def demo_title(settings: dict, workloads: dict, mode: str) -> list[str]:
    """The lines above the demo's table: what ran (``settings``: the demo's arguments)."""
    return [f"model {settings['model']}, max {settings['max_tokens']} tokens a request, "
            f"k={settings['num_speculative_tokens']}, {settings['rounds']} interleaved rounds after "
            f"{settings['warmup_rounds']} untimed ({mode}), caches cleared before every run, "
            f"{settings['dtype']}, CPU"] + [f"{w}: {wl['about']}" for w, wl in workloads.items()]


def format_demo_summary(workloads: dict) -> list[str]:
    """One table: ``bench``'s summary line of every method on every workload, the workload first."""
    from specdraft.bench import format_live_summary

    width = max(len("workload"), *map(len, workloads))
    lines: list[str] = []
    for w, wl in workloads.items():
        rows = format_live_summary(wl["table"])
        if not lines:
            lines = [f"{'workload':<{width}} {rows[0]}", "-" * (width + 1 + len(rows[1]))]
        lines += [f"{w:<{width}} {row}" for row in rows[2:]]
    return lines


def demo_screen(result: dict) -> str:
    """What README shows of a demo result (its JSON): the title, the one table and the notes on
    re-run and noisy rounds, as ``specdraft demo`` prints them last."""
    return "\n".join([*demo_title(result["settings"], result["workloads"], result["memory_plan"]["mode"]),
                      *format_demo_summary(result["workloads"]), *demo_notes(result)])


SHORT = {"multi_turn_edit": "edits", "fresh_chat": "chat"}  # the chart's labels


def plot_demo(result: dict, png: str) -> None:
    """``bench``'s chart of every method on every workload (a bar each), from a demo result."""
    from specdraft.bench import plot_live

    merged = {f"{m.removeprefix('vllm-')}\n{SHORT.get(w, w)}": t
              for w, wl in result["workloads"].items() for m, t in wl["table"].items()}
    title = demo_title(result["settings"], result["workloads"], result["memory_plan"]["mode"])
    plot_live(merged, png, " / ".join(title), rotation=0)


def main(argv=None) -> int:
    from specdraft import live
    from specdraft.bench import add_run_arguments
    ap = argparse.ArgumentParser(prog="specdraft demo", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m",
                    help="a name from `specdraft models list` or a model folder")
    add_run_arguments(ap)
    ap.set_defaults(methods=DEFAULT_METHODS)
    ap.add_argument("--max-tokens", type=int, default=128, help="output tokens per request")
    ap.add_argument("--one-at-a-time", action="store_true",
                    help="run engines one at a time even when they fit in memory together")
    ap.add_argument("--json", default="results/demo.json", help="where the results go")
    args = ap.parse_args(argv)

    def progress(msg):
        print(msg, flush=True)

    from specdraft.bench import (Workload, format_live_table, format_steps_table, run_interleaved,
                                 start_engines, summarize)
    from specdraft.models import resolve_model
    from specdraft.results import write_results
    if why := live.methods_error(args.methods):
        ap.error(why)
    path = resolve_model(args.model, progress)
    progress(f"[demo] model {args.model}: {path}")
    try:
        plan = live.plan_engines(path, len(args.methods), args.dtype)
    except live.MemoryPlanError as e:
        print(f"specdraft demo: {e}", file=sys.stderr)
        return 2
    if args.one_at_a_time:
        plan.mode = "one-at-a-time"
    progress(f"[demo] {plan.describe()}")
    log_path = os.path.splitext(args.json)[0] + ".log"
    progress(f"[demo] vLLM's output goes to {log_path}")
    k = args.num_speculative_tokens
    reruns: list[dict] = []
    with live.engine_log(log_path) as say:
        engines = start_engines(path, args.methods, k, say, plan,
                                max_model_len=2048, max_num_seqs=8, dtype=args.dtype)
        try:
            with engines.engine("none") as llm_none:  # later turns need the earlier answers
                built = build_workloads(llm_none.get_tokenizer(), llm_none, args.max_tokens, say)
            work = {w: Workload(b["prompts"], args.max_tokens, b["waves"]) for w, b in built.items()}
            runs = run_interleaved(engines, [], None, args.rounds, say, methods=args.methods,
                                   warmup_rounds=args.warmup_rounds, bar="[demo] runs",
                                   workloads=work)
            tables = {w: summarize(runs[w], k=k) for w in work}
            for w in work:  # a round beyond the margins: once more, every method, same order
                again = rounds_to_rerun(tables[w])
                for r in again:
                    say(f"[demo] {w}: round {r + 1} disagrees with the others; running it once more")
                    reruns.append(rerun_record(w, r, tables[w]))
                    new = run_interleaved(engines, [], None, 1, say, methods=args.methods,
                                          workloads={w: work[w]}, first_round=r)[w]
                    for m in args.methods:
                        runs[w][m][r] = new[m][0]
                if again:
                    tables[w] = summarize(runs[w], k=k)
        except live.MemoryPlanError as e:
            say(f"specdraft demo: {e}")
            return 2
        finally:
            engines.close()
    workloads = {w: {"about": ABOUT[w], "prompts": built[w]["names"], "waves": built[w]["waves"],
                     "table": tables[w]} for w in work}
    result = {"settings": vars(args), "memory_plan": vars(plan), "workloads": workloads,
              "reruns": reruns}
    for w, wl in workloads.items():
        print(f"\n{w}: {wl['about']}")
        print(format_live_table(wl["table"]))
        if steps := format_steps_table(wl["table"]):
            print(steps)
    print()
    print(demo_screen(result))
    write_results(args.json, result, plot=lambda png: plot_demo(result, png), say=progress,
                  tag="demo")
    # float32 must be token-identical to no speculation; bfloat16 only reports the share
    ok = args.dtype != "float32" or all(t["identical_to_no_spec"] for wl in workloads.values()
                                        for t in wl["table"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
