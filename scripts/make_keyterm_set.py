"""Synthesize the keyterm test set (tests/fixtures/keyterms): sentences a contact centre, a meeting or a clinic
hears, each with the names, products or drugs in it marked, spoken by two of flite's voices.

    apt-get install flite && .venv/bin/python scripts/make_keyterm_set.py

Writes one 16 kHz mono PCM16 WAV per sentence and voice, and manifest.json: per clip its file, text, key terms,
voice, what flite was given to say, and sha256. flite reads some names as no one says them ("Saoirse" letter by
letter, "Nguyen" as "N G U Y"): those it is given as they are spoken ("Seersha", "Win"), while the reference
keeps the spelling. flite is deterministic: the same flite (Debian 12: 2.2-5) writes the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import wave
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "keyterms"
VOICES = ("rms", "slt")
# How people say the names flite misreads: given to flite in their place.
SPOKEN = {
    "Saoirse": "Seersha",
    "Nguyen": "Win",
    "Zephyrine": "Zeffereen",
    "Gdansk": "Gdahnsk",
    "Ozempic": "Oh zempick",
}
# (text, its key terms): names, products, drugs and places no general model knows.
SENTENCES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Please put me through to Siobhan Kowalczyk in accounting.", ("Siobhan Kowalczyk",)),
    ("The shipment from Quetzalcoatl Logistics arrives on Tuesday.", ("Quetzalcoatl",)),
    ("Doctor Nguyen prescribed Ozempic last month.", ("Nguyen", "Ozempic")),
    ("Our new Voxgate plan includes the Zephyrine add on.", ("Voxgate", "Zephyrine")),
    ("He takes Xarelto and metoprolol every morning.", ("Xarelto", "metoprolol")),
    ("Transfer the account to Thandiwe Okonkwo please.", ("Thandiwe Okonkwo",)),
    ("The cluster runs Kubernetes on Graviton nodes.", ("Graviton",)),
    ("Send the invoice to Przybylski and Sons in Gdansk.", ("Przybylski", "Gdansk")),
    ("Ask Saoirse whether the Humira delivery came.", ("Saoirse", "Humira")),
    ("The Tlaquepaque branch closes at six today.", ("Tlaquepaque",)),
    ("I would like to cancel my Brightlane Fibre contract.", ("Brightlane",)),
    ("Mister Oyelaran is waiting on line two.", ("Oyelaran",)),
)


def slug(text: str) -> str:
    words = [w.strip(".,").lower() for w in text.split()[:4]]
    return "_".join(words)


def main() -> int:
    if shutil.which("flite") is None:
        print("make_keyterm_set.py: flite not found (apt-get install flite)", file=sys.stderr)
        return 1
    OUT.mkdir(parents=True, exist_ok=True)
    manifest = []
    for text, terms in SENTENCES:
        for term in terms:
            assert term in text, (term, text)
        for voice in VOICES:
            name = f"{slug(text)}_{voice}.wav"
            spoken = text
            for written, said in SPOKEN.items():
                spoken = spoken.replace(written, said)
            subprocess.run(["flite", "-voice", voice, "-t", spoken, "-o", str(OUT / name)], check=True)
            with wave.open(str(OUT / name)) as w:
                assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2), name
                duration_s = round(w.getnframes() / 16000, 2)
            digest = hashlib.sha256((OUT / name).read_bytes()).hexdigest()
            manifest.append(
                {"file": name, "text": text, "keyterms": list(terms), "voice": voice, "spoken": spoken}
                | {"duration_s": duration_s, "sha256": digest}
            )
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{len(manifest)} clips, {sum(len(c['keyterms']) for c in manifest)} key terms -> {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
