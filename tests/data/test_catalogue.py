"""The item catalogue in the prepared data (basketgnn/data/catalogue.py): codes aligned with the
item index, ids read as the log's are, the folder round trip, and a catalogue that does not
follow a renumbering."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from basketgnn.data.catalogue import attach_catalogue
from basketgnn.data.dataset import BasketData, from_sequences


def _data() -> BasketData:
    data = from_sequences([[[0, 1], [2]], [[1, 3], [0, 3]]], n_items=4)
    return replace(data, item_ids=np.asarray(["10", "11", "12", "13"]))


def test_codes_follow_the_item_index_and_float_parquet_ids_match_whole_numbers(tmp_path):
    # Parquet ids as floats (13.0) read as the log's integer text ("13"); rows out of order,
    # an extra item, a missing cell.
    pd.DataFrame({"id": [13.0, 10.0, 99.0, 12.0, 11.0], "dept": ["b", "a", "z", None, "a"],
                  "size": [1, 2, 3, 1, 2]}).to_parquet(tmp_path / "c.parquet")  # fmt: skip
    data = attach_catalogue(_data(), tmp_path / "c.parquet", "id")
    cat = data.catalogue
    assert cat.columns == ("dept", "size")
    assert cat.values[0].tolist() == ["a", "b"]  # only the dataset's items' values, sorted
    assert cat.codes[:, 0].tolist() == [1, 1, 0, 2]  # items 10, 11, 12 (missing cell), 13
    assert cat.values[1][cat.codes[:, 1] - 1].tolist() == ["2", "2", "1", "1"]
    assert data.meta["catalogue"]["sizes"] == [3, 3] and data.meta["catalogue"]["unknown_values"]["dept"] == 1


def test_saved_and_loaded_with_the_data_and_dropped_by_a_renumbering(tmp_path):
    pd.DataFrame({"id": ["10", "11", "12", "13"], "dept": ["a", "b", "a", "c"]}).to_csv(tmp_path / "c.csv", index=False)
    data = attach_catalogue(_data(), tmp_path / "c.csv", "id")
    data.save(tmp_path / "d")
    back = BasketData.load(tmp_path / "d")
    assert back.catalogue.columns == ("dept",) and np.array_equal(back.catalogue.codes, data.catalogue.codes)
    assert back.catalogue.values[0].tolist() == ["a", "b", "c"]
    aligned, _ = back.aligned_to(np.asarray(["13", "10", "77"]))
    assert aligned.catalogue is None and "catalogue" not in aligned.meta
    aligned.save(tmp_path / "e")
    assert BasketData.load(tmp_path / "e").catalogue is None
    with pytest.raises(ValueError, match="one catalogue row per item"):
        replace(data, catalogue=replace(data.catalogue, codes=data.catalogue.codes[:3])).validate()
