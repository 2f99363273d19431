"""What Whisper's phrase hints cost in CPU per final, and how much of it the judged step adds.

In process (no server), one thread, on the keyterm set with each clip's own terms and on the WER corpus with
bench/keyterms.py's 50 unrelated phrases: each clip's final decode (WhisperDecoder.transcribe) without hints,
with hints, and with hints but without the judged steps (judge=False). CPU seconds per clip,
the best of --repeat passes (this machine is shared), and in how many clips the model judged something.

    .venv/bin/python bench/hint_cost.py [--repeat 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "clients/python")]  # run as a script from anywhere

from bench.keyterms import UNRELATED, load_keyterms  # noqa: E402
from bench.wer import FIXTURES, WER_CORPUS, load_corpus  # noqa: E402
from engine_sidecar.engines.whisper.decoder import WhisperDecoder  # noqa: E402
from engine_sidecar.engines.whisper.model import default_source  # noqa: E402

Clips = Sequence[tuple[bytes, tuple[str, ...]]]


def cpu_per_clip(run: Callable[[bytes, tuple[str, ...]], object], clips: Clips, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        for pcm, phrases in clips:
            run(pcm, phrases)
        best = min(best, (time.process_time() - started) / len(clips))
    return best


def judged(decoder: WhisperDecoder, pcm: bytes, phrases: tuple[str, ...]) -> bool:
    """Whether the model judged anything in this clip's final: the forced passes ran."""
    forced, calls = decoder._forced, []
    decoder._forced = lambda *args: calls.append(args) or forced(*args)  # type: ignore[method-assign]
    try:
        decoder.transcribe(pcm, 0, phrases=phrases)
    finally:
        del decoder._forced  # the class's method again
    return bool(calls)


def measure(decoder: WhisperDecoder, clips: Clips, repeat: int) -> dict[str, float | int]:
    row: dict[str, float | int] = {"clips": len(clips)}
    row["no_hints_s"] = cpu_per_clip(lambda pcm, _: decoder.transcribe(pcm, 0), clips, repeat)
    row["hints_s"] = cpu_per_clip(lambda pcm, ph: decoder.transcribe(pcm, 0, phrases=ph), clips, repeat)
    row["hints_not_judged_s"] = cpu_per_clip(
        lambda pcm, ph: decoder.transcribe(pcm, 0, phrases=ph, judge=False), clips, repeat
    )
    row["clips_judged"] = sum(judged(decoder, pcm, ph) for pcm, ph in clips)
    return row


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default="hint_cost.json")
    args = parser.parse_args(argv)
    decoder = WhisperDecoder(default_source().directory, threads=1)
    sets = {
        "keyterms, own terms": [(c.pcm, c.keyterms) for c in load_keyterms()],
        "WER corpus, 50 unrelated": [(c.pcm16k, UNRELATED) for c in load_corpus(FIXTURES, WER_CORPUS)],
    }
    rows = {name: measure(decoder, clips, args.repeat) for name, clips in sets.items()}
    print("| set | clips judged | CPU s/clip: no hints | hints, not judged | hints |")
    print("|---|---|---|---|---|")
    for name, r in rows.items():
        cells = f"{r['no_hints_s']:.3f} | {r['hints_not_judged_s']:.3f} | {r['hints_s']:.3f}"
        print(f"| {name} | {r['clips_judged']}/{r['clips']} | {cells} |")
    Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
