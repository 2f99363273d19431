"""Switches for tests and diagnosis, never for serving: they are not engine options, and no flag sets them.

In process a test gives them to VoxtralEngine; a sidecar process (its front ends and its engine core host
alike) reads them from VOXGATE_VOXTRAL_PROBES, a JSON object, which only tests set.

The front end's three fast paths (each 80 ms step's engine input, how the steps reach vLLM, each token's
text) are checked against vLLM's own at start-up and used only where they agree; otherwise vLLM's path
serves (`*_fallback` in the log). That fallback is the product's. "vllm" here forces vLLM's path, so that
tests can compare the two.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PROBES_ENV = "VOXGATE_VOXTRAL_PROBES"


@dataclass(frozen=True)
class Probes:
    exact_rope_tables: bool = False  # RoPE tables from float64 angles (exact at large positions)
    precise_rope: bool = False  # RoPE in float64, rounded once: an equivalent bf16 reference
    reanchor_rotate: str = "all"  # "all" | "decoder" | "none": negative controls of re-anchoring
    emit_empty_deltas: bool = False  # one Delta per token, even blank ones
    blank_logit_bias: float = 0.0  # added to the blank token's logit (a large value forces a rut)
    chunk_render: str = "direct"  # "direct" (where checked equal, the default) | "vllm": vLLM's renderer
    step_driver: str = "direct"  # "direct" (where checked equal, the default) | "vllm": AsyncLLM.generate
    detokenizer: str = "own"  # "own" (where checked equal, the default) | "vllm": vLLM's detokenizer

    def __post_init__(self) -> None:
        for name, allowed in (
            ("reanchor_rotate", ("all", "decoder", "none")),
            ("chunk_render", ("direct", "vllm")),
            ("step_driver", ("direct", "vllm")),
            ("detokenizer", ("own", "vllm")),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"probe {name} must be one of {', '.join(allowed)}")

    @property
    def reanchor_extension(self) -> bool:
        """Whether vLLM must load the re-anchoring extension for these probes, re-anchoring on or not."""
        return self.exact_rope_tables or self.precise_rope

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> Probes:
        names = {f.name for f in dataclasses.fields(cls)}
        if unknown := set(values) - names:
            raise ValueError(f"unknown probes {sorted(unknown)}; known: {', '.join(sorted(names))}")
        return cls(**values)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Probes:
        return cls.from_mapping(json.loads(raw)) if (raw := environ.get(PROBES_ENV)) else cls()

    def env(self) -> dict[str, str]:
        """The variable that gives a sidecar process these probes."""
        return {PROBES_ENV: json.dumps(dataclasses.asdict(self))}


def split(values: Mapping[str, Any]) -> tuple[dict[str, Any], Probes]:
    """One mapping of settings (a test's) as engine options and probes."""
    names = {f.name for f in dataclasses.fields(Probes)}
    return {k: v for k, v in values.items() if k not in names}, Probes(
        **{k: v for k, v in values.items() if k in names}
    )
