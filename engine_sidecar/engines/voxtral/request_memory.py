"""A live request's token lists in vLLM's front end, kept bounded.

vLLM's `OutputProcessor` keeps, for each request, every prompt token id it was sent
(`RequestState.prompt_token_ids`: each streaming step's token is appended) and every output token id
(its detokenizer's `token_ids`), for as long as the request lives. A realtime session is one request for
its whole life with re-anchoring, so both grow by 12.5 ids per second: 17-78 MB a day per session in the
front end (a list slot is 8 bytes, an id outside CPython's small-int cache 28 more), against constant
memory (the engine core's own lists are trimmed at every re-anchor, reanchor/scheduler.py). For a DELTA
request with no logprobs, no stop strings, one weight version and a stream interval of 1, vLLM reads
neither list after an output is made but for their length, so the head of each is dropped here. Where
the detokenizer is vLLM's own (`detokenizer=vllm`), its offsets index into its lists, so those stay
whole (only the prompt list is bounded).
"""

from __future__ import annotations

from typing import Any

KEEP_IDS = 32  # the tail kept of each list: vLLM reads none of it; a tail keeps the lists non-empty, as vLLM's are
TRIM_EVERY = 128  # outputs between two trims: each list holds at most KEEP_IDS + TRIM_EVERY + a step's ids
# What a request's two lists hold at most, with room for a realtime prompt's prefix (~40 ids) before the first trim
HELD_IDS_CEILING = 2 * (KEEP_IDS + TRIM_EVERY) + 64


def held_ids(state: Any) -> int:
    """Token ids a request's front-end state holds (its prompt list and its detokenizer's output list)."""
    detokenizer = getattr(state, "detokenizer", None)
    return len(state.prompt_token_ids or ()) + len(getattr(detokenizer, "token_ids", ()))


def trimmable(state: Any) -> bool:
    """Whether vLLM will read this request's token lists only for an output's new ids."""
    from vllm.sampling_params import RequestOutputKind

    logprobs = state.logprobs_processor
    return (
        state.output_kind == RequestOutputKind.DELTA
        and state.stream_interval == 1
        # each weight version's span starts at an output token's index; with one version (vLLM's "default"
        # from the first token) only the finished output's span end moves, which voxgate never reads
        and state.parent_req is None
        and len(state.weight_version_starts) <= 1
        and (logprobs is None or (logprobs.num_logprobs is None and logprobs.num_prompt_logprobs is None))
    )


def bound_token_lists(state: Any, keep: int = KEEP_IDS) -> int:
    """Drop all but the last `keep` ids of the request's lists; how many were dropped."""
    from vllm.v1.engine.detokenizer import IncrementalDetokenizer

    if not trimmable(state):
        return 0
    dropped = 0
    lists = [state.prompt_token_ids]
    if type(state.detokenizer) is IncrementalDetokenizer:  # detokenize=False: no offsets into its list
        lists.append(state.detokenizer.token_ids)
    for ids in lists:
        if ids is not None and len(ids) > keep:
            surplus = len(ids) - keep
            del ids[:surplus]  # in place: the RequestOutputs made meanwhile share the list
            dropped += surplus
    return dropped


class TokenListBound:
    """One request's trims: call `output()` once per engine output; every TRIM_EVERY outputs its lists
    in vLLM's front end are bounded. The state is looked up by vLLM's internal request id where known
    (the direct step driver), else by the external id `generate()` was given."""

    def __init__(self, output_processor: Any, external_id: str, internal_id: str | None = None) -> None:
        self._processor = output_processor
        self._external_id = external_id
        self._internal_id = internal_id
        self._outputs = 0

    def output(self) -> None:
        self._outputs += 1
        if self._outputs % TRIM_EVERY:
            return
        if (state := self._state()) is not None:
            bound_token_lists(state)

    def _state(self) -> Any:
        states = self._processor.request_states
        if self._internal_id is None:  # generate() made the internal id: found once, by the external one
            self._internal_id = next((rid for rid, s in states.items() if s.external_req_id == self._external_id), None)
        return states.get(self._internal_id) if self._internal_id is not None else None
