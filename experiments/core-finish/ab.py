"""Before/after of a native index change on the core alone (BENCHMARKS.md, "Proposer overhead"):
prompt indexing (`start`, 4,096 tokens), finishing a request into a full 1M-token global index
without `live_outputs` (all 1,024 output tokens appended at the end) and evicting one, each the
mean over 16 requests, repeated; prints min and median per repetition.

This is the core, not what a user runs: `specdraft overhead` times the plugin as vLLM calls it.
Run the two builds at once, one on each core, then swap cores, so both see the machine's phases:

    cp -r proposers /tmp/before   # with the old build's _suffix_native*.so, likewise /tmp/after
    taskset -c 0 .venv/bin/python experiments/core-finish/ab.py /tmp/before 12 &
    taskset -c 1 .venv/bin/python experiments/core-finish/ab.py /tmp/after 12; wait
"""
import glob
import importlib.util
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from specdraft.overhead.streams import StreamGen  # noqa: E402


def load(build_dir: str):
    so = glob.glob(os.path.join(build_dir, "_suffix_native*.so"))[0]
    spec = importlib.util.spec_from_file_location("_suffix_native", so)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def main(build_dir: str, reps: int) -> None:
    native = load(build_dir)
    gen = StreamGen(0, vocab=32000)
    keep = 976 * 1024  # what the pre-fill leaves cached: each finish below evicts back to it
    core = native.SuffixCore(max_depth=24, global_cache_tokens=2_000_000)
    h = 0
    while core.global_tokens() < 1_000_000 - 1024:
        p = gen.sequence(64)
        core.start(h, p)
        core.extend(h, gen.sequence(1024, own=p))
        core.finish(h)
        h += 1
    requests = [(p, gen.sequence(1024, own=p)) for p in (gen.sequence(4096) for _ in range(16))]
    res = {"start": [], "append": [], "evict": []}
    for _ in range(reps):
        ts = ta = tv = 0
        for p, o in requests:
            t0 = time.perf_counter_ns(); core.start(h, p); ts += time.perf_counter_ns() - t0
            core.extend(h, o)
            t0 = time.perf_counter_ns(); core.finish(h); ta += time.perf_counter_ns() - t0
            t0 = time.perf_counter_ns(); core.evict_global(keep); tv += time.perf_counter_ns() - t0
            h += 1
        for k, v in (("start", ts), ("append", ta), ("evict", tv)):
            res[k].append(v / len(requests) / 1e3)
    print(build_dir, "  ".join(f"{k} us: min {min(v):.0f} median {statistics.median(v):.0f}"
                               for k, v in res.items()))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 12)
