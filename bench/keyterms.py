"""Phrase hints measured: key-term recall with and without hints, and what unrelated hints cost the rest.

Through voxgate, one unpaced session per clip (16 kHz LINEAR16, 80 ms messages, one utterance per clip:
bench/wer.py's through_voxgate), on an engine that uses hints (whisper by default):

- the keyterm set (tests/fixtures/keyterms: sentences with names, products and drugs, each marked) with no
  hints, with each clip's own key terms as hints, and with the whole set's key terms (a contact centre's list,
  the same for every call). Recall: the key terms found in the final text (words normalized as for WER,
  a term's words in a row) over all key terms; and the WER of the sentences;
- the WER corpus (bench/wer.py's default: tests/fixtures/audio + tests/fixtures/wer_corpus) with no hints and
  with UNRELATED (50 phrases that occur nowhere in it): hints must not make the rest worse.

Prints a markdown table and writes a JSON report.

    .venv/bin/python bench/keyterms.py [--engine whisper] [--server HOST:PORT] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "clients/python")]  # run as a script from anywhere

from bench.wer import FIXTURES, WER_CORPUS, load_corpus, start_server, through_voxgate  # noqa: E402
from service.bench.wer import normalize, word_errors  # noqa: E402
from voxgate_client import Phrase  # noqa: E402

KEYTERMS = ROOT / "tests/fixtures/keyterms"
CHUNK_MS = 80
BOOST = 15.0
# Names, products, drugs and places that occur nowhere in the WER corpus.
UNRELATED = (
    "Siobhan Kowalczyk", "Quetzalcoatl", "Ozempic", "Xarelto", "metoprolol", "Thandiwe Okonkwo", "Graviton",
    "Przybylski", "Gdansk", "Saoirse", "Humira", "Tlaquepaque", "Brightlane", "Oyelaran", "Zephyrine",
    "Voxgate", "Kubernetes", "Nguyen", "Eliquis", "Jardiance", "Trulicity", "Dupixent", "Keytruda",
    "Skyrizi", "Rinvoq", "Wegovy", "Mounjaro", "Farxiga", "Entresto", "Biktarvy", "Aoife", "Niamh",
    "Oisin", "Caoimhe", "Tadhg", "Ngozi Adeyemi", "Chukwuemeka", "Xochitl", "Cuauhtemoc", "Wojciech",
    "Szczepanski", "Grzegorz", "Zbigniew", "Kowalski Freight", "Nimbus Cloud", "Helix Analytics",
    "Orbitra", "Veridian Health", "Lumora", "Castellan Insurance",
)  # fmt: skip


@dataclass(frozen=True)
class KeytermClip:
    file: str
    text: str
    keyterms: tuple[str, ...]
    pcm: bytes


@dataclass(frozen=True)
class Row:
    corpus: str
    hints: str
    phrases: int  # hints per session
    keyterms: int  # 0 for the WER corpus
    found: int
    words: int
    errors: int

    @property
    def recall(self) -> float | None:
        return self.found / self.keyterms if self.keyterms else None

    @property
    def wer(self) -> float:
        return self.errors / max(self.words, 1)


def load_keyterms(folder: Path = KEYTERMS) -> list[KeytermClip]:
    terms = {e["file"]: tuple(e["keyterms"]) for e in json.loads((folder / "manifest.json").read_text())}
    return [KeytermClip(c.file, c.text, terms[c.file], c.pcm16k) for c in load_corpus(folder)]


def found(term: str, text: str) -> bool:
    """The term's words, in a row, among the text's (both normalized as for WER)."""
    want, words = normalize(term), normalize(text)
    return any(words[i : i + len(want)] == want for i in range(len(words) - len(want) + 1))


def hints(terms: Sequence[str]) -> tuple[Phrase, ...]:
    return tuple(Phrase(t, BOOST) for t in terms)


def measure(target: str, log: list[dict[str, object]]) -> list[Row]:
    clips = load_keyterms()
    every_term = tuple(dict.fromkeys(t for c in clips for t in c.keyterms))
    rows = []
    for name, phrases_of in (
        ("none", lambda c: ()),
        ("own", lambda c: hints(c.keyterms)),
        ("whole list", lambda c: hints(every_term)),
    ):
        n = found_n = words = errors = 0
        for c in clips:
            phrases = phrases_of(c)
            text = through_voxgate(target, c.pcm, "linear16", CHUNK_MS, phrases)
            hits = [t for t in c.keyterms if found(t, text)]
            n += len(c.keyterms)
            found_n += len(hits)
            words += len(normalize(c.text))
            errors += word_errors(c.text, text)
            log.append({"corpus": "keyterms", "hints": name, "file": c.file, "text": text, "found": hits})
        rows.append(Row("keyterms", name, len(phrases), n, found_n, words, errors))
    corpus = load_corpus(FIXTURES, WER_CORPUS)
    for name, phrases in (("none", ()), ("50 unrelated", hints(UNRELATED))):
        words = errors = 0
        for clip in corpus:
            text = through_voxgate(target, clip.pcm16k, "linear16", CHUNK_MS, phrases)
            words += len(normalize(clip.text))
            errors += word_errors(clip.text, text)
            log.append({"corpus": "wer", "hints": name, "file": clip.file, "text": text})
        rows.append(Row("wer corpus", name, len(phrases), 0, 0, words, errors))
    return rows


def table(rows: Sequence[Row]) -> str:
    lines = [
        "| corpus | hints | phrases per session | key terms found | recall | words | WER |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        recall = f"{r.found}/{r.keyterms}" if r.keyterms else "–"
        share = f"{r.recall:.2f}" if r.recall is not None else "–"
        lines.append(f"| {r.corpus} | {r.hints} | {r.phrases} | {recall} | {share} | {r.words} | {r.wer:.3f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", default="whisper", help="the engine measured (one that uses hints)")
    parser.add_argument("--server", help="a running voxgate server with that engine (default: start one)")
    parser.add_argument("--out", default="keyterms.json", help="the JSON report")
    args = parser.parse_args(argv)
    proc = None
    target = args.server
    if target is None:
        proc, target = start_server(args.engine)
    try:
        log: list[dict[str, object]] = []
        rows = measure(target, log)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
    print(table(rows))
    report = {"engine": args.engine, "rows": [asdict(r) | {"recall": r.recall, "wer": r.wer} for r in rows]}
    Path(args.out).write_text(json.dumps(report | {"sessions": log}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
