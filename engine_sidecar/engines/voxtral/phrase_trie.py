"""Phrase hints as additive logit biases for a greedy decoder: Voxtral's (phrase_bias.py applies them in vLLM).

Each phrase is tokenized once per session, in each spelling the model may write it (after a space, and at the
start of the text). A trie of those token sequences says, after the text tokens the model has just written,
which tokens would go on with a phrase: each gets its phrase's bias. The first token of every phrase gets a
smaller share, so that a phrase can start where the audio suggests it without being forced everywhere. Special
tokens (Voxtral's streaming pad, written between words) are not text: matching skips them.

Boost 0, or no phrases, biases nothing: decoding is token-for-token what it is without hints.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

LOGIT_PER_BOOST = 0.5  # the default boost (10) adds 5 to the logit of a token that goes on with a phrase
FIRST_TOKEN_SHARE = 0.3  # a phrase's first token gets this share of its bias
SCAN_PER_DEPTH = 8  # tokens of history looked at per phrase token: pads between words do not hide a prefix
PHRASES_ARG = "voxgate_phrases"  # key in SamplingParams.extra_args: phrases_arg()
TRIES_KEPT = 256  # phrase lists a worker keeps built (a few per live session: each change is a new list)
# The logits processor for each of vLLM's model runners, as vLLM's `logits_processors` takes it.
PROCESSOR_V1 = "engine_sidecar.engines.voxtral.phrase_bias:PhraseBiasProcessor"
PROCESSOR_V2 = "engine_sidecar.engines.voxtral.phrase_bias_v2:PhraseBiasProcessorV2"


def _stronger(old: float | None, new: float) -> float:
    """Where phrases share a token, the strongest bias (by size: a disfavoured phrase stays disfavoured)."""
    return new if old is None or abs(new) > abs(old) else old


@dataclass
class _Node:
    children: dict[int, _Node] = field(default_factory=dict)
    bias: dict[int, float] = field(default_factory=dict)  # next token -> bias of the strongest phrase through it


class PhraseTrie:
    """The phrases of one session, each a token sequence with its boost."""

    def __init__(self, phrases: Iterable[tuple[Sequence[int], float]]) -> None:
        self._root = _Node()
        self.depth = 0  # tokens in the longest phrase
        for tokens, boost in phrases:
            if not tokens or boost == 0:
                continue
            bias = boost * LOGIT_PER_BOOST
            node = self._root
            for token in tokens:
                node.bias[token] = _stronger(node.bias.get(token), bias)
                node = node.children.setdefault(token, _Node())
            self.depth = max(self.depth, len(tokens))
        self._first = {token: bias * FIRST_TOKEN_SHARE for token, bias in self._root.bias.items()}

    def __bool__(self) -> bool:
        return self.depth > 0

    def biases(self, first_text_id: int, *history: Sequence[int]) -> dict[int, float]:
        """Token -> logit bias for the next token, after the tokens so far (`history`: in parts, such as vLLM's
        prompt and output lists, the newest last; ids below `first_text_id` are special, not text)."""
        if not self:
            return {}
        out = dict(self._first)
        recent = self._recent_text(history, first_text_id)
        for start in range(len(recent)):  # every suffix of the recent text that is a phrase's prefix
            node: _Node | None = self._root
            for token in recent[start:]:
                node = node.children.get(token) if node is not None else None
            if node is not None:
                for token, bias in node.bias.items():
                    out[token] = _stronger(out.get(token), bias)
        return out

    def _recent_text(self, history: Sequence[Sequence[int]], first_text_id: int) -> list[int]:
        """The last depth - 1 text tokens (a longer suffix cannot be a proper prefix of a phrase), looking at
        no more than SCAN_PER_DEPTH tokens per phrase token."""
        want, budget = self.depth - 1, (self.depth - 1) * SCAN_PER_DEPTH
        recent: list[int] = []
        for part in reversed(history):
            for i in range(len(part) - 1, max(len(part) - budget, 0) - 1, -1):
                if len(recent) == want:
                    break
                if part[i] >= first_text_id:
                    recent.append(part[i])
            budget -= len(part)
            if len(recent) == want or budget <= 0:
                break
        recent.reverse()
        return recent


def spellings(encode: Callable[[str], list[int]], text: str) -> list[tuple[int, ...]]:
    """The token sequences the model may write `text` as: after a space, and at the start of the text."""
    out: list[tuple[int, ...]] = []
    for spelled in (" " + text, text):
        tokens = tuple(encode(spelled))
        if tokens and tokens not in out:
            out.append(tokens)
    return out


def phrases_arg(key: str, first_text_id: int, phrases: Iterable[tuple[Sequence[int], float]]) -> dict[str, Any]:
    """The extra_args entry of a request biased by `phrases` (token sequences with their boosts): `key` names
    the list (one per session and change: the processor builds each list's trie once), `first_text_id` is the
    first id that is text, not a special token."""
    return {"key": key, "text_from": first_text_id, "phrases": [[boost, list(tokens)] for tokens, boost in phrases]}


class TrieCache:
    """A worker's built tries, by their list's key (a realtime request is re-added every step with the same
    params: its trie is built once)."""

    def __init__(self) -> None:
        self._tries: OrderedDict[str, PhraseTrie] = OrderedDict()

    def of(self, params: Any) -> tuple[PhraseTrie, int] | None:
        """The trie and first text id of a request's params; None when it has no phrases to bias."""
        spec = (getattr(params, "extra_args", None) or {}).get(PHRASES_ARG)
        if not spec:
            return None
        key = str(spec["key"])
        trie = self._tries.get(key)
        if trie is None:
            trie = self._tries[key] = PhraseTrie((tuple(tokens), float(boost)) for boost, tokens in spec["phrases"])
            while len(self._tries) > TRIES_KEPT:
                self._tries.popitem(last=False)
        self._tries.move_to_end(key)
        return (trie, int(spec["text_from"])) if trie else None


def add_biases(logits: Any, biases: dict[int, dict[int, float]]) -> None:
    """logits[row, token] += bias, for each row's biases, in one indexed add (torch: only the workers have it)."""
    import torch

    rows: list[int] = []
    tokens: list[int] = []
    values: list[float] = []
    vocab = logits.shape[-1]
    for row, row_biases in biases.items():
        for token, bias in row_biases.items():
            if 0 <= token < vocab:
                rows.append(row)
                tokens.append(token)
                values.append(bias)
    if rows:
        where = (torch.tensor(rows, device=logits.device), torch.tensor(tokens, device=logits.device))
        logits[where] += torch.tensor(values, dtype=logits.dtype, device=logits.device)
