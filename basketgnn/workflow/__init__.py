"""The single core every front end calls (the CLI, the pipeline, the ablation): prepare ->
split -> train -> evaluate -> choose by validation -> recommend.

- :mod:`~basketgnn.workflow.config`: settings from YAML and overrides (:class:`Settings`).
- :mod:`~basketgnn.workflow.training`: :func:`train` any model, :func:`load_trained` a checkpoint.
- :mod:`~basketgnn.workflow.experiment`: :class:`Experiment`, the typed :class:`ModelResult`,
  the choice of a model by validation.
- :mod:`~basketgnn.workflow.harness`: the evaluation harness.
- :mod:`~basketgnn.workflow.recommendations`: top-k rows for every customer, one file or sharded parts.
- :mod:`~basketgnn.workflow.ray_scoring`: the sharded parts written by Ray actors (``recommend --ray``).
"""

from basketgnn.workflow.config import Settings, load_config
from basketgnn.workflow.experiment import (
    Experiment,
    ModelResult,
    evaluate,
    first_customer_line,
    prepare,
    recommend,
    select_by_validation,
    split,
    validation_record,
)
from basketgnn.workflow.training import FitOutcome, ModelEntry, data_stamp, load_trained, train

__all__ = [
    "Experiment", "FitOutcome", "data_stamp", "ModelEntry", "ModelResult", "Settings", "evaluate",
    "first_customer_line", "load_config", "load_trained", "prepare", "recommend",
    "select_by_validation", "split", "train", "validation_record",
]
