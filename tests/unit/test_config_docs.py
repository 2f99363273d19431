"""docs/configuration.md's flag tables are what `voxgate serve`'s parser says (scripts/gen_config_docs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import ROOT, load_script, run_check


def test_doc_tables_are_generated_from_the_parser() -> None:
    done = run_check("gen_config_docs")
    assert done.returncode == 0, done.stdout + done.stderr


def test_check_fails_when_the_table_is_stale(tmp_path: Path) -> None:
    gen = load_script("gen_config_docs")
    doc = tmp_path / "configuration.md"
    text = (ROOT / "docs" / "configuration.md").read_text()
    doc.write_text(text)
    assert gen.check(doc) == 0
    doc.write_text(text.replace("| `--max-sessions` |", "| `--max-sessionz` |"))
    assert gen.check(doc) == 1


def test_the_callers_environment_does_not_leak_into_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOXGATE_MAX_SESSIONS", "3")
    row = next(
        line for line in load_script("gen_config_docs").tables().splitlines() if line.startswith("| `--max-sessions` |")
    )
    assert row.split(" | ")[1:3] == ["`VOXGATE_MAX_SESSIONS`", "`16`"]


def test_a_flag_without_an_environment_variable_says_so() -> None:
    gen = load_script("gen_config_docs")
    rows = {
        line.split(" | ")[0].removeprefix("| "): line.split(" | ")[1]
        for line in gen.tables().splitlines()
        if line.startswith("| `--")
    }
    assert rows["`--port`"] == "`VOXGATE_PORT`"
    assert all(env == "–" or env.startswith("`VOXGATE_") for env in rows.values())


def test_doc_without_markers_is_an_error() -> None:
    with pytest.raises(ValueError, match="flags:begin"):
        load_script("gen_config_docs").with_tables("# no table here\n", "| x |\n")
