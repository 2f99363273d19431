"""The WER harness (bench/wer.py) as a CI check: through voxgate costs no accuracy on the fixtures.

Every fixture clip at 16 kHz LINEAR16 and as 8 kHz mu-law and A-law, in 20, 80 and 320 ms client
messages: the final text through the public API equals PocketSphinx alone on the samples voxgate's
engine gets, so the WER through voxgate never exceeds the engine's own (the issue asks for + 0.01).
"""

from __future__ import annotations

from pathlib import Path

from bench.wer import CHUNK_MS, ENCODINGS, MAX_EXCESS, excesses, load_corpus, measure, table
from tests.helpers import FIXTURES, ServerProcess


def test_through_voxgate_wer_never_exceeds_the_engine_alone(sphinx_server: ServerProcess) -> None:
    clips = load_corpus(Path(FIXTURES / "audio"))
    rows, texts = measure(sphinx_server.target, clips, list(ENCODINGS), CHUNK_MS)
    assert len(rows) == len(ENCODINGS) * (1 + len(CHUNK_MS))
    assert not excesses(rows), f"through voxgate > direct + {MAX_EXCESS}:\n{table(rows)}"
    differing = [t for t in texts if t["through"] != t["direct"]]
    assert not differing, differing
