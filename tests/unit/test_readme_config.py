"""The README's configuration table quotes the defaults the code has (it is written by hand)."""

from __future__ import annotations

import re
from dataclasses import fields

from service.config import Config
from tests.helpers import ROOT

ROW = re.compile(r"^\| `--([a-z0-9-]+)` \| ([^|]+) \|")


def readme_defaults() -> dict[str, str]:
    section = (ROOT / "README.md").read_text().split("## Configuration", 1)[1].split("\n## ", 1)[0]
    return {m.group(1).replace("-", "_"): m.group(2).strip() for line in section.splitlines()
            if (m := ROW.match(line))}


def test_every_single_flag_row_quotes_the_configs_default() -> None:
    defaults = {f.name: f.default for f in fields(Config)}
    quoted = readme_defaults()
    assert len(quoted) >= 6, quoted
    for name, text in quoted.items():
        assert name in defaults, f"README documents --{name}, which voxgate serve does not have"
        value = defaults[name]
        first = text.split()[0].strip("`,")
        if isinstance(value, int | float) and not isinstance(value, bool):
            assert float(first) == float(value), f"--{name}: README says {text!r}, the default is {value}"
