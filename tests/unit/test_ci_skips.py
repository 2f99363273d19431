"""The skips CI allows (tests/conftest.py CI_ALLOWED_SKIPS) are the ones docs/testing.md lists, each with its reason."""

from __future__ import annotations

import re

from tests.conftest import CI_ALLOWED_SKIPS
from tests.helpers import ROOT


def test_testing_doc_lists_exactly_the_skips_ci_allows() -> None:
    doc = (ROOT / "docs" / "testing.md").read_text()
    block = re.search(r"<!-- ci-allowed-skips.*?-->\n(.*?)<!-- /ci-allowed-skips -->", doc, re.S)
    assert block, "docs/testing.md has no ci-allowed-skips list"
    listed = re.findall(r"^- `([^`]+)`: \S", block.group(1), re.M)
    assert sorted(listed) == sorted(CI_ALLOWED_SKIPS)
