"""Phrase hints in vLLM's model runner V1: a logits processor that biases each request by its phrases.

The front end tokenizes a session's phrases once (session_phrases.py) and puts them in every step's
`SamplingParams.extra_args` (phrase_trie.PHRASES_ARG); the sidecar registers the processor when it builds the
engine (`logits_processors`: vLLM loads it in the workers and front ends). A realtime step re-adds its request
to the batch with the session's whole token history as its prompt (the tokens it wrote are fed back), so the
history the trie matches is the request's prompt and output lists, read in place; re-anchoring trims that
history's head, which lies beyond any phrase. Model runner V2 takes another interface: phrase_bias_v2.py.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from engine_sidecar.engines.voxtral.phrase_trie import PhraseTrie, TrieCache, add_biases

# V1's interface, looked up by name: its module is gone from the releases that only have model runner V2 (0.34),
# where this module is never loaded (vllm_window/symbols.py lists what is used, per release).
_v1 = importlib.import_module("vllm.v1.sample.logits_processor")
_builtin = importlib.import_module("vllm.v1.sample.logits_processor.builtin")


@dataclass(frozen=True)
class _Request:
    trie: PhraseTrie
    first_text_id: int
    prompt: list[int]  # vLLM's lists: read live, never copied
    output: list[int]


class PhraseBiasProcessor(_v1.LogitsProcessor):  # type: ignore[name-defined]
    def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool) -> None:
        self._requests: dict[int, _Request] = {}  # batch index -> its phrases and history
        self._tries = TrieCache()

    def is_argmax_invariant(self) -> bool:
        return False  # it changes which token greedy decoding takes: that is its point

    def update_state(self, batch_update: Any) -> None:
        _builtin.process_dict_updates(self._requests, batch_update, self._request)

    def _request(self, params: Any, prompt: list[int] | None, output: list[int]) -> _Request | None:
        built = self._tries.of(params)
        return None if built is None else _Request(built[0], built[1], prompt or [], output)

    def apply(self, logits: Any) -> Any:
        if self._requests:
            biases = {i: r.trie.biases(r.first_text_id, r.prompt, r.output) for i, r in self._requests.items()}
            add_biases(logits, biases)
        return logits
