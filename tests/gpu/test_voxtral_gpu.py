"""Real Voxtral-Mini-4B-Realtime on a GPU (skipped without CUDA, vLLM or a checkpoint).

VOXGATE_VOXTRAL_MODEL: a local Mistral-format checkpoint directory (params.json, tekken.json,
consolidated.safetensors) of mistralai/Voxtral-Mini-4B-Realtime-2602.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from engine_api.outputs import Closed, Delta
from tests.engine_streams import stream
from tests.helpers import read_wav_pcm, silence

pytestmark = pytest.mark.gpu


def _model() -> str:
    torch = pytest.importorskip("torch")
    pytest.importorskip("vllm")
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU")
    model = os.environ.get("VOXGATE_VOXTRAL_MODEL", "")
    if not model or not (Path(model) / "params.json").exists():
        pytest.skip("set VOXGATE_VOXTRAL_MODEL to a local Voxtral realtime checkpoint")
    return model


def test_real_checkpoint_transcribes_speech() -> None:
    from engine_sidecar.engines.voxtral.engine import VoxtralEngine

    model = _model()
    pcm = read_wav_pcm("go_forward.wav")[0] + silence(1.0)

    async def go() -> list[object]:
        engine = VoxtralEngine(
            model,
            4,
            {
                "max_model_len": 4096,
                "max_num_seqs": 4,
                "decoder_sliding_window": 512,
                "encoder_sliding_window": 256,
                "gpu_memory_utilization": 0.8,
            },
        )
        await engine.start()
        try:
            assert engine.info.transcription_delay_ms > 0
            return (await stream(await engine.open_session("gpu", "en"), pcm)).outputs
        finally:
            await engine.shutdown()

    outputs = asyncio.run(go())
    assert isinstance(outputs[-1], Closed)
    text = "".join(o.text for o in outputs if isinstance(o, Delta)).lower()
    assert "forward" in text, text
