"""The WER harness (bench/wer.py) as a CI check: through voxgate costs no accuracy.

The fixtures (tests/fixtures/audio) at 16 kHz LINEAR16 and as 8 kHz mu-law and A-law, in 20, 80 and
320 ms client messages; the WER corpus (tests/fixtures/wer_corpus, real speech of several speakers)
with each clip in one of those nine conditions in turn, so that every condition and every clip is
checked at a ninth of the full matrix's cost (`bench/wer.py --check` runs the full matrix: the table in
docs/benchmarks.md). Everywhere the final text through the public API equals PocketSphinx alone on the
samples voxgate's engine gets, so the WER through voxgate never exceeds the engine's own (the issue
asks for + 0.01). The server's final-flush and freeze watchdogs are at 120 s, as bench/wer.py sets
them: on a host slow enough to make PocketSphinx's final pass late they would reset the session (a
seam, tested elsewhere) and the replayed audio decodes differently.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.wer import (
    CHUNK_MS,
    ENCODINGS,
    FIXTURES,
    MAX_EXCESS,
    WER_CORPUS,
    excesses,
    load_corpus,
    measure,
    measure_conditions,
    rotation,
    table,
    watchdog_args,
)
from service.bench.wer import normalize
from tests.helpers import ServerProcess, start_server

# PocketSphinx decodes each clip twice (alone and in the server): ~2.5 min per test on 2 idle cores, more when
# they are shared; above pytest's 300 s default there.
pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="module")
def sphinx_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_server(tmp_path_factory.mktemp("sphinx-wer"), *watchdog_args(), engine="sphinx")
    yield server
    server.stop()


def test_through_voxgate_wer_never_exceeds_the_engine_alone(sphinx_server: ServerProcess) -> None:
    clips = load_corpus(FIXTURES)
    rows, texts = measure(sphinx_server.target, clips, list(ENCODINGS), CHUNK_MS, engine="sphinx")
    assert len(rows) == len(ENCODINGS) * (1 + len(CHUNK_MS))
    assert not excesses(rows), f"through voxgate > direct + {MAX_EXCESS}:\n{table(rows)}"
    differing = [t for t in texts if t["through"] != t["direct"]]
    assert not differing, differing


def test_the_wer_corpus_through_voxgate_in_every_condition(sphinx_server: ServerProcess) -> None:
    clips = load_corpus(WER_CORPUS)
    words = sum(len(normalize(c.text)) for c in clips)
    assert words >= 300, words
    conditions = rotation(clips)
    assert len(conditions) == len(ENCODINGS) * len(CHUNK_MS) and all(len(v) >= 2 for v in conditions.values())
    rows, texts = measure_conditions(sphinx_server.target, conditions, engine="sphinx")
    assert len(texts) == len(clips)
    assert not excesses(rows), f"through voxgate > direct + {MAX_EXCESS}:\n{table(rows)}"
    differing = [t for t in texts if t["through"] != t["direct"]]
    assert not differing, differing


@pytest.fixture(scope="module")
def whisper_wer_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_server(tmp_path_factory.mktemp("whisper-wer"), *watchdog_args(), engine="whisper")
    yield server
    server.stop()


# The bar for the default engine, on the whole corpus (docs/benchmarks.md); this lean check runs each
# clip once, in one of the nine conditions, so its per-encoding WER is over a third of the words.
WHISPER_MAX_WER = {"linear16": 0.12, "mulaw": 0.20, "alaw": 0.20}


def test_whisper_through_voxgate_is_the_model_alone_and_meets_its_wer(whisper_wer_server: ServerProcess) -> None:
    clips = load_corpus(FIXTURES, WER_CORPUS)
    rows, texts = measure_conditions(whisper_wer_server.target, rotation(clips), engine="whisper")
    assert not excesses(rows), f"through voxgate > direct + {MAX_EXCESS}:\n{table(rows)}"
    differing = [t for t in texts if t["through"] != t["direct"]]
    assert not differing, differing
    for encoding, limit in WHISPER_MAX_WER.items():
        through = [r for r in rows if r.encoding == encoding and r.chunk_ms > 0]
        errors, words = sum(r.errors for r in through), sum(r.words for r in through)
        assert errors / words <= limit, f"{encoding}: WER {errors / words:.3f} > {limit}\n{table(rows)}"
