"""The speculator's device traffic, in plain torch (no vLLM): what one step copies between the
device and the host. Kept apart so integration_tests/gpu/host_sync_cost.py times exactly this
code on a GPU machine without vLLM.

Per step: one gather on the device and one device-to-host copy of ``[rows, K + 3]`` int32 (each
row's length, tokens emitted, last K + 1 tokens), which waits for the step's sampling (the host
sync), and one pinned host-to-device copy of the drafts (and of the confidences under adaptive
verification).
"""

from __future__ import annotations

import numpy as np
import torch


def window_offsets(k: int, device) -> torch.Tensor:
    """Positions of a row's last K + 1 tokens relative to its length."""
    return torch.arange(k + 1, dtype=torch.int32, device=device) - (k + 1)


def rows_to_host(history: torch.Tensor, total_len: torch.Tensor, idx: torch.Tensor,
                 num_sampled: torch.Tensor, offsets: torch.Tensor) -> np.ndarray:
    """``[rows, 2 + K + 1]`` int32 on the host: length, tokens emitted, last K + 1 tokens
    (positions before 0 repeat position 0). ``history``/``total_len`` are vLLM's per-slot int32
    tensors, ``idx`` the batch's slots, ``num_sampled`` int32 (as vLLM passes them: no
    conversions). The ``.cpu()`` is the one host sync of a step."""
    total = total_len[idx].unsqueeze(1)
    pos = (total + offsets).clamp_(min=0)
    window = history[idx.unsqueeze(1), pos]
    sampled = num_sampled.to(total.dtype).unsqueeze(1)  # a no-op for vLLM's int32
    return torch.cat([total, sampled, window], dim=1).cpu().numpy()


def drafts_to_device(host_drafts: torch.Tensor, drafts: torch.Tensor, host_conf: torch.Tensor,
                     conf: torch.Tensor | None, rows: int) -> None:
    """The step's drafts (and confidences, when ``conf`` is given) from pinned host buffers into
    the device tensors vLLM reads, without waiting."""
    drafts[:rows].copy_(host_drafts[:rows], non_blocking=True)
    if conf is not None:
        conf[:rows].copy_(host_conf[:rows], non_blocking=True)
