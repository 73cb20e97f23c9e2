"""Top-k recommendations for every customer, in original ids, written atomically."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from basketgnn.data.dataset import BasketData
from basketgnn.data.split import Instances
from basketgnn.evaluate import rank_items
from basketgnn.io_utils import atomic_path
from basketgnn.recommenders.base import Recommender


def recommend_all(model: Recommender, data: BasketData, k: int) -> pd.DataFrame:
    """Rows (customer_id, item_id, rank, score): each customer's top k from the full history."""
    users = np.arange(data.n_users, dtype=np.int64)
    items, scores = rank_items(model, data, Instances(users, data.n_baskets_per_user.astype(np.int64)), k)
    k = items.shape[1]
    return pd.DataFrame(
        {
            "customer_id": np.repeat(data.user_ids, k),
            "item_id": data.item_ids[items.ravel()],
            "rank": np.tile(np.arange(1, k + 1, dtype=np.int32), data.n_users),
            "score": scores.ravel(),
        }
    )


def write_recommendations(frame: pd.DataFrame, path: str | Path) -> None:
    """Write Parquet or CSV (by extension) atomically."""
    path = Path(path)
    with atomic_path(path) as tmp:
        if path.name.endswith(".csv"):
            frame.to_csv(tmp, index=False)
        else:
            frame.to_parquet(tmp, index=False)
