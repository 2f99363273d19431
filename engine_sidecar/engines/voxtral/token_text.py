"""Each output token's text, as vLLM's incremental detokenizer gives it, without running that detokenizer.

vLLM detokenizes every output token of every request in its `OutputProcessor` (`SlowIncrementalDetokenizer`
for Mistral's tokenizer): per token it re-decodes a window of pieces twice, looks the vocabulary size up
through transformers, and keeps the request's pieces and text for its whole life. Measured in the front end,
skipping it takes about 8 % off a stream's CPU (docs/benchmarks.md). For Mistral's Tekken tokenizer the
result is fixed by a token's own piece: a skipped special token has no text; a token whose piece is whole
text adds that piece; anything else (a byte of a longer UTF-8 character, a token after one) joins the bytes
held so far, which are given out once they decode without a trailing U+FFFD — exactly what vLLM's window
arithmetic amounts to.
Every token's piece is asked of vLLM's own tokenizer once (`convert_ids_to_tokens` with skip_special_tokens,
`convert_tokens_to_string`) and cached.

`differences()` feeds the same prompt and token ids to vLLM's own detokenizer and to this; the engine asks
vLLM not to detokenize (`SamplingParams(detokenize=False)`) only where they agree (engine option
`detokenizer`, "own" by default), else vLLM's text is used and `detokenizer_fallback` is logged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import structlog

log = structlog.get_logger("voxtral")

MODES = ("own", "vllm")
REPLACEMENT = "\ufffd"


class TokenPieces:
    """Per token id: (its text when whole, its bytes), or None when it has no text. One per engine."""

    def __init__(self, tokenizer: Any) -> None:
        from mistral_common.tokens.tokenizers.base import SpecialTokenPolicy

        self._tokenizer = tokenizer  # vLLM's MistralTokenizer
        self._tekken = tokenizer.tokenizer
        self._keep = SpecialTokenPolicy.KEEP
        self._size = len(tokenizer)
        self._cache: dict[int, tuple[str, bytes] | None] = {}

    def get(self, token_id: int) -> tuple[str, bytes] | None:
        try:
            return self._cache[token_id]
        except KeyError:
            piece = self._cache[token_id] = self._piece(token_id)
            return piece

    def _piece(self, token_id: int) -> tuple[str, bytes] | None:
        if not 0 <= token_id < self._size:  # vLLM: an out-of-vocabulary id has no text
            return None
        tokens = [t or "" for t in self._tokenizer.convert_ids_to_tokens([token_id], skip_special_tokens=True)]
        if not tokens:  # a special token vLLM skips
            return None
        text = self._tokenizer.convert_tokens_to_string(tokens)
        if token_id < self._tekken.num_special_tokens:
            raw = text.encode()  # a special token vLLM keeps: its text, or none where vLLM drops it
        else:
            raw = self._tekken.id_to_byte_piece(token_id, self._keep)
        if not raw:
            return None
        return (text if REPLACEMENT not in text else "", raw)


class TokenText:
    """One request's detokenizer: next(token_id) is the text that token adds (often "")."""

    def __init__(self, pieces: TokenPieces) -> None:
        self._pieces = pieces
        self._held = b""  # bytes of a character not yet whole

    def next(self, token_id: int) -> str:
        piece = self._pieces.get(token_id)
        if piece is None:
            return ""
        text, raw = piece
        if text and not self._held:
            return text
        self._held += raw
        decoded = self._held.decode("utf-8", errors="replace")
        if decoded.endswith(REPLACEMENT):  # maybe the start of a character: wait for the rest (as vLLM)
            return ""
        self._held = b""
        return decoded


def vllm_texts(tokenizer: Any, prompt: Sequence[int], token_ids: Sequence[int]) -> list[str]:
    """What vLLM's own incremental detokenizer gives for each token, for a request with this prompt."""
    from types import SimpleNamespace

    from vllm import SamplingParams
    from vllm.v1.engine.detokenizer import IncrementalDetokenizer

    request = SimpleNamespace(
        sampling_params=SamplingParams(temperature=0.0), prompt_token_ids=list(prompt), prompt_embeds=None
    )
    detokenizer = IncrementalDetokenizer.from_new_request(tokenizer, request)  # type: ignore[arg-type]
    out = []
    for token_id in token_ids:
        detokenizer.update([token_id], False)
        out.append(detokenizer.get_next_output_text(False, True))
    return out


def own_texts(pieces: TokenPieces, token_ids: Sequence[int]) -> list[str]:
    text = TokenText(pieces)
    return [text.next(t) for t in token_ids]


def sample_ids(vocab_size: int, num_special: int, n: int = 4000, seed: int = 0) -> list[int]:
    """Token ids that exercise every path: specials, single bytes (UTF-8 lead and continuation bytes among
    them) and merged pieces. Not ids outside the vocabulary: the model cannot sample them (choose() checks
    that its vocabulary is the tokenizer's)."""
    rng = np.random.default_rng(seed)
    kinds = rng.integers(0, 3, n)
    specials = rng.integers(0, num_special, n)
    first_bytes = rng.integers(num_special, min(num_special + 256, vocab_size), n)
    merged = rng.integers(num_special, vocab_size, n)
    return [int(v) for v in np.choose(kinds, [specials, first_bytes, merged])]


def differences(tokenizer: Any, pieces: TokenPieces, prompt: Sequence[int], n: int = 4000) -> list[str]:
    """Where this detokenizer's per-token text differs from vLLM's (empty: identical)."""
    ids = sample_ids(len(tokenizer), tokenizer.tokenizer.num_special_tokens, n)
    ours, theirs = own_texts(pieces, ids), vllm_texts(tokenizer, prompt, ids)
    return [
        f"token {i} (id {ids[i]}): {a!r} vs vLLM's {b!r}"
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True))
        if a != b
    ]


def choose(tokenizer: Any, model_vocab: int, prompt: Sequence[int], mode: str) -> tuple[TokenPieces | None, str]:
    """Own pieces where they give vLLM's text (mode "own"), else None: vLLM detokenizes."""
    if mode == "vllm":
        return None, "vllm"
    try:
        pieces = TokenPieces(tokenizer)
        problems = (
            []
            if model_vocab <= len(tokenizer)
            else [  # vLLM gives ids past it text of its own
                f"the model's vocabulary ({model_vocab}) is larger than its tokenizer's ({len(tokenizer)})"
            ]
        )
        problems += differences(tokenizer, pieces, prompt)
    except Exception as exc:  # a vLLM or tokenizer whose internals moved: vLLM's own still works
        problems = [f"{type(exc).__name__}: {exc}"]
    if problems:
        log.warning("detokenizer_fallback", wanted=mode, used="vllm", differences=len(problems), problems=problems[:4])
        return None, "vllm"
    return pieces, "own"
