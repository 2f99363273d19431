"""The vLLM releases the voxtral engine runs on, and every private piece of vLLM it touches.

versions.py: the window (which releases, what differs between them at run time, the start-up check).
symbols.py: every vLLM module, class, attribute and signature voxgate relies on, by concern and release;
checked at start-up against the installed vLLM (installed.py) and, for every release of the window,
against its wheel's sources without installing it (tests/vllm_sources/).
worker.py: the worker-side accessors (the model runner, its KV cache), the same for runner V1 and V2.
Porting to the next vLLM: docs/voxtral.md, "A new vLLM release".
"""
