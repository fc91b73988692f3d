"""What specdraft reads of Ray Serve LLM 2.60's internals (``ray.serve.llm``), in one place."""

from __future__ import annotations

from typing import Any


def engine_client(server: Any) -> Any:
    """The vLLM engine client an ``LLMServer`` replica holds (``server.engine._engine_client``,
    private in Ray 2.60), or None."""
    return getattr(getattr(server, "engine", None), "_engine_client", None)
