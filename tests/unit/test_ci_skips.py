"""The skips CI allows (tests/conftest.py CI_ALLOWED_SKIPS) are the ones README.md lists, each with its reason."""

from __future__ import annotations

import re

from tests.conftest import CI_ALLOWED_SKIPS
from tests.helpers import ROOT


def test_readme_lists_exactly_the_skips_ci_allows() -> None:
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- ci-allowed-skips.*?-->\n(.*?)<!-- /ci-allowed-skips -->", readme, re.S)
    assert block, "README.md has no ci-allowed-skips list"
    listed = re.findall(r"^- `([^`]+)`: \S", block.group(1), re.M)
    assert sorted(listed) == sorted(CI_ALLOWED_SKIPS)
