"""specdraft in Ray Serve LLM deployments (``ray.serve.llm`` with vLLM).

``build_app`` returns an OpenAI-compatible Serve application whose vLLM replicas draft with a
specdraft proposer: ``LLMConfig.engine_kwargs["speculative_config"]`` names the proposer and
carries specdraft's options (the ``"specdraft"`` key), which Ray Serve passes to vLLM unchanged.
The same application as YAML for ``serve run`` is ``examples/ray_serve_llm.yaml``.

specdraft must import in every replica's vLLM processes: install it on every node (the wheel or a
checkout: README, Install), or ship it with ``runtime_env`` (``{"py_modules": [...]}``
or ``{"env_vars": {"PYTHONPATH": ...}}``). vLLM finds the plugin by its entry point, so an
installed package is the simple way.

``SpecdraftLLMServer`` is Ray's ``LLMServer`` plus three things: it shuts vLLM's engine client
down with the replica (Ray 2.60's engine shutdown leaves the engine's shared memory behind); with
``log_engine_metrics`` on (Ray's default, which also puts vLLM's metrics there) it records the
replica's ``specdraft:*`` counters in Ray's metrics, served by Ray's Prometheus endpoint as
``ray_specdraft_*`` (``plugins/ray_metrics.py``); and ``specdraft_metrics()`` returns the same
counters as Prometheus lines through a deployment handle, which ``metric_sums`` turns into a dict.

``start_local_ray`` starts a local Ray cluster the way the examples and tests do, starting
again when Ray's own start-up times out on a busy machine.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Callable

from ray.serve.llm import LLMConfig, LLMServer, build_openai_app

__all__ = ["SpecdraftLLMServer", "llm_config", "build_app", "app_builder", "metric_sums",
           "start_local_ray"]

# Starts of a local cluster before ``start_local_ray`` gives up on Ray's start-up timeout.
RAY_START_ATTEMPTS = 3


class SpecdraftLLMServer(LLMServer):
    """Ray Serve's vLLM server, releasing the engine with the replica and exporting specdraft's
    counters to Ray's metrics."""

    _ray_export: Any = None

    async def start(self):
        await super().start()
        from specdraft.adapters import ray_serve_v2_60 as ray_adapter

        config = ray_adapter.server_config(self)
        if config is not None and config.log_engine_metrics:
            import asyncio

            from specdraft.plugins.ray_metrics import RayMetricsExport
            from specdraft.plugins.vllm_metrics import SpecdraftCollector

            export = RayMetricsExport(SpecdraftCollector.families, ray_adapter.replica_id())
            self._ray_export = asyncio.get_running_loop().create_task(export.run())

    async def specdraft_metrics(self) -> str:
        """The replica's ``specdraft:*`` metrics, Prometheus text format."""
        from prometheus_client import REGISTRY, generate_latest

        text = generate_latest(REGISTRY).decode()
        return "\n".join(line for line in text.splitlines()
                         if "specdraft:" in line) + "\n"

    async def specdraft_replica_metrics(self) -> tuple[int, str]:
        """(this replica's process id, its ``specdraft:*`` metrics): tells replicas apart."""
        import os

        return os.getpid(), await self.specdraft_metrics()

    def _shutdown_engine_client(self) -> None:
        from specdraft.adapters.ray_serve_v2_60 import engine_client

        client = engine_client(self)
        if client is not None and hasattr(client, "shutdown"):
            try:
                client.shutdown()
            except Exception:  # noqa: BLE001 - the replica is going away either way
                pass

    async def __del__(self) -> None:
        if self._ray_export is not None:
            self._ray_export.cancel()
        self._shutdown_engine_client()
        await super().__del__()


def llm_config(model: str, *, model_id: str = "specdraft-model",
               proposer: str = "SuffixProposer", num_speculative_tokens: int = 8,
               specdraft: dict | None = None, replicas: int = 1, cpu: bool | None = None,
               engine_kwargs: dict | None = None, replica_cpus: float | None = None,
               engine_cpus: float | None = None, runtime_env: dict | None = None) -> LLMConfig:
    """An ``LLMConfig`` serving ``model`` with a specdraft proposer (``proposer=None``: plain).

    ``specdraft``: the proposer's options (e.g. ``{"shared_cache": {"name": "app", "tokens":
    4_000_000}}`` for one suffix cache shared by all replicas). ``cpu``: True, Ray's CPU path
    (vLLM's CPU build, no GPU requested); False, Ray's default GPU placement; None (default):
    whichever the vLLM installed here runs on (its platform), so a GPU machine gets GPU replicas. ``replica_cpus``/``engine_cpus``: the replica actor's and the engine bundle's CPUs
    (fractions let several replicas share a small machine).
    """
    kwargs = dict(engine_kwargs or {})
    if proposer is not None:
        spec = {"method": "custom_class", "model": f"specdraft.plugins.vllm.{proposer}",
                "num_speculative_tokens": num_speculative_tokens}
        if specdraft:
            spec["specdraft"] = dict(specdraft)
        kwargs["speculative_config"] = spec
    deployment: dict[str, Any] = {"num_replicas": replicas}
    if replica_cpus is not None:
        deployment["ray_actor_options"] = {"num_cpus": replica_cpus}
    extra: dict[str, Any] = {}
    if cpu is None:
        cpu = vllm_runs_on_cpu()
    if cpu:
        extra["accelerator_config"] = {"kind": "cpu"}
    if engine_cpus is not None:
        extra["placement_group_config"] = {"bundles": [{"CPU": engine_cpus}]}
    if runtime_env is not None:
        extra["runtime_env"] = runtime_env
    return LLMConfig(model_loading_config={"model_id": model_id, "model_source": model},
                     engine_kwargs=kwargs, deployment_config=deployment,
                     server_cls=SpecdraftLLMServer, **extra)


def vllm_runs_on_cpu() -> bool:
    """Whether the vLLM installed in this process's environment runs on CPU (its CPU build)."""
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def build_app(*configs: LLMConfig, ingress_cpus: float | None = 0):
    """The OpenAI-compatible Serve application (``/v1/chat/completions``, ``/v1/completions``).

    ``ingress_cpus=0``: the HTTP ingress needs no CPU of its own, so it schedules beside replicas
    whose engines hold every CPU of a small machine.
    """
    args: dict[str, Any] = {"llm_configs": list(configs)}
    if ingress_cpus is not None:
        args["ingress_deployment_config"] = {"ray_actor_options": {"num_cpus": ingress_cpus}}
    return build_openai_app(args)


def app_builder(args: dict) -> Any:
    """``serve run specdraft.plugins.ray_serve:app_builder model=PATH [replicas=2] ...``:
    the builder behind the YAML example and ``serve run``'s command-line arguments."""
    import json

    def num(key, cast, default):
        return cast(args[key]) if key in args else default

    specdraft = args.get("specdraft")
    if isinstance(specdraft, str):
        specdraft = json.loads(specdraft)
    if "shared_cache" in args:
        specdraft = dict(specdraft or {}, shared_cache=(
            json.loads(args["shared_cache"]) if isinstance(args["shared_cache"], str)
            else args["shared_cache"]))
    engine_kwargs = args.get("engine_kwargs") or {}
    if isinstance(engine_kwargs, str):
        engine_kwargs = json.loads(engine_kwargs)
    config = llm_config(
        args["model"], model_id=args.get("model_id", "specdraft-model"),
        proposer=args.get("proposer", "SuffixProposer") or None,
        num_speculative_tokens=num("num_speculative_tokens", int, 8), specdraft=specdraft,
        replicas=num("replicas", int, 1), cpu=None if "cpu" not in args else str(args["cpu"]).lower() == "true",
        engine_kwargs=engine_kwargs, replica_cpus=num("replica_cpus", float, None),
        engine_cpus=num("engine_cpus", float, None))
    return build_app(config, ingress_cpus=num("ingress_cpus", float, 0))


def metric_sums(text: str, prefixes: tuple[str, ...] = ("specdraft:",)) -> dict[str, float]:
    """Prometheus text (``specdraft_metrics()``, Ray's metrics endpoint) as {series name: value
    summed over its labels}, for the series whose names start with one of ``prefixes``."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(prefixes):  # HELP and TYPE lines start with "#"
            name, value = line.rsplit(" ", 1)
            key = name.split("{")[0]
            out[key] = out.get(key, 0.0) + float(value)
    return out


def start_local_ray(make_kwargs: Callable[[], dict], attempts: int = RAY_START_ATTEMPTS) -> dict:
    """``ray.init(**make_kwargs())``; returns the keyword arguments that started it.

    Ray waits a fixed 30 s for a new local cluster's raylet to register (not configurable) and
    otherwise fails ``ray.init`` with "The current node timed out during startup"; on a 2-core
    machine that is busy a start can miss that window once. Only that error is retried (any
    other is raised as it is): what the failed start left running is stopped, the load average
    and the busiest processes are printed (so a log shows what held the machine), and
    ``make_kwargs`` is called again, so ports it draws are drawn anew.
    """
    import ray

    from specdraft.adapters.ray_serve_v2_60 import start_timed_out

    for attempt in range(1, attempts + 1):
        kwargs = make_kwargs()
        try:
            ray.init(**kwargs)
            return kwargs
        except Exception as e:  # noqa: BLE001 - Ray raises a bare Exception for this one
            if not start_timed_out(e) or attempt == attempts:
                raise
            print(f"ray.init attempt {attempt} of {attempts}: {e}\nload average "
                  f"{os.getloadavg()}; busiest processes:\n{_busiest_processes()}",
                  file=sys.stderr)
            with contextlib.suppress(Exception):
                ray.shutdown()
            _stop_ray_children()
    raise AssertionError("unreachable")  # the last attempt returned or raised


def _busiest_processes(n: int = 5) -> str:
    import subprocess

    with contextlib.suppress(Exception):
        out = subprocess.run(["ps", "-eo", "pid,pcpu,rss,etime,args", "--sort=-pcpu"],
                             capture_output=True, text=True, timeout=10).stdout
        return "\n".join(line[:160] for line in out.splitlines()[: n + 1])
    return "(ps unavailable)"


def _stop_ray_children() -> None:
    """Kill this process's Ray children (GCS, raylet, agents) that a failed ``ray.init`` left."""
    import psutil

    marks = ("gcs_server", "raylet", "ray::", "ray/_private", "ray/dashboard", "ray/autoscaler")
    ray_procs = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if any(m in " ".join(child.cmdline()) for m in marks):
                ray_procs.append(child)
    for proc in ray_procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(ray_procs, timeout=10)
