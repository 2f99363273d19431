"""GPU tests share the engine tests' tiny checkpoint fixture."""

from tests.engine.conftest import tiny_model  # noqa: F401  (a fixture)
