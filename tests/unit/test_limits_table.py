"""docs/configuration.md's flow-control table is what the limits modules say; each bound comes from them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from engine_api.audio import CHUNK_MS
from engine_sidecar.engines import limits as sidecar_limits
from engine_sidecar.engines.output_queue import OutputChannel
from engine_sidecar.engines.voxtral.options import VoxtralOptions
from service import limits
from service.config import Config
from service.session.engine_inputs import engine_queue
from tests.helpers import ROOT, load_script, run_check
from voxgate_client import ResumePolicy
from voxgate_client import limits as client_limits


def test_doc_table_is_generated_from_the_limits_modules() -> None:
    done = run_check("gen_limits_table", timeout_s=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_check_fails_when_a_bound_changes(tmp_path: Path) -> None:
    gen = load_script("gen_limits_table")
    doc = tmp_path / "configuration.md"
    doc.write_text((ROOT / "docs" / "configuration.md").read_text())
    assert gen.check(doc) == 0
    changed = dataclasses.replace(limits.ENGINE_QUEUE, value=limits.ENGINE_QUEUE.value * 2)
    table = gen.table((("service", (changed,)),))
    doc.write_text(gen.with_table(doc.read_text(), table))
    assert gen.check(doc) == 1


def test_the_table_states_bounds_in_ms_of_audio_or_messages() -> None:
    gen = load_script("gen_limits_table")
    assert gen.bound_text(limits.ENGINE_QUEUE) == "5120 ms of audio"  # 64 chunks of 80 ms
    assert gen.bound_text(limits.AUDIO_MESSAGE).startswith("2048 ms of audio (65536 bytes")
    assert gen.bound_text(limits.ENGINE_OUTPUTS) == "64 messages"


def test_doc_without_markers_is_an_error() -> None:
    with pytest.raises(ValueError, match="limits:begin"):
        load_script("gen_limits_table").with_table("# no table here\n", "| x |\n")


def test_configurable_bounds_are_the_config_defaults() -> None:
    """A service limit with a flag names a Config field, and Config's default is the limit's value."""
    defaults = {f.name: f.default for f in dataclasses.fields(Config)}
    flagged = [limit for limit in limits.LIMITS if limit.setting]
    assert flagged
    for limit in flagged:
        field = limit.setting.removeprefix("--").replace("-", "_")
        assert defaults.get(field) == limit.value, limit


def test_modules_take_their_bounds_from_the_limits_modules() -> None:
    assert engine_queue().maxsize * CHUNK_MS == limits.ENGINE_QUEUE.value
    assert OutputChannel()._queue.maxsize == sidecar_limits.OUTPUTS.value
    options = VoxtralOptions()
    assert options.max_backlog_ms == sidecar_limits.BACKLOG.value
    assert options.admission_max_lag_ms == sidecar_limits.ADMISSION_LAG.value
    assert ResumePolicy().max_unacked_bytes == client_limits.UNACKED_AUDIO.value
