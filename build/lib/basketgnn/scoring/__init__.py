"""Scores below the recommenders: TIFU machinery and score fusion, usable by any model.

- ``tifu``: TIFU-KNN's customer vectors, neighbour search, neighbour mean and tuning;
- ``transitions``: the item-transition score (what follows a customer's items);
- ``sparse``: :class:`~basketgnn.scoring.sparse.SparseScores`, kept scores as CSR rows;
- ``candidates``: exact top-k of (fused) scores from a few candidates per customer;
- ``fusion``: :class:`~basketgnn.scoring.fusion.ScoreFusion`, a model fused with TIFU-KNN;
- ``fusion_choice``: the fusion chosen on validation (``choose_fusion``);
- ``*_kernel``: each component's compiled (numba) kernels beside it, and ``select_kernel``
  the primitives they share.
"""
