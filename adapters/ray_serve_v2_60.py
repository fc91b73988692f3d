"""What specdraft reads of Ray Serve LLM 2.60's internals (``ray.serve.llm``), in one place."""

from __future__ import annotations

from typing import Any


def engine_client(server: Any) -> Any:
    """The vLLM engine client an ``LLMServer`` replica holds (``server.engine._engine_client``,
    private in Ray 2.60), or None."""
    return getattr(getattr(server, "engine", None), "_engine_client", None)


def server_config(server: Any) -> Any:
    """The ``LLMConfig`` an ``LLMServer`` replica serves (``server._llm_config``, private in Ray
    2.60; its public ``llm_config()`` is a coroutine)."""
    return getattr(server, "_llm_config", None)


def start_timed_out(error: BaseException) -> bool:
    """Whether ``ray.init`` failed because its local raylet did not register with the GCS in
    time: Ray 2.60 waits a fixed 30 s (``ray._private.node``, not configurable) and raises a bare
    ``Exception`` saying "The current node timed out during startup"."""
    return "timed out during startup" in str(error)


def replica_id() -> str:
    """This Serve replica's id, as vLLM's Ray metrics tag it (``ReplicaId``); "" outside Serve."""
    from ray import serve

    try:
        return serve.get_replica_context().replica_id.unique_id
    except Exception:  # noqa: BLE001 - not in a replica
        return ""
