"""Training and evaluating an embedding: the run (fit), its models, recipes, monitor and checkpoints, and the
held-out evaluation with its retrieval metrics (docs/training.md)."""
