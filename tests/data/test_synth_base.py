"""What the generator's modules share (``data/synth/base.py``): ids, seed streams, checks."""

from __future__ import annotations

import numpy as np
import pytest

from basketgnn.data.synth.base import check, ids, streams


def test_ids_are_padded_to_sort_like_their_numbers() -> None:
    assert ids("C", 3, 2).tolist() == ["C00", "C01", "C02"]
    assert ids("C", 2, 2, first=99).tolist() == ["C099", "C100"]  # as wide as the largest
    assert ids("B", 2, 1, total=1000).tolist() == ["B000", "B001"]
    assert ids("B", 3, 1, total=50, numbers=np.array([7, 3, 49])).tolist() == ["B07", "B03", "B49"]
    many = ids("I", 1200, 3)
    assert sorted(many.tolist()) == many.tolist()


def test_streams_are_independent_and_fixed_by_the_seed() -> None:
    a, b = streams(5)
    x = np.random.default_rng(a).random(3)
    assert not np.array_equal(x, np.random.default_rng(b).random(3))
    np.testing.assert_array_equal(x, np.random.default_rng(streams(5)[0]).random(3))


def test_check_raises_the_message() -> None:
    check(True, "never")
    with pytest.raises(ValueError, match="^bad knob$"):
        check(False, "bad knob")
