"""Host time of specdraft's propose path, vLLM 0.34 speculator against the 0.32 proposer, at
1, 16, 64 and 256 requests in flight (CPU; what a step spends in specdraft, not in the model).
Each run has 4x as many requests as the batch (at least 60: the trace's requests repeated), so
the batch stays full for most of it.

Both adapters are driven through the same recorded steps (integration_tests/adapter_replay.py:
a trace's greedy outputs, acceptance by the recorded tokens) and draft the same tokens; the time
is what each spends inside ``propose`` (its ``proposer_seconds`` over its steps), the 0.34 one
including its device gather and copies (CPU tensors here). Results:
benchmarks/results/vllm034-overhead.json (``specdraft report`` renders it in BENCHMARKS.md). Run
alone on the machine:

    .venv/bin/python benchmarks/vllm034_overhead.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO / "benchmarks" / "traces" / "qwen2.5-coder-0.5b.jsonl.gz"
OPTIONS = '{"cost_model": "gpu", "adaptive": true}'
BATCHES = (1, 16, 64, 256)
K = 16


def requests(batch: int) -> int:
    """Enough requests that the batch stays full most of the run (the trace has 279)."""
    return max(60, 4 * batch)


def run(version: str, batch: int, out: Path) -> dict:
    env = dict(os.environ)
    paths = [str(REPO / "integration_tests")]
    if version == "0.34":
        paths.insert(0, str(REPO / ".cache" / "vllm-0.34.0"))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.setdefault("OMP_NUM_THREADS", "1")  # as vLLM's CPU worker binds one thread per core
    subprocess.run([sys.executable, str(REPO / "integration_tests" / "adapter_replay.py"),
                    version, str(out), str(TRACE), "--options", OPTIONS, "--batch", str(batch),
                    "--k", str(K), "--limit", str(requests(batch)), "--repeat", "4"],
                   env=env, check=True, stderr=subprocess.DEVNULL)
    data = json.loads(out.read_text())
    return data["timing"][str(TRACE)][OPTIONS], data["results"][str(TRACE)][OPTIONS]


def main() -> int:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for batch in BATCHES:
            t = {}
            drafts = {}
            for version in ("0.32", "0.34"):
                t[version], drafts[version] = run(version, batch, Path(tmp) / f"{version}.json")
            row = {"batch": batch, "k": K, "requests": requests(batch),
                   "steps": t["0.34"]["steps"], "rows": t["0.34"]["rows"],
                   "rows_per_step": t["0.34"]["rows"] / max(1, t["0.34"]["steps"]),
                   "same_drafts": drafts["0.32"] == drafts["0.34"]}
            for version in ("0.32", "0.34"):
                s = t[version]
                row[f"us_per_step_{version}"] = 1e6 * s["proposer_seconds"] / max(1, s["steps"])
                row[f"us_per_row_{version}"] = 1e6 * s["proposer_seconds"] / max(1, s["rows"])
            rows.append(row)
            print(f"[overhead-034] batch {batch}: 0.32 {row['us_per_step_0.32']:.0f} us/step, "
                  f"0.34 {row['us_per_step_0.34']:.0f} us/step "
                  f"({row['steps']} steps, same drafts: {row['same_drafts']})", flush=True)
    out = REPO / "benchmarks" / "results" / "vllm034-overhead.json"
    out.write_text(json.dumps({"trace": TRACE.name, "options": json.loads(OPTIONS), "rows": rows},
                              indent=1) + "\n")
    print(f"[overhead-034] wrote {out}; `specdraft report` puts its table in BENCHMARKS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
