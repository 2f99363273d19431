"""Phrase hints replaced mid-call, from the wire: applied from the next utterance, acknowledged once per session
(multichannel too), and a replacement past a limit is a warning naming the field while the call goes on.

The fake engine makes its words from the hinted phrases, so which hints an utterance was recognized with shows in
its final's words.
"""

from __future__ import annotations

import array

from google.protobuf.duration_pb2 import Duration

from service.phrase_hints import DEFAULT_BOOST, REJECTED_WARNING
from tests.helpers import ServerProcess
from tests.integration.test_phrase_hints import pieces, speech_audio
from voxgate_client import Phrase, SetPhrases, SpeechClient, StreamConfig
from voxgate_client.v1 import speech_pb2 as pb

OZEMPIC = (Phrase("Ozempic"),)
SIOBHAN = SetPhrases((Phrase("Siobhan Kowalczyk", 15),))


def stream(
    server: ServerProcess, items: list[bytes | SetPhrases], channels: int = 1
) -> list[pb.StreamingRecognizeResponse]:
    config = StreamConfig(encoding="linear16", sample_rate_hz=16000, phrases=OZEMPIC, channels=channels)
    with SpeechClient(server.target) as client:
        return list(client.stream(config, items, pace=None, timeout=60))


def final_words(responses: list[pb.StreamingRecognizeResponse]) -> list[tuple[int, set[str]]]:
    """Each final's channel and words."""
    return [
        (r.result.channel, set(r.result.text.split()))
        for r in responses
        if r.HasField("result") and r.result.is_final and r.result.text
    ]


def stereo(mono: bytes) -> bytes:
    samples = array.array("h", mono)
    both = array.array("h", [0]) * (2 * len(samples))
    both[0::2] = both[1::2] = samples
    return both.tobytes()


def test_replaced_hints_apply_from_the_next_utterance_and_are_acknowledged(fake_server: ServerProcess) -> None:
    utterance = speech_audio()  # speech, then a second of silence: its endpoint
    responses = stream(fake_server, [*pieces(utterance), SIOBHAN, *pieces(utterance)])
    finals = final_words(responses)
    assert len(finals) >= 2 and finals[0][1] == {"Ozempic"}, finals
    assert finals[-1][1] <= {"Siobhan", "Kowalczyk"} and finals[-1][1], finals
    acks = [r.phrase_hints_updated for r in responses if r.HasField("phrase_hints_updated")]
    assert len(acks) == 1
    assert [(p.value, p.boost) for p in acks[0].phrase_hints.phrases] == [("Siobhan Kowalczyk", 15)]
    at = Duration()
    at.FromMilliseconds(len(utterance) // 32)
    assert acks[0].audio_offset == at, "where the request came in the audio"
    assert not any(r.HasField("warning") for r in responses)


def test_a_replacement_past_a_limit_is_a_warning_and_the_call_goes_on(fake_server: ServerProcess) -> None:
    utterance = speech_audio()
    bad = SetPhrases((Phrase("Siobhan"), Phrase("x" * 101)))
    responses = stream(fake_server, [*pieces(utterance), bad, *pieces(utterance)])
    warnings = [r.warning for r in responses if r.HasField("warning")]
    assert [w.code for w in warnings] == [REJECTED_WARNING]
    assert warnings[0].message.startswith("phrase hints unchanged: phrase_hints.phrases[1].value: "), warnings
    assert not any(r.HasField("phrase_hints_updated") for r in responses)
    assert {w for _, words in final_words(responses) for w in words} == {"Ozempic"}, "the old hints stay"
    assert responses[-1].ended.reason == pb.SESSION_END_REASON_CLIENT_END


def test_every_channel_takes_the_replacement_and_the_client_hears_of_it_once(fake_server: ServerProcess) -> None:
    utterance = stereo(speech_audio())
    cleared = SetPhrases(())
    responses = stream(fake_server, [*pieces(utterance), SIOBHAN, *pieces(utterance), cleared], channels=2)
    acks = [r.phrase_hints_updated for r in responses if r.HasField("phrase_hints_updated")]
    assert [len(a.phrase_hints.phrases) for a in acks] == [1, 0], "one per request, not one per channel"
    finals = final_words(responses)
    for channel in (1, 2):
        mine = [words for ch, words in finals if ch == channel]
        assert len(mine) >= 2 and mine[0] == {"Ozempic"} and mine[-1] <= {"Siobhan", "Kowalczyk"}, finals


def test_the_default_boost_applies_to_a_replacement_without_one(fake_server: ServerProcess) -> None:
    responses = stream(fake_server, [*pieces(speech_audio()), SetPhrases((Phrase("Voxgate"),))])
    acks = [r.phrase_hints_updated for r in responses if r.HasField("phrase_hints_updated")]
    assert [(p.value, p.boost) for a in acks for p in a.phrase_hints.phrases] == [("Voxgate", DEFAULT_BOOST)]
