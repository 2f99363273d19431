"""A larger WER corpus for bench/wer.py: the fixtures plus the other real recordings in the pocketsphinx sdist.

Superseded: these eight clips are now in tests/fixtures/wer_corpus (with ten more from other
packages), which bench/wer.py measures by default. Kept to reproduce the earlier 108-word table.

The pocketsphinx 5.1.1 source distribution ships CMU's test recordings with their transcripts:
cards/001-005.wav (005 is already a fixture) and five LibriVox (public domain) sentences of
Sense and Sensibility (0920 is already a fixture). This copies the fixtures and the eight others
into OUT with a manifest.json: 13 clips, 108 words.

    pip download --no-deps --no-binary :all: pocketsphinx==5.1.1   # fails after the download; the
    # tarball is then in pip's cache: or fetch pocketsphinx-5.1.1.tar.gz from the package's PyPI page
    .venv/bin/python bench/sdist_corpus.py pocketsphinx-5.1.1.tar.gz /tmp/corpus
    .venv/bin/python bench/wer.py --corpus /tmp/corpus
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = "pocketsphinx-5.1.1/test/data/"
LISTS = {
    "cards/cards.transcription": ("cards/{}.wav", {"005"}),
    "librivox/transcription": ("librivox/{}.wav", {"sense_and_sensibility_01_austen_64kb-0920"}),
}


def build(sdist: Path, out: Path) -> list[dict[str, str]]:
    out.mkdir(parents=True, exist_ok=True)
    fixtures = ROOT / "tests/fixtures/audio"
    manifest = [{"file": e["file"], "text": e["text"]} for e in json.loads((fixtures / "manifest.json").read_text())]
    for entry in manifest:
        shutil.copy(fixtures / entry["file"], out / entry["file"])
    with tarfile.open(sdist) as tar:
        for listing, (pattern, skip) in LISTS.items():
            lines = tar.extractfile(DATA + listing).read().decode().splitlines()  # type: ignore[union-attr]
            for line in lines:
                match = re.fullmatch(r"<s>(.*)</s> \((.*)\)", line.strip())
                if not match or match.group(2) in skip:
                    continue
                name = pattern.format(match.group(2))
                target = name.replace("/", "_")
                (out / target).write_bytes(tar.extractfile(DATA + name).read())  # type: ignore[union-attr]
                manifest.append({"file": target, "text": " ".join(match.group(1).split())})
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(f"usage: {sys.argv[0]} pocketsphinx-5.1.1.tar.gz OUT_DIR")
    clips = build(Path(sys.argv[1]), Path(sys.argv[2]))
    print(f"{len(clips)} clips, {sum(len(c['text'].split()) for c in clips)} words in {sys.argv[2]}")
