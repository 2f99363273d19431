"""Word error counting, shared by the WER harness (bench/wer.py) and the tests' accuracy checks."""

from __future__ import annotations

import re


def normalize(text: str) -> list[str]:
    """Lower-case words, punctuation other than apostrophes dropped."""
    return re.sub(r"[^a-z' ]", " ", text.lower()).split()


def word_errors(reference: str, hypothesis: str) -> int:
    """Substitutions + deletions + insertions between the normalized word sequences (Levenshtein on words)."""
    ref, hyp = normalize(reference), normalize(hypothesis)
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]


def word_error_rate(reference: str, hypothesis: str) -> float:
    return word_errors(reference, hypothesis) / max(len(normalize(reference)), 1)
