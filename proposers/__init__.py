"""Engine-agnostic drafters. Nothing in this package imports an engine."""

from specdraft.proposers.base import DraftTree, Drafter, DrafterStats, SpecdraftConfigError

__all__ = ["DraftTree", "Drafter", "DrafterStats", "SpecdraftConfigError"]
