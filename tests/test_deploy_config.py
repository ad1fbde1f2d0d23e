"""Serve configs and the typed application arguments (no Ray cluster needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from deploy.config import AppArgs, Knobs

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
CONFIGS = ("local.yaml", "config.yaml")


def _load(name: str) -> dict:
    return yaml.safe_load((DEPLOY / name).read_text())


@pytest.mark.parametrize("name", CONFIGS)
def test_config_is_a_valid_serve_deploy_file(name: str) -> None:
    """Property: `serve run`/`serve deploy` accept the file and its args build AppArgs."""
    from ray.serve.schema import ServeDeploySchema

    schema = ServeDeploySchema.model_validate(_load(name))
    app = schema.applications[0]
    assert app.import_path == "deploy.app:build_app"
    AppArgs.model_validate(app.args)
    engine = next(d for d in app.deployments if d.name == "LLMEngine")
    Knobs.model_validate(engine.user_config)


def test_local_config_is_cpu_only_and_gpu_config_splits_the_models() -> None:
    """Property: local.yaml asks for no GPU; config.yaml puts draft and target on one GPU
    each (two actors with num_gpus=1 cannot share a GPU)."""
    local = AppArgs.model_validate(_load("local.yaml")["applications"][0]["args"])
    assert local.target_actor.num_gpus == 0 and local.draft_actor.num_gpus == 0
    assert local.draft == "quant:int8"
    gpu = AppArgs.model_validate(_load("config.yaml")["applications"][0]["args"])
    assert gpu.target_actor.num_gpus == 1 and gpu.draft_actor.num_gpus == 1


@pytest.mark.parametrize("bad", [
    {"targte": "x"},  # typo: unknown field
    {"k_max": 9, "max_k_max": 8},
    {"max_slots": 0},
    {"dtype": "float64"},
    {"target_actor": {"num_gpus": 1, "gpus": 2}},
])
def test_app_args_reject_bad_fields(bad: dict) -> None:
    """Property: a misspelt or out-of-range argument fails at deploy time, not silently."""
    with pytest.raises(ValidationError):
        AppArgs.model_validate(bad)


def test_knobs_reject_unknown_fields() -> None:
    with pytest.raises(ValidationError):
        Knobs.model_validate({"kmax": 2})
