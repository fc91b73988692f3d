"""specdraft options: one table, validated once at start-up.

Every option a user can set (through vLLM's ``--speculative-config`` key ``specdraft``, SGLang's
``$SPECDRAFT_SGLANG_OPTIONS``, or a Ray Serve deployment's ``engine_kwargs``) is declared here with its type, bounds and default. Anything else is an
error that names the option and what is accepted, raised before the engine serves a request.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from specdraft.proposers.base import SpecdraftConfigError
from specdraft.proposers.controller import COST_MODELS, PARAMS as COST_PARAMS

STRATEGIES = ("suffix", "tree", "lookup")
# The native index numbers its nodes with int32 and a cached token takes ~3.5 nodes: 2**29 tokens
# keep node ids in range (and the Python twin to the same bound).
MAX_GLOBAL_CACHE_TOKENS = 2**29
# Tenant scopes held at once (each scoped pool costs a small index even when empty)
MAX_SCOPES = 65536


@dataclasses.dataclass(frozen=True)
class DrafterConfig:
    strategy: str = "suffix"           # suffix: chain from the suffix index; tree: best-first tree;
    #                                    lookup: prompt lookup (n-gram match in the request only)
    max_depth: int = 24                # longest context suffix the index matches on
    global_cache_tokens: int = 1_000_000  # budget of the cache of earlier requests (0: off)
    scope_cache_tokens: Any = None     # each tenant scope's share of it (None: all of it)
    max_scopes: int = 1024             # tenant scopes held (least recently used evicted whole)
    cache_prompts: bool = False        # also cache finished requests' prompts
    live_outputs: bool = True          # requests still generating are in the global cache too
    local_weight: int = 6              # weight of the request's own index against the global cache
    corpus_files: tuple = ()           # token corpora drafts may copy from: paths, or
    #                                    {"path": ..., "scopes": [...]} for some tenant scopes
    max_children: int = 4              # branching of tree drafts
    min_path_prob: float = 0.02        # do not draft nodes less likely than this
    lookup_min: int = 2                # lookup: shortest n-gram to match
    lookup_max: int = 5                # lookup: longest n-gram to match
    adaptive: bool = True              # adaptive draft length (off: always draft the budget)
    cost_model: Any = "medium"         # verification cost: a preset (small, medium, large: GPU
    #                                    model sizes; cpu-bf16, cpu-fp32), [[tokens, cost], ...]
    #                                    or {fixed, kv, ...} (see specdraft.proposers.controller)
    calibration_prior: float = 8.0     # pseudo-observations behind each probability bin
    request_prior: float = 1.0         # pseudo-observations behind each request's acceptance factor
    request_decay: float = 0.9         # weight kept by old evidence at each new observation
    idle_decay: float = 0.9            # evidence kept per step a request does not draft
    min_gain: float = 0.1              # never draft a node less likely than this to be accepted
    max_waste: float = 4.0             # stop a chain once its expected rejected nodes pass this
    match_prior: float = 2.0           # per-request acceptance by matched length: pseudo-
    #                                    observations behind each bucket (0: one factor per request)
    native: Any = "auto"               # use the C++ index: "auto", True, False
    shared_cache: Any = None           # {"name": ..., "tokens": N}: one cache for all replicas
    #                                    (a Ray actor; see specdraft.proposers.shared_cache)

    @classmethod
    def from_dict(cls, options: dict | None) -> "DrafterConfig":
        options = dict(options or {})
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - set(fields))
        if unknown:
            raise SpecdraftConfigError(
                f"unknown specdraft option(s) {', '.join(map(repr, unknown))}; "
                f"accepted options: {', '.join(sorted(fields))}")
        if isinstance(options.get("corpus_files"), str):
            options["corpus_files"] = [options["corpus_files"]]
        if "corpus_files" in options:
            files = options["corpus_files"]
            if not isinstance(files, (list, tuple)):
                raise SpecdraftConfigError(
                    f"invalid specdraft option corpus_files={files!r}: accepted a list of file "
                    "paths (.jsonl with token_ids or text, or text files)")
            from specdraft.proposers.corpus import corpus_entry

            options["corpus_files"] = tuple(corpus_entry(f) for f in files)
        if options.get("shared_cache") is not None:
            from specdraft.proposers.shared_cache import validate_options

            options["shared_cache"] = validate_options(options["shared_cache"])
        cfg = cls(**options)
        cfg.validate()
        return cfg

    @classmethod
    def from_json(cls, text: str) -> "DrafterConfig":
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as e:
            raise SpecdraftConfigError(f"specdraft options are not valid JSON: {e}") from None

    def validate(self) -> None:
        def need(ok: bool, name: str, accepted: str) -> None:
            if not ok:
                raise SpecdraftConfigError(
                    f"invalid specdraft option {name}={getattr(self, name)!r}: accepted {accepted}")

        def is_int(v) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        def is_num(v) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool)

        need(self.strategy in STRATEGIES, "strategy", " | ".join(map(repr, STRATEGIES)))
        need(is_int(self.max_depth) and 1 <= self.max_depth <= 64, "max_depth", "an integer in [1, 64]")
        need(is_int(self.global_cache_tokens)
             and 0 <= self.global_cache_tokens <= MAX_GLOBAL_CACHE_TOKENS, "global_cache_tokens",
             f"an integer in [0, {MAX_GLOBAL_CACHE_TOKENS}] (0 turns the global cache off)")
        need(self.scope_cache_tokens is None or (
            is_int(self.scope_cache_tokens)
            and 0 <= self.scope_cache_tokens <= self.global_cache_tokens), "scope_cache_tokens",
             f"null (the whole global_cache_tokens) or an integer in [0, global_cache_tokens="
             f"{self.global_cache_tokens}]")
        need(is_int(self.max_scopes) and 1 <= self.max_scopes <= MAX_SCOPES, "max_scopes",
             f"an integer in [1, {MAX_SCOPES}]")
        need(isinstance(self.cache_prompts, bool), "cache_prompts", "true or false")
        need(isinstance(self.live_outputs, bool), "live_outputs", "true or false")
        need(is_int(self.local_weight) and 1 <= self.local_weight <= 64, "local_weight",
             "an integer in [1, 64]")
        need(all((isinstance(f, str) and f) or isinstance(f, tuple) for f in self.corpus_files),
             "corpus_files", "a list of file paths (.jsonl with token_ids or text, or text "
             "files), or objects {\"path\": ..., \"scopes\": [cache_salt or null, ...]}")
        need(is_int(self.max_children) and 1 <= self.max_children <= 16, "max_children",
             "an integer in [1, 16]")
        need(is_num(self.min_path_prob) and 0.0 <= self.min_path_prob < 1.0, "min_path_prob",
             "a number in [0, 1)")
        need(is_int(self.lookup_min) and 1 <= self.lookup_min, "lookup_min", "an integer >= 1")
        need(is_int(self.lookup_max) and self.lookup_min <= self.lookup_max <= 64, "lookup_max",
             "an integer in [lookup_min, 64]")
        need(isinstance(self.adaptive, bool), "adaptive", "true or false")
        cm = self.cost_model
        ok_cost = (isinstance(cm, str) and cm in COST_MODELS) or (
            isinstance(cm, (list, tuple)) and len(cm) >= 2 and all(
                isinstance(p, (list, tuple)) and len(p) == 2 and is_num(p[0]) and is_num(p[1])
                and p[0] >= 1 and p[1] > 0 for p in cm)) or (
            isinstance(cm, dict) and set(cm) == set(COST_PARAMS)
            and all(is_num(v) and v >= 0 for v in cm.values()) and cm["fixed"] > 0)
        need(ok_cost, "cost_model",
             f"{' | '.join(map(repr, COST_MODELS))}, a list of [tokens >= 1, cost > 0] points, or "
             f"an object with the numbers {', '.join(COST_PARAMS)} (all >= 0, fixed > 0)")
        need(is_num(self.calibration_prior) and self.calibration_prior > 0, "calibration_prior",
             "a number > 0")
        need(is_num(self.request_prior) and self.request_prior > 0, "request_prior", "a number > 0")
        need(is_num(self.request_decay) and 0 < self.request_decay <= 1, "request_decay",
             "a number in (0, 1]")
        need(is_num(self.idle_decay) and 0 < self.idle_decay <= 1, "idle_decay", "a number in (0, 1]")
        need(is_num(self.min_gain) and 0.0 <= self.min_gain < 1.0, "min_gain", "a number in [0, 1)")
        need(is_num(self.max_waste) and self.max_waste > 0, "max_waste",
             "a number > 0 (expected rejected draft nodes per request and step)")
        need(is_num(self.match_prior) and self.match_prior >= 0, "match_prior",
             "a number >= 0 (0: one acceptance factor per request)")
        need(self.native in ("auto", True, False), "native", "'auto', true or false")


# ---------------------------------------------------------------------------------------------
# Per-request options, from a request's extra arguments (vLLM: SamplingParams.extra_args, which
# the OpenAI server fills from the request's "vllm_xargs")
# ---------------------------------------------------------------------------------------------
REQUEST_KEY = "specdraft"            # offline: extra_args={"specdraft": {"speculate": False}}
REQUEST_FLAT_PREFIX = "specdraft_"   # server: "vllm_xargs": {"specdraft_speculate": false}
REQUEST_OPTIONS = ("speculate",)
_TRUE, _FALSE = (True, 1, "true", "1"), (False, 0, "false", "0")
REQUEST_ACCEPTED = ("accepted: \"specdraft_speculate\": true | false (also 1 | 0, \"true\" | "
                    "\"false\") in vllm_xargs, or extra_args={\"specdraft\": {\"speculate\": "
                    "False}} in SamplingParams")


def request_options(extra_args: Any) -> dict:
    """The specdraft options of one request ({} if none); ValueError names a bad key or value.

    The OpenAI server's ``vllm_xargs`` takes strings, numbers and lists only (a JSON ``false``
    arrives as 0), hence the flat form; offline ``SamplingParams`` may carry the nested dict.
    """
    if not extra_args:
        return {}
    given: dict[str, tuple[str, Any]] = {}  # option -> (key as the user wrote it, value)
    for key, value in extra_args.items():
        if not isinstance(key, str) or not key.startswith(REQUEST_KEY):
            continue
        if key == REQUEST_KEY:
            if not isinstance(value, dict):
                raise ValueError(f"per-request option {key!r} must be an object, got "
                                 f"{value!r}; {REQUEST_ACCEPTED}")
            for name, v in value.items():
                given[name] = (f"{key}.{name}", v)
        elif key.startswith(REQUEST_FLAT_PREFIX):
            given[key[len(REQUEST_FLAT_PREFIX):]] = (key, value)
        else:
            given[key] = (key, value)
    out = {}
    for name, (key, value) in given.items():
        if name not in REQUEST_OPTIONS:
            raise ValueError(f"unknown per-request specdraft option {key!r}; {REQUEST_ACCEPTED}")
        v = value.lower() if isinstance(value, str) else value
        if not isinstance(v, (bool, int, str)) or v not in _TRUE + _FALSE:
            raise ValueError(f"invalid per-request specdraft option {key}={value!r}; "
                             f"{REQUEST_ACCEPTED}")
        out[name] = v in _TRUE
    return out


def request_speculates(extra_args: Any) -> bool:
    """False when the request opted out of speculation (a bad value was refused on arrival)."""
    try:
        return request_options(extra_args).get("speculate", True)
    except ValueError:
        return True
