"""The DNNTSP building blocks, one module per component."""
