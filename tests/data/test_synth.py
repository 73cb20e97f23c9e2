"""The synthetic log package's face (``data/synth/__init__.py``): its public names, and that
the items it documents are those the log holds."""

from __future__ import annotations

import basketgnn.data.synth as synth


def test_public_names() -> None:
    assert set(synth.__all__) == {
        "COLUMNS", "GROCERY", "NON_PRODUCT_CODES", "REALISTIC", "Chunk", "ItemStructure", "Knobs",
        "RealisticExport", "generate_log", "item_structure", "realistic_export", "write_log",
        "write_log_parts",
    }  # fmt: skip
    assert all(hasattr(synth, name) for name in synth.__all__)


def test_log_items_are_the_item_structure_of_its_seed() -> None:
    log = synth.generate_log(n_customers=50, n_items=30, seed=4)
    assert set(log["item_id"]) <= set(synth.item_structure(30, 4).item_ids)
