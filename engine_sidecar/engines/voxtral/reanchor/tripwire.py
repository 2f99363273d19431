"""The runtime tripwire: every shift the scheduler issued must have been applied by every worker rank.

A shift moves the scheduler's positions at once; only the workers' rotation keeps the cached keys in step. A
rank that skips it (the call lost, not armed, failed) would leave that session attending with the wrong
relative positions from then on, while every output still looks normal. So the sidecar never takes "no news"
for "applied": it asks the EngineCore, in one utility call (engine_core.POLL_METHOD), for the shifts the
scheduler issued since the last call and for every rank's acknowledgements since then, and compares.

One call, so the comparison has no race: EngineCore handles utility calls between engine steps, the scheduler's
list is drained first, and the workers' are read through `collective_rpc`, which reaches each worker after every
step already handed to it (the same ordered channel; in-process executors run the step synchronously). A shift
issued before the call was therefore applied before the answer, or never.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

MAILBOX_KEPT = 4096  # news kept for front ends that have not polled yet (a dead one's is dropped oldest first)


class Mailbox:
    """Several front ends share one engine core (process/core_host.py): each poll drains everything, keeps what
    is for the caller (its requests' tags start with its prefix) and holds the rest for the others.

    An issued shift and every rank's acknowledgement of it carry the same tag, so they always go to the same
    front end, in the same answer or an earlier one: the no-race argument above holds per front end."""

    def __init__(self) -> None:
        self._issued: deque[dict[str, Any]] = deque(maxlen=MAILBOX_KEPT)
        self._events: list[deque[dict[str, Any]]] = []

    def exchange(self, issued: list[dict[str, Any]], ranks: list[dict[str, Any]], prefix: str) -> dict[str, Any]:
        self._issued.extend(issued)
        while len(self._events) < len(ranks):
            self._events.append(deque(maxlen=MAILBOX_KEPT))
        for held, rank in zip(self._events, ranks, strict=False):
            held.extend(rank.get("events", ()))
        mine_issued = _take(self._issued, prefix)
        return {
            "issued": mine_issued,
            "ranks": [{**rank, "events": _take(held, prefix)} for held, rank in zip(self._events, ranks, strict=False)],
        }


def _take(items: deque[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    """Remove and return the items whose tag starts with prefix, keeping the others in order."""
    mine = [x for x in items if str(x.get("tag", "")).startswith(prefix)]
    if mine:
        rest = [x for x in items if not str(x.get("tag", "")).startswith(prefix)]
        items.clear()
        items.extend(rest)
    return mine


@dataclass(frozen=True)
class Unacknowledged:
    """A shift the scheduler issued that some rank did not apply: that request's keys no longer match its clock."""

    tag: str  # the front end's request id
    seq: int
    tokens: int
    clock: int
    missing_ranks: tuple[int, ...]
    ranks: int

    def describe(self) -> str:
        who = (
            "no worker rank"
            if len(self.missing_ranks) == self.ranks
            else f"worker rank(s) {', '.join(map(str, self.missing_ranks))} of {self.ranks}"
        )
        return (
            f"the engine shifted the position clock by {self.tokens} to {self.clock} (shift {self.seq}) but "
            f"{who} rotated the cached keys"
        )


@dataclass
class Verdict:
    applied: list[dict[str, Any]] = field(default_factory=list)  # rank 0's events for shifts every rank applied
    unacknowledged: list[Unacknowledged] = field(default_factory=list)


def check(report: dict[str, Any]) -> Verdict:
    """Compare one poll's issued shifts with every rank's acknowledgements (worker.Event dicts, by seq)."""
    ranks: list[dict[str, Any]] = list(report.get("ranks") or [])
    acked = [{int(e["seq"]): e for e in r.get("events", ())} for r in ranks]
    verdict = Verdict()
    issued_seqs = set()
    for shift in report.get("issued") or ():
        seq = int(shift["seq"])
        issued_seqs.add(seq)
        missing = tuple(i for i, events in enumerate(acked) if seq not in events)
        if missing or not acked:
            verdict.unacknowledged.append(
                Unacknowledged(str(shift["tag"]), seq, int(shift["tokens"]), int(shift["clock"]), missing, len(acked))
            )
        else:
            verdict.applied.append(acked[0][seq])
    # Events whose issue record is gone (the scheduler's list is bounded): applied all the same.
    if acked:
        verdict.applied += [e for seq, e in acked[0].items() if seq not in issued_seqs]
        verdict.applied.sort(key=lambda e: int(e["seq"]))
    return verdict
