"""The pages besides a run's own: the front page, the history, the comparison, and the README's headline block."""
