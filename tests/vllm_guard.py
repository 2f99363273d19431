"""Importing vLLM in tests: a skip where it is not installed, a failure in CI.

CI (.ci/run) sets VOXGATE_REQUIRE_VLLM=1: there a missing vLLM, or a vLLM module that moved, fails the
test instead of skipping it. Use this instead of pytest.importorskip("vllm...") everywhere.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest

REQUIRED = os.environ.get("VOXGATE_REQUIRE_VLLM") == "1"


def import_vllm(name: str = "vllm") -> ModuleType:
    if REQUIRED:
        return importlib.import_module(name)
    return pytest.importorskip(name)
