"""Word error counting, shared by the WER harness (bench/wer.py) and the tests' accuracy checks."""

from __future__ import annotations

import re

from engine_api.edit_distance import edit_distance

ONES = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
ONES_WORDS = (ONES + "seventeen eighteen nineteen").split()
TENS_WORDS = ["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
SCALES = ((1_000_000, "million"), (1000, "thousand"), (100, "hundred"))


def spoken(n: int) -> str:
    """A whole number as it is read: 110 "one hundred ten" (references spell numbers out; Whisper writes digits)."""
    for size, name in SCALES:
        if n >= size:
            rest = n % size
            return f"{spoken(n // size)} {name}" + (f" {spoken(rest)}" if rest else "")
    if n < 20:
        return ONES_WORDS[n]
    return TENS_WORDS[n // 10] + (f" {ONES_WORDS[n % 10]}" if n % 10 else "")


def normalize(text: str) -> list[str]:
    """Lower-case words, numbers spelled out ("10" "ten", "1,500" "one thousand five hundred"), punctuation
    other than apostrophes dropped."""
    text = re.sub(r"(?<=\d),(?=\d{3})", "", text)
    text = re.sub(r"\d+", lambda m: f" {spoken(int(m.group()))} " if len(m.group()) <= 9 else " ", text)
    return re.sub(r"[^a-z' ]", " ", text.lower()).split()


def word_errors(reference: str, hypothesis: str) -> int:
    """Substitutions + deletions + insertions between the normalized word sequences (Levenshtein on words)."""
    return edit_distance(normalize(reference), normalize(hypothesis))


def word_error_rate(reference: str, hypothesis: str) -> float:
    return word_errors(reference, hypothesis) / max(len(normalize(reference)), 1)
