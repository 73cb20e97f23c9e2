"""Training DNNTSP: losses, the training loop, checkpoints."""
