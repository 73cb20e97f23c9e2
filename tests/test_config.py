"""The config factory: YAML + overrides -> DNNTSPConfig, with clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from basketgnn.config import config_reference, load_config
from basketgnn.errors import UserError
from basketgnn.models.dnntsp import DNNTSPConfig

PROJECT = Path(__file__).resolve().parent.parent


def test_yaml_then_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("embed_dim: 16\nlr: 0.01\n")
    cfg = load_config(path, lr=0.5, seed=None)
    assert (cfg.embed_dim, cfg.lr, cfg.seed) == (16, 0.5, 0)


def test_unknown_key_and_bad_value_are_user_errors(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("embed_dimension: 16\n")
    with pytest.raises(UserError, match="c.yaml: invalid config .*embed_dimension.*Valid keys: embed_dim"):
        load_config(path)
    with pytest.raises(UserError, match="head_merge"):
        load_config(None, head_merge="sum")


def test_reference_lists_every_option_and_loads_back(tmp_path):
    text = config_reference()
    for name in DNNTSPConfig.model_fields:
        assert f"\n{name}: " in "\n" + text
    path = tmp_path / "all.yaml"
    path.write_text(text)
    assert load_config(path) == DNNTSPConfig()


def test_published_preset_turns_every_extension_off():
    cfg = load_config(PROJECT / "configs" / "published.yaml")
    assert not (cfg.presence or cfg.repeat_features or cfg.user_context or cfg.train_prefixes)
    assert (cfg.embed_dim, cfg.lr, cfg.batch_size, cfg.heads, cfg.gcn_layers) == (32, 1e-3, 64, 4, 2)
