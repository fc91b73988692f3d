"""Everything specdraft knows about Hugging Face transformers, in one place.

Facts the tree engine (``specdraft.hf_generate``) relies on, checked against transformers 5.19:

* A 4D ``attention_mask`` tensor ``[batch, 1, q_len, kv_len]`` is "already prepared, or custom":
  ``masking_utils._preprocess_mask_arguments`` returns it unchanged and every layer gets it as is.
  Eager attention adds it to the scores; SDPA passes it as ``attn_mask``. An additive float mask
  (0 where visible, the dtype's minimum elsewhere) therefore means the same to both. Flash and
  flex attention take other formats: not supported here.
* ``position_ids`` ``[batch, q_len]`` set each query token's rotary position independently, so tree
  nodes at one depth share a position. Models in 5.x take no ``cache_position``.
* ``DynamicCache(config=...)`` holds one ``DynamicLayer`` per layer whose ``keys``/``values`` are
  ``[batch, kv_heads, seq, head_dim]`` tensors, appended by ``torch.cat``. Keeping the accepted path
  is a gather along ``seq`` plus a slice. Sliding-window layers (``DynamicSlidingWindowLayer``)
  drop old entries and would need their own bookkeeping: models that use them are refused.
* ``model(..., logits_to_keep=n)`` computes only the last ``n`` rows of logits.
* ``generate()`` sampling: float32 logits of the last position, then the warpers
  (``TemperatureLogitsWarper``, ``TopKLogitsWarper``, ``TopPLogitsWarper``), softmax, multinomial.
  The engine applies the same warpers to every tree row.
* ``generate(prompt_lookup_num_tokens=k)`` is transformers' prompt lookup and
  ``generate(assistant_model=m)`` its assisted generation (draft model); both go through the
  model's ``forward``, so a forward pre-hook counts their target passes.

A transformers version outside ``SUPPORTED`` is refused at start-up with the range.
"""

from __future__ import annotations

from typing import Sequence

import torch

from specdraft.adapters import UnsupportedEngineVersion, parse_version

SUPPORTED = ((5, 0, 0), (6, 0, 0))  # checked on 5.19; the 4.x cache and mask API differ
ATTENTION_IMPLEMENTATIONS = ("sdpa", "eager")


def installed_version() -> str:
    import transformers

    return transformers.__version__


def check_version(version: str | None = None) -> str:
    version = version or installed_version()
    lo, hi = SUPPORTED
    if not lo <= parse_version(version) < hi:
        fmt = ".".join
        raise UnsupportedEngineVersion(
            f"specdraft's transformers engine supports transformers >={fmt(map(str, lo))},"
            f"<{fmt(map(str, hi))}; the installed transformers is {version}")
    return version


def check_model(model) -> None:
    """Refuse, with the reason, a model this engine cannot verify trees on."""
    config = model.config
    if getattr(config, "is_encoder_decoder", False):
        raise ValueError(f"{type(model).__name__}: encoder-decoder models are not supported; "
                         "accepted: decoder-only causal LMs")
    impl = getattr(config, "_attn_implementation", None) or "eager"
    if impl not in ATTENTION_IMPLEMENTATIONS:
        raise ValueError(f"attn_implementation={impl!r} is not supported by tree verification; "
                         f"accepted: {', '.join(map(repr, ATTENTION_IMPLEMENTATIONS))} "
                         "(from_pretrained(..., attn_implementation='sdpa'))")
    layer_types = getattr(config, "layer_types", None) or []
    if any(t != "full_attention" for t in layer_types) or (
            getattr(config, "use_sliding_window", False) and getattr(config, "sliding_window", None)):
        raise ValueError(f"{type(model).__name__}: sliding-window attention layers are not "
                         "supported by tree verification; accepted: models whose layers all use "
                         "full attention")


def new_cache(model):
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


def cache_length(cache) -> int:
    return int(cache.get_seq_length())


def attention_mask(num_cached: int, num_pending: int, node_visible: torch.Tensor,
                   dtype: torch.dtype, device) -> torch.Tensor:
    """The 4D additive mask of one pass: ``num_pending`` context tokens (causal among themselves),
    then the draft tree's nodes, each seeing the whole context and the nodes ``node_visible[i]``
    marks (its ancestors and itself). Shape ``[1, 1, q, num_cached + q]``."""
    n = node_visible.shape[0]
    q = num_pending + n
    visible = torch.zeros(q, num_cached + q, dtype=torch.bool, device=device)
    visible[:, :num_cached + num_pending] = True
    visible[:num_pending, num_cached:num_cached + num_pending] = torch.ones(
        num_pending, num_pending, dtype=torch.bool, device=device).tril()
    visible[num_pending:, num_cached + num_pending:] = node_visible.to(device)
    mask = torch.zeros(q, num_cached + q, dtype=dtype, device=device)
    mask.masked_fill_(~visible, torch.finfo(dtype).min)
    return mask[None, None]


def forward(model, input_ids: Sequence[int], mask: torch.Tensor, position_ids: Sequence[int],
            cache, num_logits: int) -> torch.Tensor:
    """One target pass; returns the last ``num_logits`` rows of logits as float32 ``[n, vocab]``."""
    device = model.device
    out = model(input_ids=torch.tensor([list(input_ids)], device=device),
                attention_mask=mask,
                position_ids=torch.tensor([list(position_ids)], device=device),
                past_key_values=cache, use_cache=True, logits_to_keep=num_logits)
    return out.logits[0].float()


def keep_in_cache(cache, start: int, keep: Sequence[int]) -> None:
    """Keep cache entries ``[0, start)`` and then ``start + j`` for each ``j`` in ``keep``
    (increasing), dropping every other entry after ``start``: the rejected draft nodes."""
    keep = list(keep)
    new_len = start + len(keep)
    contiguous = keep == list(range(len(keep)))
    for layer in cache.layers:
        if layer.keys is None or layer.keys.numel() == 0:
            continue
        if not contiguous:
            index = torch.tensor([start + j for j in keep], device=layer.keys.device)
            layer.keys[:, :, start:new_len] = layer.keys.index_select(2, index)
            layer.values[:, :, start:new_len] = layer.values.index_select(2, index)
        layer.keys = layer.keys[:, :, :new_len]
        layer.values = layer.values[:, :, :new_len]


def default_cost_model(model) -> str:
    """The verification cost model for the model's device and dtype, or on a GPU its size (see
    proposers/controller.py)."""
    if model.device.type != "cpu":
        from specdraft.proposers.controller import preset_for_config

        return preset_for_config(model.config)
    return "cpu-fp32" if model.dtype == torch.float32 else "cpu-bf16"


def sampling_warpers(temperature: float, top_k: int | None, top_p: float | None):
    """The row-wise logits warpers ``generate()`` applies for these settings, in its order."""
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    warpers = LogitsProcessorList()
    if temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(temperature))
    if top_k:
        warpers.append(TopKLogitsWarper(top_k=top_k, min_tokens_to_keep=1))
    if top_p is not None and top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=top_p, min_tokens_to_keep=1))
    return warpers


def count_forward_passes(model):
    """A counter of the model's forward calls (with each call's query length), and a handle
    whose ``remove()`` stops counting."""
    calls: list[int] = []

    def hook(_module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        calls.append(int(ids.shape[1]) if ids is not None else 0)

    return calls, model.register_forward_pre_hook(hook, with_kwargs=True)
