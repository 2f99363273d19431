"""What the sidecar tells the vLLM processes about re-anchoring, and how a request opts in.

Settings travel in vLLM's own `additional_config` (it reaches the scheduler and every worker);
a request opts in through `SamplingParams.extra_args`, so a sidecar whose start-up checks failed
simply stops tagging requests and every session runs on rollover instead.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

CONFIG_KEY = "voxgate_reanchor"  # key in VllmConfig.additional_config
REQUEST_TAG = "voxgate_reanchor"  # key in SamplingParams.extra_args; value: the front end's request id
LOGGER = "vllm.voxgate.reanchor"  # under "vllm." so it prints inside vLLM's processes


@dataclass(frozen=True)
class ReanchorSettings:
    margin_tokens: int = 128  # re-anchor once a session's clock reaches max_model_len - margin
    # Negative controls for tests: skip rotating one side and the transcript must diverge.
    rotate_decoder: bool = True
    rotate_encoder: bool = True
    # RoPE cos/sin tables from float64 angles (vLLM's are float32 t*inv_freq): exact at large positions.
    exact_rope_tables: bool = False
    # RoPE applied in float64 and rounded once (vLLM's CPU kernel computes in the model dtype): an equivalent
    # bf16 reference whose keys round differently everywhere, for measuring bf16's own noise floor in tests.
    precise_rope: bool = False

    def as_config(self) -> dict[str, dict[str, Any]]:
        return {CONFIG_KEY: asdict(self)}

    @classmethod
    def from_vllm_config(cls, vllm_config: Any) -> ReanchorSettings | None:
        """None when the engine was started without re-anchoring."""
        raw = (getattr(vllm_config, "additional_config", None) or {}).get(CONFIG_KEY)
        return None if raw is None else cls(**raw)


def request_tag(sampling_params: Any) -> str | None:
    """The front end's request id when this request runs in re-anchor mode, else None."""
    extra = getattr(sampling_params, "extra_args", None) or {}
    tag = extra.get(REQUEST_TAG)
    return tag if isinstance(tag, str) else None
