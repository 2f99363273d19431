"""Phrase hints from the wire: voxgate's API, the unmodified Riva and Google clients and `voxgate transcribe`
reach the engine with the same phrases and boosts; limits are refused naming the field as the client wrote it; an
engine that cannot use hints says so.

The fake engine makes its words from the hinted phrases (engine_sidecar/engines/fake.py), so what reached it shows
in the transcript; Whisper writes a hinted name (the recall over a set: test_keyterms.py); sphinx ignores hints
and must say so.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
import riva.client
from google.api_core import exceptions
from google.cloud import speech_v1 as speech
from google.cloud.speech_v1.services.speech.transports import SpeechGrpcTransport

from service.phrase_hints import DEFAULT_BOOST, MAX_BOOST, MAX_PHRASE_CHARS, MAX_PHRASES, MIN_BOOST
from tests.helpers import FIXTURES, ServerProcess, error_reason, read_wav_pcm, silence
from tests.integration.client_examples import BUILD_TIMEOUT_S, go_example, node_example
from voxgate_client import Phrase, SpeechClient, StreamConfig
from voxgate_client.v1 import speech_pb2 as pb

__all__ = ["go_example", "node_example"]  # fixtures
PHRASES = (Phrase("Siobhan Kowalczyk", 15), Phrase("Ozempic"))
HINTED_WORDS = {"Siobhan", "Kowalczyk", "Ozempic"}
KEYTERMS = FIXTURES / "keyterms"
VOCABULARY = {"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"}  # the fake's own


def speech_audio() -> bytes:
    pcm, rate = read_wav_pcm("go_forward.wav")
    assert rate == 16000
    return pcm + silence(1.0)


def pieces(pcm: bytes) -> list[bytes]:
    return [pcm[i : i + 3200] for i in range(0, len(pcm), 3200)]


def voxgate_stream(server: ServerProcess, phrases: tuple[Phrase, ...]) -> list[pb.StreamingRecognizeResponse]:
    config = StreamConfig(encoding="linear16", sample_rate_hz=16000, phrases=phrases)
    with SpeechClient(server.target) as client:
        return list(client.stream(config, pieces(speech_audio()), pace=None, timeout=60))


def finals(responses: list[pb.StreamingRecognizeResponse]) -> str:
    return " ".join(r.result.text for r in responses if r.HasField("result") and r.result.is_final).strip()


def test_hints_reach_the_engine_with_their_boosts(fake_server: ServerProcess) -> None:
    plain = finals(voxgate_stream(fake_server, ()))
    assert plain and set(plain.split()) <= VOCABULARY
    responses = voxgate_stream(fake_server, PHRASES)
    started = responses[0].started
    assert started.phrase_hints == pb.PHRASE_HINT_SUPPORT_BOOST
    applied = [(p.value, p.boost) for p in started.effective_config.phrase_hints.phrases]
    assert applied == [("Siobhan Kowalczyk", 15), ("Ozempic", DEFAULT_BOOST)]
    hinted = finals(responses)
    assert hinted and set(hinted.split()) <= HINTED_WORDS, hinted
    assert len(hinted.split()) == len(plain.split()), "the same audio makes as many words"
    assert not any(r.HasField("warning") for r in responses)


def test_the_most_hints_the_limits_allow_reach_the_engine(fake_server: ServerProcess) -> None:
    """500 phrases of 100 characters each, four-byte characters included: the engine's Open carries them all."""
    phrases = tuple(Phrase(f"{i:03d}" + "\U0001f600" * (MAX_PHRASE_CHARS - 3), -1) for i in range(MAX_PHRASES))
    responses = voxgate_stream(fake_server, phrases)
    applied = responses[0].started.effective_config.phrase_hints.phrases
    assert [p.value for p in applied] == [p.value for p in phrases]
    plain = finals(responses)
    assert plain and set(plain.split()) <= VOCABULARY, "disfavoured phrases are not the fake's words"


def test_capabilities_say_what_the_engine_does_and_the_limits(fake_server: ServerProcess) -> None:
    caps = fake_server.stub().GetCapabilities(pb.GetCapabilitiesRequest(), timeout=10).phrase_hints
    assert caps.support == pb.PHRASE_HINT_SUPPORT_BOOST
    limits = (caps.max_phrases, caps.max_phrase_chars, caps.min_boost, caps.max_boost, caps.default_boost)
    assert limits == (MAX_PHRASES, MAX_PHRASE_CHARS, MIN_BOOST, MAX_BOOST, DEFAULT_BOOST)


@pytest.mark.parametrize(
    ("hints", "field"),
    [
        (
            pb.PhraseHints(phrases=[pb.Phrase(value="ok"), pb.Phrase(value="  ")]),
            "config.phrase_hints.phrases[1].value",
        ),
        (
            pb.PhraseHints(phrases=[pb.Phrase(value="x" * (MAX_PHRASE_CHARS + 1))]),
            "config.phrase_hints.phrases[0].value",
        ),
        (pb.PhraseHints(phrases=[pb.Phrase(value="p")] * (MAX_PHRASES + 1)), "config.phrase_hints.phrases"),
        (pb.PhraseHints(phrases=[pb.Phrase(value="p", boost=MAX_BOOST * 2)]), "config.phrase_hints.phrases[0].boost"),
        (pb.PhraseHints(phrases=[pb.Phrase(value="p")], boost=MIN_BOOST * 2), "config.phrase_hints.boost"),
    ],
)
def test_a_hint_past_a_limit_is_refused_naming_its_field(
    fake_server: ServerProcess, hints: pb.PhraseHints, field: str
) -> None:
    config = pb.StreamingConfig(encoding=pb.AUDIO_ENCODING_LINEAR16, sample_rate_hz=16000, phrase_hints=hints)
    requests = iter([pb.StreamingRecognizeRequest(config=config)])
    with pytest.raises(grpc.RpcError) as info:
        list(fake_server.stub().StreamingRecognize(requests, timeout=30))
    code, reason, meta = error_reason(info.value)
    assert (code, reason, meta.get("field")) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_CONFIG", field)


def test_an_engine_that_cannot_use_hints_says_so(sphinx_server: ServerProcess) -> None:
    responses = voxgate_stream(sphinx_server, PHRASES)
    assert responses[0].started.phrase_hints == pb.PHRASE_HINT_SUPPORT_NONE
    assert responses[1].HasField("warning"), "the warning comes right after SessionStarted"
    assert responses[1].warning.code == "PHRASE_HINTS_IGNORED"
    assert "2 ignored" in responses[1].warning.message
    without = voxgate_stream(sphinx_server, ())
    assert without[0].started.phrase_hints == pb.PHRASE_HINT_SUPPORT_UNSPECIFIED
    assert not any(r.HasField("warning") for r in without)


def riva_finals(server: ServerProcess, contexts: list[tuple[list[str], float]]) -> str:
    config = riva.client.StreamingRecognitionConfig(
        config=riva.client.RecognitionConfig(
            encoding=riva.client.AudioEncoding.LINEAR_PCM, sample_rate_hertz=16000, language_code="en-US"
        ),
        interim_results=False,
    )
    for words, boost in contexts:  # how Riva's own client adds them
        riva.client.add_word_boosting_to_config(config, words, boost)
    asr = riva.client.ASRService(riva.client.Auth(uri=server.target))
    responses = asr.streaming_response_generator(audio_chunks=pieces(speech_audio()), streaming_config=config)
    return " ".join(r.alternatives[0].transcript for resp in responses for r in resp.results if r.is_final).strip()


def google_client(server: ServerProcess) -> speech.SpeechClient:
    return speech.SpeechClient(transport=SpeechGrpcTransport(channel=grpc.insecure_channel(server.target)))


def google_finals(server: ServerProcess, config: speech.RecognitionConfig) -> str:
    streaming = speech.StreamingRecognitionConfig(config=config)
    requests = (speech.StreamingRecognizeRequest(audio_content=c) for c in pieces(speech_audio()))
    responses = google_client(server).streaming_recognize(streaming, requests, retry=None, timeout=60)
    return " ".join(r.alternatives[0].transcript for resp in responses for r in resp.results if r.is_final).strip()


def google_config(**kwargs: object) -> speech.RecognitionConfig:
    return speech.RecognitionConfig(
        encoding=speech.RecognitionConfig.AudioEncoding.LINEAR16,
        sample_rate_hertz=16000,
        language_code="en-US",
        **kwargs,
    )


def test_the_unmodified_riva_and_google_clients_get_the_finals_voxgates_api_gets(fake_server: ServerProcess) -> None:
    ours = finals(voxgate_stream(fake_server, PHRASES))
    assert set(ours.split()) <= HINTED_WORDS
    assert riva_finals(fake_server, [(["Siobhan Kowalczyk"], 15), (["Ozempic"], 0)]) == ours
    phrase_set = speech.PhraseSet(
        phrases=[speech.PhraseSet.Phrase(value="Siobhan Kowalczyk", boost=15), speech.PhraseSet.Phrase(value="Ozempic")]
    )
    assert (
        google_finals(fake_server, google_config(adaptation=speech.SpeechAdaptation(phrase_sets=[phrase_set]))) == ours
    )
    contexts = [
        speech.SpeechContext(phrases=["Siobhan Kowalczyk"], boost=15),
        speech.SpeechContext(phrases=["Ozempic"]),
    ]
    assert google_finals(fake_server, google_config(speech_contexts=contexts)) == ours


def test_riva_hints_past_a_limit_name_the_riva_field(fake_server: ServerProcess) -> None:
    with pytest.raises(grpc.RpcError) as info:
        riva_finals(fake_server, [(["Ozempic", " "], 10)])
    code, reason, meta = error_reason(info.value)
    assert (code, reason, meta.get("field")) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_CONFIG",
        "streaming_config.config.speech_contexts[0].phrases[1]",
    )
    with pytest.raises(grpc.RpcError) as info:
        riva_finals(fake_server, [(["Ozempic"], MAX_BOOST + 1)])
    assert error_reason(info.value)[2].get("field") == "streaming_config.config.speech_contexts[0].boost"


@pytest.mark.parametrize(
    ("adaptation", "field"),
    [
        (
            speech.SpeechAdaptation(phrase_set_references=["projects/p/locations/global/phraseSets/n"]),
            "phrase_set_references",
        ),
        (speech.SpeechAdaptation(custom_classes=[speech.CustomClass(custom_class_id="drugs")]), "custom_classes"),
        (
            speech.SpeechAdaptation(
                phrase_sets=[speech.PhraseSet(phrases=[speech.PhraseSet.Phrase(value="a")], boost=MAX_BOOST + 1)]
            ),
            "phrase_sets[0].boost",
        ),
    ],
)
def test_google_adaptation_voxgate_cannot_apply_is_refused_by_name(
    fake_server: ServerProcess, adaptation: speech.SpeechAdaptation, field: str
) -> None:
    with pytest.raises(exceptions.InvalidArgument) as info:
        google_finals(fake_server, google_config(adaptation=adaptation))
    assert info.value.reason == "INVALID_CONFIG"
    assert info.value.metadata == {"field": f"streaming_config.config.adaptation.{field}"}


def test_the_cli_takes_phrases_and_a_phrases_file(fake_server: ServerProcess, tmp_path: Path) -> None:
    listing = tmp_path / "phrases.txt"
    listing.write_text("# names\nSiobhan Kowalczyk:15\n\nOzempic\n")
    cli = [sys.executable, "-m", "service", "transcribe", "--server", fake_server.target, "--no-pace", "--json"]
    wav = str(FIXTURES / "audio" / "go_forward.wav")
    out = subprocess.run(
        [*cli, "--phrases-file", str(listing), "--phrase", "Quetzalcoatl:12", wav],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    lines = [json.loads(line) for line in out.splitlines()]
    started = lines[0]
    assert started["phrase_hints"] == "boost"
    assert started["effective_config"]["phrase_hints"] == [
        {"value": "Siobhan Kowalczyk", "boost": 15},
        {"value": "Ozempic", "boost": DEFAULT_BOOST},
        {"value": "Quetzalcoatl", "boost": 12},
    ]
    words = {w for line in lines if line.get("is_final") for w in line["text"].split()}
    assert words and words <= HINTED_WORDS | {"Quetzalcoatl"}
    bad = subprocess.run([*cli, "--phrases-file", str(tmp_path / "none.txt"), wav], capture_output=True, text=True)
    assert bad.returncode == 2 and "cannot read --phrases-file" in bad.stderr


def test_whisper_writes_a_hinted_name_it_cannot_spell_alone(whisper_server: ServerProcess) -> None:
    """Whisper tiny.en on a synthetic sentence (tests/fixtures/keyterms): the name comes out right with the hint."""
    pcm, rate = read_wav_pcm(str(KEYTERMS / "please_put_me_through_rms.wav"))
    assert rate == 16000

    def transcript(phrases: tuple[Phrase, ...]) -> tuple[pb.SessionStarted, str]:
        config = StreamConfig(encoding="linear16", sample_rate_hz=16000, phrases=phrases)
        with SpeechClient(whisper_server.target) as client:
            responses = list(client.stream(config, pieces(pcm + silence(1.0)), pace=None, timeout=120))
        return responses[0].started, finals(responses)

    started, plain = transcript(())
    assert "kowalczyk" not in plain.lower(), plain
    started, hinted = transcript((Phrase("Siobhan Kowalczyk", 15),))
    assert started.phrase_hints == pb.PHRASE_HINT_SUPPORT_PROMPT
    assert "Siobhan Kowalczyk" in hinted, hinted
    assert "accounting" in hinted.lower(), "the rest of the sentence stays"


@pytest.mark.timeout(BUILD_TIMEOUT_S)  # the first of them may build the Go example
@pytest.mark.parametrize("language", ["node", "go"])
def test_the_node_and_go_examples_send_phrase_hints(
    language: str, fake_server: ServerProcess, request: pytest.FixtureRequest
) -> None:
    example: list[str] = request.getfixturevalue(f"{language}_example")
    wav = str(FIXTURES / "audio" / "go_forward.wav")
    flag = "--phrase" if language == "node" else "-phrase"
    args = [flag, "Siobhan Kowalczyk:15", flag, "Ozempic", "--server", fake_server.target, "--no-pace"]
    out = subprocess.run([*example, wav, *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    words = {w for line in out.stdout.splitlines() for w in line.split("] ", 1)[1].split()}
    assert words and words <= HINTED_WORDS, out.stdout
    # --json: the start names what the engine does with them, as the Python client's --json does
    out = subprocess.run([*example, wav, *args, "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[0])["phrase_hints"] == "boost"
    out = subprocess.run([*example, wav, *args[4:], "--json"], capture_output=True, text=True, timeout=120)
    assert "phrase_hints" not in json.loads(out.stdout.splitlines()[0]), "absent without hints"
