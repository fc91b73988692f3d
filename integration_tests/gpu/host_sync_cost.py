"""What specdraft's vLLM 0.34 speculator costs a step in device traffic: pure torch, no vLLM.

specdraft's index lives on the host. Each step its speculator gathers every row's length, tokens
emitted and last K + 1 tokens on the device and copies them to the host (the step's one host
sync: with async scheduling it waits for the step's sampling), drafts on the host, and copies
the drafts (and confidences) back from pinned buffers. This script times that traffic with the
speculator's own code (``adapters/vllm_v0_34/transfer.py``, loaded by path) on vLLM 0.34's
tensor shapes (``all_token_ids [max_num_seqs, max_model_len]`` int32, ``total_len``):

  d2h_us     gather + device-to-host copy, device idle (the sync's own latency)
  wait_us    the same issued right behind a device op of --busy-ms: how much longer than the op
             alone until the host has the rows (what the sync adds when the GPU is still busy)
  h2d_us     drafts (int64) + confidences (float32), pinned host to device, until done

at 1, 16, 64 and 256 rows; medians of --iters runs after warm-up. On a GPU the device is CUDA;
elsewhere it runs the same code on CPU tensors (no queue: wait_us is the op itself, so it is
not reported). Not collected by pytest.

    python integration_tests/gpu/host_sync_cost.py --json host_sync_cost.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
TRANSFER = os.path.join(HERE, "..", "..", "adapters", "vllm_v0_34", "transfer.py")


def load_transfer():
    spec = importlib.util.spec_from_file_location("specdraft_transfer", TRANSFER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def busy(device, ms: float) -> None:
    """A device op of about ``ms`` milliseconds (CUDA only)."""
    torch.cuda._sleep(int(ms * 1e-3 * torch.cuda.get_device_properties(device).clock_rate * 1e3))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--max-model-len", type=int, default=8192)
    ap.add_argument("--max-num-seqs", type=int, default=256)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--busy-ms", type=float, default=2.0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    t = load_transfer()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    k, n_slots = args.k, args.max_num_seqs
    history = torch.randint(0, 150000, (n_slots, args.max_model_len), dtype=torch.int32,
                            device=device)
    total_len = torch.randint(args.k + 2, args.max_model_len - 64, (n_slots,), dtype=torch.int32,
                              device=device)
    offsets = t.window_offsets(k, device)
    drafts = torch.zeros((n_slots, k), dtype=torch.int64, device=device)
    conf = torch.zeros((n_slots, k), dtype=torch.float32, device=device)
    host_drafts = torch.zeros((n_slots, k), dtype=torch.int64, pin_memory=cuda)
    host_conf = torch.ones((n_slots, k), dtype=torch.float32, pin_memory=cuda)
    rows_out = []
    for rows in (1, 16, 64, 256):
        idx = torch.randperm(n_slots, device=device)[:rows].to(torch.int32)
        num_sampled = torch.randint(1, k + 2, (rows,), dtype=torch.int32, device=device)
        d2h, wait, h2d = [], [], []
        for i in range(args.iters + 10):
            sync()
            a = time.perf_counter()
            t.rows_to_host(history, total_len, idx, num_sampled, offsets)
            b = time.perf_counter()
            t.drafts_to_device(host_drafts, drafts, host_conf, conf, rows)
            sync()
            c = time.perf_counter()
            if cuda:  # the device busy for --busy-ms, then the rows: what past the op's end?
                sync()
                e = time.perf_counter()
                busy(device, args.busy_ms)
                sync()
                f = time.perf_counter()
                busy(device, args.busy_ms)
                t.rows_to_host(history, total_len, idx, num_sampled, offsets)
                g = time.perf_counter()
                wait.append(((g - f) - (f - e)) * 1e6)
            if i >= 10:
                d2h.append((b - a) * 1e6)
                h2d.append((c - b) * 1e6)
        row = {"rows": rows, "k": k, "d2h_us": statistics.median(d2h),
               "h2d_us": statistics.median(h2d),
               "bytes_d2h": rows * (k + 3) * 4, "bytes_h2d": rows * k * (8 + 4)}
        if cuda:
            row["wait_us"] = statistics.median(wait[10:])
        rows_out.append(row)
        print(json.dumps(row), flush=True)
    out = {"device": torch.cuda.get_device_name(device) if cuda else "cpu",
           "torch": torch.__version__, "max_model_len": args.max_model_len,
           "max_num_seqs": n_slots, "busy_ms": args.busy_ms if cuda else None, "rows": rows_out}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
        print(f"[host-sync] wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
