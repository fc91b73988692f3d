"""Engine-agnostic drafters. Nothing in this package imports an engine."""

from specdraft.proposers.base import DraftTree, Drafter, DrafterCounters, SpecdraftConfigError
from specdraft.proposers.config import DrafterConfig
from specdraft.proposers.drafter import SpecDrafter, make_drafter

__all__ = ["DraftTree", "Drafter", "DrafterConfig", "DrafterCounters", "SpecDrafter",
           "SpecdraftConfigError", "make_drafter"]
