"""Phrase hints in vLLM's model runner V2 (0.34's only runner; 0.32 and 0.33 run it when asked): the same
biases as phrase_bias.py through V2's interface.

V2 tells a processor only a request's params when it enters a slot; the history lives on the device in
`all_token_ids` (valid up to `total_len`). Each step reads the tail of the biased rows' histories in one
gather and one copy to the host: a device sync per step with hints, which the V1 processor does not need.
Rows follow V2's batch layout (`idx_mapping_np`: batch position -> slot); a step with more logits rows than
requests (speculative decoding) is left unbiased.
"""

from __future__ import annotations

from typing import Any

from vllm.v1.worker.gpu.sample.logits_processor.interface import LogitsProcessor

from engine_sidecar.engines.voxtral.phrase_trie import SCAN_PER_DEPTH, PhraseTrie, TrieCache, add_biases


class PhraseBiasProcessorV2(LogitsProcessor):
    def __init__(self, vllm_config: Any, req_states: Any) -> None:
        self._states = req_states
        self._slots: dict[int, tuple[PhraseTrie, int]] = {}  # slot -> its trie and first text id
        self._tries = TrieCache()

    def add_request(self, req_idx: int, sampling_params: Any) -> bool:
        built = self._tries.of(sampling_params)
        if built is None:
            self._slots.pop(req_idx, None)  # a recycled slot: the previous occupant's phrases go
            return False
        self._slots[req_idx] = built
        return True

    def apply(self, logits: Any, ctx: Any) -> Any:
        slots = [int(s) for s in ctx.idx_mapping_np]
        rows = [row for row, slot in enumerate(slots) if slot in self._slots]
        if not rows or logits.shape[0] != len(slots):
            return logits
        import torch

        tries = [self._slots[slots[row]] for row in rows]
        scan = max((trie.depth - 1) * SCAN_PER_DEPTH for trie, _ in tries) or 1
        device = self._states.all_token_ids.gpu.device
        where = torch.tensor([slots[row] for row in rows], device=device, dtype=torch.long)
        ends = self._states.total_len.gpu[where].long().unsqueeze(1)
        positions = ends + torch.arange(-scan, 0, device=device, dtype=torch.long)
        tails = self._states.all_token_ids.gpu[where.unsqueeze(1), positions.clamp(min=0)]
        history = torch.where(positions >= 0, tails, -1).tolist()  # -1: before the start, never text
        add_biases(
            logits,
            {row: trie.biases(first, tail) for row, (trie, first), tail in zip(rows, tries, history, strict=True)},
        )
        return logits
