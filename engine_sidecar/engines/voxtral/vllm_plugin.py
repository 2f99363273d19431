"""vLLM general plugin (entry point group `vllm.general_plugins`).

vLLM loads it in every one of its processes, whatever starts vLLM, voxgate or not, and does not catch its
errors: a failure here would stop every vLLM start on this machine. So it only adds new, prefixed utility calls
to EngineCore (the re-anchoring ones: reanchor/engine_core.py; the one that frees a dead front end's requests:
core_calls.py), imports nothing but EngineCore, which every vLLM of the window has, and never raises.
Re-anchoring's worker side is the `worker_extension_cls` the sidecar names; it needs no plugin.
"""

from __future__ import annotations

import logging

from engine_sidecar.engines.voxtral.reanchor.settings import LOGGER


def register() -> None:
    try:
        from vllm.v1.engine.core import EngineCore

        from engine_sidecar.engines.voxtral.core_calls import install_abort_client
        from engine_sidecar.engines.voxtral.reanchor.engine_core import install_core_calls

        install_core_calls(EngineCore)
        install_abort_client(EngineCore)
    except Exception as exc:  # noqa: BLE001 - never break a vLLM start: voxgate's sidecar sees the calls missing
        logging.getLogger(LOGGER).warning("voxgate's vLLM plugin did not load: %r", exc)
