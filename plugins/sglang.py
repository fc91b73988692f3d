"""specdraft's ``sglang.srt.plugins`` entry point: registers the ``SPECDRAFT`` algorithm.

SGLang runs ``register()`` in each of its processes. It registers the algorithm and nothing
else (no patching); SGLang logs and swallows a plugin's exceptions, so an unsupported SGLang
version is reported where it stops start-up: the algorithm's server-argument check raises with
the supported range when ``--speculative-algorithm SPECDRAFT`` is asked for.

    SPECDRAFT_SGLANG_OPTIONS='{"strategy": "tree"}' python -m sglang.launch_server \\
        --model-path M --speculative-algorithm SPECDRAFT --speculative-num-draft-tokens 16
"""

from __future__ import annotations

import logging

_log = logging.getLogger("sglang.specdraft")
_FALLBACK_ADAPTER = "specdraft.adapters.sglang_v0_5"


def register() -> None:
    try:
        import importlib

        from specdraft.adapters import UnsupportedEngineVersion, sglang_adapter

        try:
            adapter, version_error = sglang_adapter(), None
        except UnsupportedEngineVersion as e:
            # still register the name, so that asking for it fails with this message
            adapter, version_error = importlib.import_module(_FALLBACK_ADAPTER), str(e)
        adapter.register(version_error)
    except Exception:  # noqa: BLE001 - a plugin must not stop SGLang from starting
        _log.exception("specdraft: registering the SGLang algorithm failed")
