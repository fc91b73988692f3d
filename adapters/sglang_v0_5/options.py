"""specdraft's options and server-argument checks for SGLang 0.5 (facts: the package's docstring)."""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from specdraft.proposers.base import SpecdraftConfigError

SUPPORTED = ((0, 5, 23), (0, 5, 24))  # only 0.5.23's internals were checked
ALGORITHM = "SPECDRAFT"
OPTIONS_ENV = "SPECDRAFT_SGLANG_OPTIONS"  # a JSON object, or the path of a JSON file holding one
DEFAULT_NUM_DRAFT_TOKENS = 12            # what SGLang's NGRAM hook sets when none is given

logger = logging.getLogger("sglang.specdraft")


def load_options(environ: dict | None = None) -> dict:
    """specdraft options for SGLang, from ``$SPECDRAFT_SGLANG_OPTIONS`` (validated).

    The variable holds a JSON object or the path of a JSON file holding one; unset means defaults.
    SGLang's server arguments have no free-form field a plugin may use, and the environment
    reaches every process SGLang starts.
    """
    from specdraft.proposers.config import DrafterConfig

    raw = (os.environ if environ is None else environ).get(OPTIONS_ENV, "").strip()
    if not raw:
        return {}
    if raw.startswith("{"):
        text, where = raw, f"${OPTIONS_ENV}"
    else:
        if not os.path.isfile(raw):
            raise SpecdraftConfigError(
                f"${OPTIONS_ENV}={raw!r}: not a file and not a JSON object; accepted: a JSON "
                "object of specdraft options, or the path of a JSON file holding one")
        with open(raw, encoding="utf-8") as f:
            text, where = f.read(), f"{raw} (from ${OPTIONS_ENV})"
    try:
        options = json.loads(text)
    except json.JSONDecodeError as e:
        raise SpecdraftConfigError(f"{where}: not valid JSON ({e})") from None
    if not isinstance(options, dict):
        raise SpecdraftConfigError(f"{where}: expected a JSON object of specdraft options, got "
                                   f"{type(options).__name__}")
    try:
        DrafterConfig.from_dict(options)
    except SpecdraftConfigError as e:
        raise SpecdraftConfigError(f"{where}: {e}") from None
    except TypeError as e:
        raise SpecdraftConfigError(f"{where}: {e}") from None
    return options


def check_server_args(args: Any) -> None:
    """Start-up checks of SGLang server arguments for this algorithm (raises with the fix)."""
    n = getattr(args, "speculative_num_draft_tokens", None)
    if n is not None and (not isinstance(n, int) or n < 2):
        raise SpecdraftConfigError(
            f"--speculative-num-draft-tokens={n!r} with --speculative-algorithm {ALGORITHM}: "
            "accepted an integer >= 2 (the last context token plus at least one draft token)")
    corpus = getattr(args, "speculative_ngram_external_corpus_path", None)
    if corpus is not None:
        raise SpecdraftConfigError(
            f"--speculative-ngram-external-corpus-path={corpus!r} is read by SGLang's NGRAM corpus, "
            f"not by {ALGORITHM}; give specdraft corpora as the option corpus_files in "
            f"${OPTIONS_ENV} instead")
    load_options()


def tree_breadth(options: dict) -> int:
    """Widest branching of the drafts (SGLang's ``speculative_eagle_topk`` for NGRAM trees)."""
    from specdraft.proposers.config import DrafterConfig

    cfg = DrafterConfig.from_dict(options)
    return cfg.max_children if cfg.strategy == "tree" else 1
