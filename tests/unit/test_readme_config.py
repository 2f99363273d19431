"""docs/configuration.md's flag table quotes the defaults service.config.Config has.

The table is generated from `voxgate serve`'s parser (scripts/gen_config_docs.py; tests/unit/test_config_docs.py
fails when it is stale); this checks the parser's defaults against Config itself, field by field.
"""

from __future__ import annotations

import re
from dataclasses import fields

from service.config import Config
from tests.helpers import ROOT

ROW = re.compile(r"^\| `--([a-z0-9-]+)`[^|]* \| [^|]+ \| ([^|]+) \|")


def documented_defaults() -> dict[str, str]:
    text = (ROOT / "docs" / "configuration.md").read_text()
    table = text.split("<!-- flags:begin -->", 1)[1].split("<!-- flags:end -->", 1)[0]
    return {m.group(1).replace("-", "_"): m.group(2).strip() for line in table.splitlines() if (m := ROW.match(line))}


def test_every_config_field_is_documented_with_its_default() -> None:
    quoted = documented_defaults()
    for f in fields(Config):
        if f.name in ("preset", "engine_options"):
            continue  # engine flags: their defaults are the engine's or the preset's
        assert f.name in quoted, f"docs/configuration.md has no row for --{f.name.replace('_', '-')}"
        text = quoted[f.name].strip("`")
        if isinstance(f.default, bool):
            assert text == str(f.default).lower(), (f.name, text)
        elif isinstance(f.default, int | float):
            assert float(text) == float(f.default), f"--{f.name}: the doc says {text!r}, Config has {f.default}"
        else:
            assert text == (f.default or "–"), (f.name, text)
