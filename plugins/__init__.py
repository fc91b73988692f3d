"""Engine plugins: the entry points engines load, and the proposer classes users name."""
