"""specdraft: model-free speculative-decoding proposers for the serving engines people use."""

__version__ = "0.1.0"
