"""``specdraft demo``: vLLM on CPU with no speculation, vLLM's ``ngram`` and ``suffix``, and specdraft.

Runs a few real prompts (editing a function from the Python standard library, a two-turn chat,
an open question) through one engine per method, interleaved round by round, and prints a
side-by-side table: tokens per second, speedup against no speculation (ratio of the fastest
rounds and median of per-round ratios), mean acceptance length, drafted and accepted tokens from
vLLM's own counters, and whether each output is token-identical to no speculation.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import textwrap


def demo_conversations() -> list[dict]:
    """Chat requests; a ``followup`` turn is sent after the first answer is known."""
    import json as json_module
    src = textwrap.dedent(inspect.getsource(json_module.dumps))
    code = textwrap.dedent(inspect.getsource(textwrap.TextWrapper._split_chunks))
    return [
        {"name": "code_edit", "messages": [{"role": "user", "content":
            "Add type hints to this Python function and return the whole function.\n\n"
            f"```python\n{src.strip()}\n```"}]},
        {"name": "code_explain", "messages": [{"role": "user", "content":
            "Rewrite this method with a docstring, keeping the code the same.\n\n"
            f"```python\n{code.strip()}\n```"}]},
        {"name": "chat_2turns", "messages": [{"role": "user", "content":
            "Give me three tips for writing readable Python code."}],
         "followup": "Repeat your three tips, each in one short sentence."},
        {"name": "open_question", "messages": [{"role": "user", "content":
            "Why is the sky blue? Answer in a short paragraph."}]},
    ]


def build_prompts(tokenizer, llm_none, max_tokens: int, progress) -> tuple[list[str], list[list[int]]]:
    from specdraft.live import chat_prompt, generate
    names, prompts, followups = [], [], []
    for conv in demo_conversations():
        names.append(conv["name"])
        prompts.append(chat_prompt(tokenizer, conv["messages"]))
        followups.append(conv)
    # the second turn needs the first answer: greedy, so every method would produce the same one
    first = generate(llm_none, prompts, max_tokens).outputs
    for i, conv in enumerate(followups):
        if "followup" in conv:
            answer = tokenizer.decode(first[i], skip_special_tokens=True)
            msgs = conv["messages"] + [{"role": "assistant", "content": answer},
                                       {"role": "user", "content": conv["followup"]}]
            names.append(conv["name"] + "/turn2")
            prompts.append(chat_prompt(tokenizer, msgs))
    progress(f"[demo] {len(prompts)} prompts, {sum(map(len, prompts))} prompt tokens")
    return names, prompts


def demo_title(settings: dict, names: list[str], mode: str) -> str:
    """The line above the demo's table: what ran (``settings``: the demo's arguments)."""
    return (f"model {settings['model']}, {len(names)} prompts ({', '.join(names)}), max "
            f"{settings['max_tokens']} tokens, k={settings['num_speculative_tokens']}, "
            f"{settings['rounds']} interleaved rounds after {settings['warmup_rounds']} untimed "
            f"({mode}), caches cleared before every run, {settings['dtype']}, CPU")


def demo_screen(result: dict) -> str:
    """What README shows of a demo result (its JSON): the title, the summary table and any
    rounds-disagree warning, as ``specdraft demo`` prints them."""
    from specdraft.bench import format_live_summary, format_rounds_warnings

    table = result["table"]
    return "\n".join([demo_title(result["settings"], result["prompts"], result["memory_plan"]["mode"]),
                      *format_live_summary(table), *format_rounds_warnings(table)])


def main(argv=None) -> int:
    from specdraft import live
    from specdraft.bench import add_run_arguments
    ap = argparse.ArgumentParser(prog="specdraft demo", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m",
                    help="a name from `specdraft models list` or a model folder")
    add_run_arguments(ap)
    ap.add_argument("--max-tokens", type=int, default=160, help="output tokens per request")
    ap.add_argument("--one-at-a-time", action="store_true",
                    help="run engines one at a time even when they fit in memory together")
    ap.add_argument("--json", default="results/demo.json", help="where the results go")
    args = ap.parse_args(argv)

    def progress(msg):
        print(msg, flush=True)

    from specdraft.bench import (format_live_table, format_steps_table, plot_live, run_interleaved,
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
    with live.engine_log(log_path) as say:
        engines = start_engines(path, args.methods, args.num_speculative_tokens, say, plan,
                                max_model_len=2048, max_num_seqs=8, dtype=args.dtype)
        try:
            with engines.engine("none") as llm_none:  # the second turns need the first answers
                names, prompts = build_prompts(llm_none.get_tokenizer(), llm_none,
                                               args.max_tokens, say)
            runs = run_interleaved(engines, prompts, args.max_tokens, args.rounds, say,
                                   methods=args.methods, warmup_rounds=args.warmup_rounds,
                                   bar="[demo] runs")
        except live.MemoryPlanError as e:
            say(f"specdraft demo: {e}")
            return 2
        finally:
            engines.close()
    table = summarize(runs, k=args.num_speculative_tokens)
    title = demo_title(vars(args), names, plan.mode)
    print()
    print(title)
    print(format_live_table(table))
    if steps := format_steps_table(table):
        print(steps)
    write_results(args.json, {"settings": vars(args), "memory_plan": vars(plan), "prompts": names,
                              "table": table},
                  plot=lambda png: plot_live(table, png, title), say=progress, tag="demo")
    # float32 must be token-identical to no speculation; bfloat16 only reports the share
    ok = args.dtype != "float32" or all(t["identical_to_no_spec"] for t in table.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
