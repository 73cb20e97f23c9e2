"""Per-user item co-occurrence graphs (DGL)."""
