"""The config factory: YAML + overrides -> a model's settings (its config and the fusion's
options), with clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from basketgnn.errors import UserError
from basketgnn.models.dnntsp import DNNTSPConfig
from basketgnn.recommenders.fused import FusionOptions
from basketgnn.workflow.config import Settings, config_reference, load_config, settings_from

PROJECT = Path(__file__).resolve().parents[2]


def test_yaml_then_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("embed_dim: 16\nlr: 0.01\n")
    cfg = load_config(path, lr=0.5, seed=None).model
    assert (cfg.embed_dim, cfg.lr, cfg.seed) == (16, 0.5, 0)


def test_unknown_key_and_bad_value_are_user_errors(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("embed_dimension: 16\n")
    with pytest.raises(
        UserError, match=r"c\.yaml: invalid config \(embed_dimension: unknown key \(valid: .*embed_dim, "
    ):
        load_config(path)
    # the field path, pydantic's reason and the value found
    with pytest.raises(UserError, match=r"invalid config \(head_merge: Input should be .*\(got 'sum'\)\)"):
        load_config(None, head_merge="sum")
    path.write_text("lr: -1\nembed_dim: 30\n")
    with pytest.raises(UserError, match=r"c\.yaml: invalid config \(lr: Input should be greater than 0 \(got -1\)\)"):
        load_config(path)
    # a check across keys has no path; its message is shown without pydantic's prefix
    with pytest.raises(UserError, match=r"invalid config \(embed_dim 30 must be divisible by heads 4"):
        load_config(None, embed_dim=30, heads=4)



def test_bad_combinations_and_device_are_user_errors_without_a_file():
    with pytest.raises(UserError, match="embed_dim 30 must be divisible by heads 4"):
        load_config(None, embed_dim=30)
    with pytest.raises(UserError, match="device"):
        load_config(None, device="bogus")

def test_validation_errors_name_nested_keys_list_positions_and_valid_keys():
    from pydantic import BaseModel, ConfigDict, ValidationError

    from basketgnn.workflow.config import describe_validation_error

    class Inner(BaseModel):
        model_config = ConfigDict(extra="forbid")
        size: int = 1
        name: str = "x"

    class Outer(BaseModel):
        model_config = ConfigDict(extra="forbid")
        inner: Inner = Inner()
        items: list[str | dict[str, int]] = []
        required: str

    with pytest.raises(ValidationError) as err:
        Outer(inner={"sise": 2}, items=["ok", 3])
    text = describe_validation_error(err.value, Outer)
    assert text.split("; ") == [
        "inner.sise: unknown key (valid: size, name)",
        "items[1]: Input should be a valid string (got 3)",  # union member tags left out
        "items[1]: Input should be a valid dictionary (got 3)",
        "required: required key missing",
    ]


def test_reference_lists_every_option_and_loads_back(tmp_path):
    text = config_reference()
    for name in [*DNNTSPConfig.model_fields, *FusionOptions.model_fields]:
        assert f"\n{name}: " in "\n" + text
    assert all(line.startswith("# ") for line in text.splitlines()[::2])  # one line per option
    path = tmp_path / "all.yaml"
    path.write_text(text)
    assert load_config(path) == Settings(DNNTSPConfig(), FusionOptions())


def test_published_preset_turns_every_extension_off():
    settings = load_config(PROJECT / "configs" / "published.yaml")
    cfg = settings.model
    assert settings.fusion.fusion == "off"
    assert not (cfg.presence or cfg.repeat_features or cfg.user_context or cfg.train_prefixes)
    assert not (cfg.item_prior or cfg.explore_attention or cfg.base_rate_init)
    assert (cfg.max_history, cfg.train_history_items, cfg.batch_work, cfg.min_steps) == (0, 0, 0, 0)
    assert (cfg.embed_dim, cfg.lr, cfg.batch_size, cfg.heads, cfg.gcn_layers) == (32, 1e-3, 64, 4, 2)


def test_fusion_options_sit_beside_the_model_options(tmp_path):
    settings = load_config(None)
    assert settings.fusion == FusionOptions() and settings.fusion.fusion == "tifu"
    bare = tmp_path / "c.yaml"
    bare.write_text("fusion: off\ntransitions: false\nneighbour_pool_cap: 50\nfusion_criterion: at10\nlr: 0.5\n")  # a bare off is false
    settings = load_config(bare)
    assert (settings.fusion.fusion, settings.fusion.transitions, settings.fusion.neighbour_pool_cap) == ("off", False, 50)
    assert settings.fusion.fusion_criterion == "at10" and FusionOptions().fusion_criterion == "mean"
    assert settings.model.lr == 0.5 and "fusion" not in settings.model.model_dump()
    assert settings.dump() == {**settings.model.model_dump(), **settings.fusion.model_dump()}
    updated = settings.update(fusion="tifu", lr=0.1)
    assert (updated.fusion.fusion, updated.model.lr, updated.fusion.neighbour_pool_cap) == ("tifu", 0.1, 50)
    with pytest.raises(UserError, match=r"fusion: Input should be 'tifu' or 'off'"):
        load_config(None, fusion="neighbours")
    with pytest.raises(UserError, match=r"fusion_criterion: Input should be 'mean' or 'at10'"):
        load_config(None, fusion_criterion="at5")
    with pytest.raises(UserError, match=r"neighbour_pool_cap: Input should be greater than or equal to 1"):
        load_config(None, neighbour_pool_cap=0)
    with pytest.raises(UserError, match=r"neighbour_weight: an option of the neighbour add-on, which the fusion "
                       r"with TIFU-KNN \(fusion: tifu\) replaces; delete it"):
        load_config(None, neighbour_weight=0.3)
    with pytest.raises(UserError, match=r"rerank: true reads TIFU-KNN's parts; it needs fusion: tifu"):
        load_config(None, fusion="off", rerank=True)
    # The stage is on by default with the fusion, off without it, and back with the fusion.
    assert FusionOptions().rerank and not settings.fusion.rerank
    assert updated.fusion.rerank and not updated.update(rerank=False).fusion.rerank
    assert not load_config(None, fusion="tifu", rerank=False).update(fusion="tifu").fusion.rerank
    with pytest.raises(UserError, match=r"foo: unknown key \(valid: .*embed_dim, .*fusion, transitions, rerank, rerank_pairs, neighbour_pool_cap, fusion_criterion\)"):
        load_config(None, foo=1)


def test_paper_preset_is_published_yaml_and_the_constructors_defaults():
    import inspect

    import yaml

    from basketgnn.models.dnntsp import DNNTSP, PAPER

    paper = PAPER
    published = yaml.safe_load((PROJECT / "configs" / "published.yaml").read_text())
    assert published.keys() == paper.keys()  # the same keys, the same values once read
    assert settings_from(published) == settings_from(paper)
    assert load_config(None, preset="paper") == load_config(PROJECT / "configs" / "published.yaml")
    # The architecture: every constructor argument, at the constructor's own default.
    params = {n: p.default for n, p in inspect.signature(DNNTSP.__init__).parameters.items()
              if n not in ("self", "num_items")}  # fmt: skip
    assert {n: paper[n] for n in params} == params
    # The authors' schedule.
    cfg = load_config(None, preset="paper").model
    assert (cfg.lr, cfg.batch_size, cfg.epochs, cfg.weight_decay) == (1e-3, 64, 100, 0.0)
    assert (cfg.lr_schedule, cfg.lr_patience, cfg.batch_order, cfg.batchnorm_padding) == ("plateau", 10, "ordered", True)
    assert cfg.patience >= cfg.epochs and cfg.min_steps == 0 and cfg.batch_work == 0


def test_preset_under_config_file_and_overrides(tmp_path):
    from basketgnn.workflow.config import parse_sets

    path = tmp_path / "c.yaml"
    path.write_text("lr: 0.01\nbatch_order: shuffled\n")
    cfg = load_config(path, preset="paper", **parse_sets(["seed=3", "epochs=7"])).model
    assert (cfg.lr, cfg.batch_order, cfg.seed, cfg.epochs, cfg.lr_patience) == (0.01, "shuffled", 3, 7, 10)
    assert load_config(None, preset="default") == load_config(None)
    assert parse_sets(["fusion=off", "dropout=0.5", "device=cpu"]) == {"fusion": False, "dropout": 0.5, "device": "cpu"}
    assert load_config(None, **parse_sets(["fusion=off"])).fusion.fusion == "off"
    with pytest.raises(UserError, match=r"--preset: sasrec has no preset 'papr' \(choose one of default, paper\)"):
        load_config(None, model="sasrec", preset="papr")
    with pytest.raises(UserError, match=r"--set 'seed': write KEY=VALUE"):
        parse_sets(["seed"])
