"""vLLM general plugin (entry point group `vllm.general_plugins`): vLLM loads it in every one of its
processes, so the worker hook exists wherever a model runner does, whatever the executor layout.
Inert until the sidecar's set-up call arms it on the model runner (worker.ReanchorWorkerExtension).
In the EngineCore it adds the tripwire's utility call (tripwire.py) and the one that frees a dead front
end's requests (voxtral/core_calls.py).
"""

from __future__ import annotations


def register() -> None:
    from engine_sidecar.engines.voxtral.core_calls import install_abort_client
    from engine_sidecar.engines.voxtral.reanchor.tripwire import install_core_poll
    from engine_sidecar.engines.voxtral.reanchor.worker import install_hook

    install_hook()
    install_core_poll()
    install_abort_client()
