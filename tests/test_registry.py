"""The one registry: every model by name, lazily imported, with one clear error for a bad name."""

from __future__ import annotations

import subprocess
import sys

import pytest

from basketgnn import registry, workflow
from basketgnn.errors import UserError
from basketgnn.recommenders.topfreq import PTopFreq
from basketgnn.workflow.training import settings as settings_of


def test_every_model_is_listed_once_with_a_description():
    infos = registry.models()
    assert [m.name for m in infos] == ["g-topfreq", "p-topfreq", "tifu-knn", "up-cf", "dnntsp", "sasrec", "bert4rec", "din"]
    assert all(m.description for m in infos)
    assert registry.names("neural") == ["dnntsp", "sasrec", "bert4rec", "din"]
    assert "dnntsp (DNNTSP" in registry.help_text() and "tifu-knn (" in registry.help_text()


def test_neural_registration_names_the_package_whose_spec_matches():
    for name in registry.names("neural"):
        spec = registry.get_spec(name)
        assert spec.name == name
        assert spec.description == registry.NEURAL[name][1]  # one description, two places agree


def test_a_baseline_by_name_and_a_neural_model_s_settings_by_name():
    assert isinstance(registry.make_baseline("p-topfreq"), PTopFreq)
    settings = settings_of(workflow.ModelEntry("dnntsp", {"embed_dim": 8, "epochs": 1}))
    assert isinstance(settings.model, registry.config_class("dnntsp"))
    assert settings.model.embed_dim == 8 and settings.model.epochs == 1


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: registry.check_name("sasrecc"), r"Unknown model 'sasrecc'; choose one of g-topfreq, .*dnntsp"),
        (lambda: registry.get_spec("tifu-knn"), r"Unknown trainable model 'tifu-knn'; choose one of dnntsp"),
        (lambda: registry.make_baseline("tifu-knn", kk=3), r"Baseline 'tifu-knn': invalid options"),
        (lambda: settings_of(workflow.ModelEntry("dnntsp", {"embed_dims": 8})), r"embed_dims: unknown key"),
    ],
)
def test_bad_names_and_options_are_user_errors(call, message):
    with pytest.raises(UserError, match=message):
        call()


def test_the_registry_and_the_cli_import_no_model_until_one_is_used():
    code = (
        "import sys, basketgnn.registry, basketgnn.cli; "
        "print('basketgnn.models.dnntsp' in sys.modules, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_front_ends_the_workflow_and_the_engine_import_no_model_implementation():
    """Models are reached through the registry only: the CLI, pipeline, ablation, workflow core
    and engine import no model package and no baseline class (the models' shared contract,
    ``models.spec`` and ``models.options``, excepted)."""
    import ast
    from pathlib import Path

    root = Path(registry.__file__).parent
    layers = ("cli", "workflow", "pipeline", "experiments", "engine")
    files = [p for name in layers for p in [*root.glob(f"{name}.py"), *sorted((root / name).glob("*.py"))]]
    assert len(files) > 10
    allowed = {"basketgnn.models.spec", "basketgnn.models.options"}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                specific = name.startswith("basketgnn.models") or name in (
                    "basketgnn.recommenders.tifu_knn", "basketgnn.recommenders.topfreq")
                assert not specific or name in allowed, f"{path.name} imports {name}"
