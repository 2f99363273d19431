"""Phrase hints for the wire fuzz's `hints` case (wire_cases.py): hint lists of every size and shape, and what
the server must answer for them, computed here from the limits alone (never by the service's checker)."""

from __future__ import annotations

import math
import random
import struct
from typing import Any

import grpc
from google.cloud import speech_v1 as gspeech
from riva.client.proto import riva_asr_pb2 as rasr

from service.limits import MESSAGE
from service.phrase_hints import DEFAULT_BOOST, MAX_BOOST, MAX_PHRASE_CHARS, MAX_PHRASES, MIN_BOOST
from tests.reliability.wire import Api, WireServer
from voxgate_client.v1 import speech_pb2 as pb
from voxgate_client.v1 import speech_pb2_grpc as pb_grpc

# A phrase's words: ASCII, 2-, 3- and 4-byte UTF-8, a lone combining mark and a skin-tone modifier, zero-width
# characters (not whitespace) and NUL. Between and around its words: whitespace as str.split() knows it, which the
# normalisation (one space between words, none around them) folds.
ASCII_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789'-.&"
WIDE_CHARS = "éüßñçøåłšΩЖж中文日本語한국어€ー😀🎉𝔘𝄞🀄\U0001f3fd\u0301\u200b\ufeff\x00"
SPACES = (" ", " ", " ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\xa0", "\u2003", "\u2028", "\u3000")
assert all(c.isspace() for c in SPACES) and not any(c.isspace() for c in ASCII_CHARS + WIDE_CHARS)
VALID_BOOSTS = (0.0, -0.0, MIN_BOOST, MAX_BOOST, 99.99999, 100.000001, 5.0, 15.0)  # 100.000001 is 100 in a float
INVALID_BOOSTS = (100.00001, -100.00001, 100.5, -101.0, 1e6, -3.4e38, math.nan, math.inf, -math.inf)
# A request of phrase hints (at most MAX_PHRASES + 1 phrases of at most 2 * MAX_PHRASE_CHARS characters, ~250 KiB at
# worst) and its echo in SessionStarted or PhraseHintsUpdated stay far within the server's message limit.
HINTS_REQUEST_MAX = MESSAGE.value // 4
HINTS_AT = "streaming_config.config.speech_contexts"  # the Riva and Google field

Hint = tuple[str, float | None]  # a phrase as sent: its value and its own boost (None: unset), float32 values
Candidate = tuple[str, float | None, str, str]  # value, boost it gets (None: unset), value field, boost field
Ack = tuple[str, object, int]  # ("updated", [(value, boost)], audio_offset ms) or ("rejected", field or message, 0)


def f32(x: float) -> float:
    """`x` as a float field carries it."""
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


def hint_boost(rng: random.Random, valid: bool = True) -> float | None:
    if not valid:
        return f32(rng.choice(INVALID_BOOSTS))
    pick = rng.random()
    if pick < 0.45:
        return None
    return f32(rng.uniform(MIN_BOOST, MAX_BOOST) if pick < 0.75 else rng.choice(VALID_BOOSTS))


def hint_text(rng: random.Random, valid: bool = True) -> str:
    """A phrase of a random normalised length (blank or past MAX_PHRASE_CHARS if not `valid`), with whitespace
    runs around and inside it."""
    if valid:
        length = rng.choices(
            [rng.randint(1, 20), rng.randint(21, MAX_PHRASE_CHARS - 1), MAX_PHRASE_CHARS], weights=[70, 15, 15]
        )[0]
    else:
        length = rng.choice([0, MAX_PHRASE_CHARS + 1, rng.randint(MAX_PHRASE_CHARS + 2, 2 * MAX_PHRASE_CHARS)])
    pool = ASCII_CHARS if rng.random() < 0.5 else ASCII_CHARS + WIDE_CHARS
    chars: list[str] = []
    for k in range(length):
        space = 0 < k < length - 1 and chars[-1] != " " and rng.random() < 0.15
        chars.append(" " if space else rng.choice(pool))

    def run() -> str:
        return "".join(rng.choices(SPACES, k=rng.randint(1, 3)))

    text = "".join(run() if c == " " else c for c in chars)
    return (run() if rng.random() < 0.3 else "") + text + (run() if rng.random() < 0.3 else "")


def hint_list(rng: random.Random) -> list[Hint]:
    """0, a few, many, MAX_PHRASES or a few more phrases; some lists with one or two phrases past a limit."""
    size = rng.choices(
        [0, rng.randint(1, 5), rng.randint(6, 60), rng.randint(61, MAX_PHRASES - 1), MAX_PHRASES, MAX_PHRASES + 1],
        weights=[12, 35, 20, 8, 15, 5],
    )[0]
    bad = set(rng.sample(range(size), min(size, rng.randint(1, 2)))) if rng.random() < 0.3 else set()
    text_bad = {i for i in bad if rng.random() < 0.5}
    return [(hint_text(rng, i not in text_bad), hint_boost(rng, i not in bad - text_bad)) for i in range(size)]


def vendor_contexts(rng: random.Random, phrases: list[Hint]) -> list[tuple[list[str], float]]:
    """The phrases as Riva's or Google's speech_contexts: in 1 to 3 contexts, each with its boost (0: unset)."""
    cuts = sorted(rng.choices(range(len(phrases) + 1), k=rng.randint(0, 2)))
    bounds = [0, *cuts, len(phrases)]
    return [
        ([value for value, _ in phrases[a:b]], hint_boost(rng, rng.random() >= 0.1) or 0.0)
        for a, b in zip(bounds, bounds[1:], strict=False)
    ]


def voxgate_candidates(phrases: list[Hint], list_boost: float | None, at: str) -> list[Candidate]:
    """A phrase's boost is its own, else its list's; a bad list boost is the list's field."""
    return [
        (value, own, f"{at}.phrases[{i}].value", f"{at}.phrases[{i}].boost")
        if own is not None
        else (value, list_boost, f"{at}.phrases[{i}].value", f"{at}.boost")
        for i, (value, own) in enumerate(phrases)
    ]


def vendor_candidates(contexts: list[tuple[list[str], float]]) -> list[Candidate]:
    """Riva's and Google's: a context's boost of 0 is unset."""
    return [
        (value, boost or None, f"{HINTS_AT}[{i}].phrases[{j}]", f"{HINTS_AT}[{i}].boost")
        for i, (values, boost) in enumerate(contexts)
        for j, value in enumerate(values)
    ]


def applied(candidates: list[Candidate], list_field: str) -> tuple[list[tuple[str, float]], str]:
    """What the documented limits make of the phrases: each normalised with its boost, or the field of the first
    broken limit (the list's field for too many)."""
    if len(candidates) > MAX_PHRASES:
        return [], list_field
    out = []
    for value, boost, value_field, boost_field in candidates:
        text = " ".join(value.split())
        if not text or len(text) > MAX_PHRASE_CHARS:
            return [], value_field
        resolved = DEFAULT_BOOST if boost is None else boost
        if math.isnan(resolved) or not MIN_BOOST <= resolved <= MAX_BOOST:
            return [], boost_field
        out.append((text, resolved))
    return out, ""


def hints_proto(phrases: list[Hint], list_boost: float | None) -> pb.PhraseHints:
    msg = pb.PhraseHints(phrases=[pb.Phrase(value=v) if b is None else pb.Phrase(value=v, boost=b) for v, b in phrases])
    if list_boost is not None:
        msg.boost = list_boost
    return msg


def hints_config(
    api: Api, phrases: list[Hint], list_boost: float | None, contexts: list[tuple[list[str], float]]
) -> bytes:
    """`api`'s config with the phrases: voxgate.v1's phrase_hints, or Riva's or Google's speech_contexts."""
    if api.has_session_events:
        req = pb.StreamingRecognizeRequest.FromString(api.config("en-US"))
        req.config.phrase_hints.CopyFrom(hints_proto(phrases, list_boost))
        return req.SerializeToString()
    vendor: Any = rasr.StreamingRecognizeRequest if api.name == "riva" else gspeech.StreamingRecognizeRequest.pb()
    msg = vendor.FromString(api.config("en-US"))
    for values, boost in contexts:
        msg.streaming_config.config.speech_contexts.add(phrases=values, boost=boost)
    return bytes(msg.SerializeToString())


_HINT_SUPPORT: dict[str, int] = {}


def hint_support(server: WireServer) -> int:
    """The engine's PhraseHintSupport (GetCapabilities), once per server."""
    if not _HINT_SUPPORT.get(server.name):
        with grpc.insecure_channel(server.target) as ch:
            caps = pb_grpc.SpeechStub(ch).GetCapabilities(pb.GetCapabilitiesRequest(), timeout=5)
        _HINT_SUPPORT[server.name] = caps.phrase_hints.support
    return _HINT_SUPPORT[server.name]


def first_difference(got: list[tuple[str, float]], want: list[tuple[str, float]]) -> str:
    at = next((i for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w), min(len(got), len(want)))
    return (
        f"{len(got)} phrases for {len(want)}; first difference at [{at}]: "
        f"{got[at : at + 1]!r:.120} != {want[at : at + 1]!r:.120}"
    )
