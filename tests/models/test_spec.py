"""The model contract (basketgnn/models/spec.py) and the shared training options
(basketgnn/models/options.py): TrainOptions' defaults and checks, ModelSpec's optional hooks, and
every registered model's SPEC at its default settings: a config that is TrainOptions, batches
whose targets are the target baskets, and a module scoring [B, n_items] on a tiny batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from basketgnn import registry
from basketgnn.data.dataset import from_sequences
from basketgnn.data.split import Instances
from basketgnn.models.options import TrainOptions
from basketgnn.models.spec import ModelSpec

pytestmark = pytest.mark.usefixtures("one_torch_thread")

N_ITEMS = 9
SEQUENCES = [[[1, 2], [3], [4, 5, 6], [0, 7]], [[0], [2, 3]], [[5], [5, 6], [1], [2], [8, 4]]]
INSTANCES = Instances(np.array([0, 1, 2, 2]), np.array([3, 1, 4, 2]))


def test_train_options_defaults():
    options = TrainOptions()
    assert (options.loss, options.lr, options.weight_decay, options.batch_size) == ("softmargin", 1e-3, 0.0, 64)
    assert (options.epochs, options.patience, options.min_steps, options.lr_patience) == (100, 10, 0, 3)
    assert (options.lr_schedule, options.train_prefixes, options.seed) == ("plateau", False, 0)
    assert (options.device, options.threads, options.batch_work) == ("cpu", 0, 200_000)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"device": "bogus"}, r"device\n.*not a torch device"),
        ({"lr": -0.1}, r"lr\n.*greater than 0"),
        ({"lr": 0}, r"lr\n.*greater than 0"),
        ({"batch_size": 0}, r"batch_size\n.*greater than or equal to 1"),
        ({"weight_decay": -1}, r"weight_decay\n.*greater than or equal to 0"),
        ({"loss": "hinge"}, r"loss\n.*'softmargin', 'bpr' or 'mse'"),
        ({"embed_dim": 8}, r"embed_dim\n.*Extra inputs are not permitted"),
    ],
)
def test_train_options_refuse_bad_values(values, message):
    with pytest.raises(ValidationError, match=message):
        TrainOptions(**values)


def test_a_cuda_device_needs_cuda():
    if torch.cuda.is_available():
        assert TrainOptions(device="cuda").device == "cuda"
    else:
        with pytest.raises(ValidationError, match="CUDA is not available on this machine; use device: cpu"):
            TrainOptions(device="cuda")


def test_model_spec_hooks_default_to_none():
    spec = ModelSpec("m", "a model", TrainOptions, build=lambda n, c: torch.nn.Linear(1, n),
                     batches=lambda d, i, c, t: None)  # fmt: skip
    assert (spec.loss, spec.skip_batch, spec.init, spec.item_indexed, spec.score_sparse) == (None,) * 5


@pytest.mark.parametrize("name", registry.names("neural"))
def test_every_registered_model_scores_every_item_of_a_tiny_batch(name):
    spec = registry.get_spec(name)
    assert issubclass(spec.config_cls, TrainOptions)
    config = spec.config_cls(threads=1)  # the model's defaults validate
    data = from_sequences(SEQUENCES, n_items=N_ITEMS)
    torch.manual_seed(0)
    module = spec.build(N_ITEMS, config)
    source = spec.batches(data, INSTANCES, config, True)
    assert len(source) == len(INSTANCES) and len(source.lengths) == len(INSTANCES)
    batch = source.collate(np.arange(len(INSTANCES)))
    targets = data.targets(INSTANCES.users, INSTANCES.n_history)
    assert batch.target_offsets.tolist() == targets.offsets.tolist()
    assert sorted(batch.target_items.tolist()) == sorted(targets.values.tolist())
    module.eval()
    with torch.no_grad():
        scores = module(spec.batches(data, INSTANCES, config, False).collate(np.arange(len(INSTANCES)), False))
    assert scores.shape == (len(INSTANCES), N_ITEMS) and torch.isfinite(scores).all()
    with torch.no_grad():  # a batch of some instances only: one row each
        some = module(source.collate(np.array([2, 0])))
    assert some.shape == (2, N_ITEMS)
