"""What ceiling.py, decode_sweep.py and warm_start.py share: the settings they price, a
workload's requests as the bench runs them, and one replay on the live engine's schedule priced
by a bench's measured passes, decode apart."""
import json
import os

from specdraft.bench import measured_cost, merged_pass_costs, request_limits, select_requests
from specdraft.replay import EngineSchedule, replay_engine


# (workload, requests in flight, the seed-2 bench whose passes price it, the CPU curve the vLLM
# adapter picks for its dtype)
SETTINGS = [("agentic", 4, "agentic-c4-bf16", "cpu-bf16"), ("agentic", 4, "agentic-c4-fp32", "cpu-fp32"),
            ("code_edit", 4, "code-edit-c4-bf16", "cpu-bf16"), ("code_edit", 4, "code-edit-c4-fp32", "cpu-fp32"),
            ("chat", 4, "chat-c4-bf16", "cpu-bf16"), ("agentic", 16, "agentic-c16-bf16", "cpu-bf16"),
            ("code_edit", 16, "code-edit-c16-bf16", "cpu-bf16"), ("chat", 16, "chat-c16-bf16", "cpu-bf16")]
CHAT_16_FP32 = ("chat", 16, "chat-c16-fp32", "cpu-fp32")  # "never lose" under load, float32
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks",
                       "results")


def seed2_cost(bench):
    """``cost(step, rows, tokens)`` from the seed-2 bench ``bench-seed2-<bench>.json``."""
    return pass_cost(os.path.join(RESULTS, f"bench-seed2-{bench}.json"))


def workload_requests(records, workload, limit, max_tokens=128):
    """(records, [(prompt, output up to max_tokens, whole output)]) of the first ``limit``
    requests of ``workload``."""
    recs, _ = select_requests(records, [workload], limit, 8192)
    lims = request_limits(recs, max_tokens)
    return recs, [(r["prompt_token_ids"], r["output_token_ids"][:l], r["output_token_ids"])
                  for r, l in zip(recs, lims)]


def pass_cost(bench_json):
    """``cost(step, rows, tokens)`` from a bench JSON's measured passes."""
    return measured_cost(merged_pass_costs(json.load(open(bench_json))["table"]))


def replay_priced(method, reqs, concurrency, cost, budget=16):
    """(replay result, decode seconds): the passes with no prefill chunk (at most budget + 1
    tokens a row), the share 1/TPOT measures; the result's est_seconds is the whole run."""
    decode = [0.0]

    def priced(step, rows, tokens):
        c = cost(step, rows, tokens)
        if c and tokens <= rows * (budget + 1):  # no prefill chunk in this pass: decode
            decode[0] += c
        return c

    r = replay_engine(method, reqs, budget, EngineSchedule(concurrency, 4096, 128, True, 7), priced)
    return r, decode[0]
