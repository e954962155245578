"""Ready-made callbacks: progress bars, checkpoints, early stopping."""
