from tests.integrations.fixtures import pipecat_python, relay_factory  # noqa: F401  (fixtures)
