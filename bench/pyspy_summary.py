#!/usr/bin/env python3
"""Where a process's CPU goes, from a `py-spy record -f raw` profile (collapsed stacks, one per line with
its sample count): each sample is charged to a bucket twice over.

  (samples whose innermost frame is a thread waiting, see WAITS, are counted apart and left out)
  self       the innermost frame's owner: vLLM, voxgate (engine_sidecar, engine_api, service), gRPC,
             asyncio (the event loop itself), ZMQ/msgspec (vLLM's IPC to the engine core), numpy/torch, other
  exclusive  the first of EXCLUSIVE's code paths on the stack (vLLM's input processing, its output path, its
             IPC, the rest of vLLM, voxgate, gRPC, the bare event loop): adds up to 100 %
  inclusive  named code paths anywhere on the stack (vLLM's output processor, its input processing, the
             AsyncLLM request path, voxgate's engine wrapper, gRPC), so "vLLM called from voxgate" shows

    py-spy record -p PID -r 100 -d 12 -f raw -o /tmp/frontend.txt
    .venv/bin/python bench/pyspy_summary.py /tmp/frontend.txt
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")

# Innermost frames that are a thread waiting (py-spy's idle detection misses these here): an event loop's
# selector, an idle thread-pool worker (concurrent.futures' queue get), pyzmq's garbage-collector thread, and
# Thread.run with nothing Python below it (a C-level wait or C work: not attributable without --native).
WAITS = (
    "EpollSelector.select",
    "_PollLikeSelector.select",
    "_worker (/concurrent/futures/thread.py)",
    "GarbageCollectorThread.run",
    "Thread.run (/threading.py",
)

SELF = (  # first match on the innermost frame's file
    ("tokenizer (tiktoken / mistral_common, called by vLLM)", ("/tiktoken/", "/mistral_common/")),
    ("ZMQ / msgspec (vLLM's IPC)", ("/zmq/", "/msgspec/")),
    ("vLLM", ("/vllm/",)),
    ("gRPC (Python + Cython)", ("/grpc/", "grpc/_cython", "_cython/")),
    ("voxgate (engine_sidecar, engine_api, service)", ("engine_sidecar/", "engine_api/", "/service/")),
    ("numpy / torch", ("/numpy/", "/torch/")),
    ("asyncio event loop", ("/asyncio/", "uvloop")),
)

INCLUSIVE = (  # (label, any of these substrings in a frame's "func (file)")
    ("vLLM OutputProcessor.process_outputs (detokenize, RequestOutput)", ("output_processor.py",)),
    ("vLLM AsyncLLM output handler (pulls outputs from the core)", ("output_handler",)),
    (
        "vLLM input processing (InputProcessor / processor, multimodal)",
        (
            "input_processor.py",
            "v1/engine/processor.py",
            "multimodal/",
            "inputs/preprocess",
            "/renderers/",
            "transformers_utils/processors",
        ),
    ),
    ("vLLM AsyncLLM.generate / add_request", ("async_llm.py",)),
    ("vLLM engine-core client (ZMQ send/recv)", ("core_client.py",)),
    ("voxgate engine wrapper (engine_sidecar/)", ("engine_sidecar/",)),
    ("voxgate engine API / gRPC servicer (engine_api/)", ("engine_api/",)),
    ("gRPC (grpc/)", ("/grpc/",)),
)


EXCLUSIVE = (  # each busy sample to the first of these its stack matches: a split that adds up to 100 %
    (
        "vLLM input processing per audio chunk (renderer, multimodal processor, tokenizer, its thread pool)",
        (
            "/renderers/",
            "input_processor.py",
            "v1/engine/processor.py",
            "/multimodal/",
            "transformers_utils/processors",
            "/tiktoken/",
            "/mistral_common/",
            "/transformers/",
        ),
    ),
    ("vLLM output path (output handler, OutputProcessor, detokenize)", ("output_processor.py", "output_handler")),
    ("vLLM engine-core IPC (ZMQ, msgpack)", ("core_client.py", "/zmq/", "serial_utils.py", "/msgspec/")),
    ("vLLM, other (AsyncLLM, metrics, realtime buffer)", ("/vllm/",)),
    ("voxgate (engine_sidecar, engine_api)", ("/engine_sidecar/", "/engine_api/")),
    ("gRPC (Python part)", ("/grpc/",)),
    (
        "event loop with no Python below (asyncio itself + gRPC's Cython callbacks, not separable without --native)",
        ("/asyncio/", "/selectors.py"),
    ),
)


def parse(path: Path) -> list[tuple[list[tuple[str, str]], int]]:
    stacks = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        body, _, count = line.rpartition(" ")
        frames = []
        for part in body.split(";")[1:]:  # the first is the thread
            m = _FRAME.match(part)
            frames.append((m.group("func"), m.group("file")) if m else (part, ""))
        stacks.append((frames, int(count)))
    return stacks


def summarize(path: Path) -> dict[str, object]:
    stacks = parse(path)
    total = sum(c for _, c in stacks)
    own: Counter[str] = Counter()
    excl: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    waiting = 0
    for frames, count in stacks:
        leaf = "/" + frames[-1][1] if frames else ""  # py-spy writes site-packages paths relative: vllm/...
        text = [f"{f} (/{p})" for f, p in frames]
        if text and any(text[-1].startswith(w) for w in WAITS):
            waiting += count
            continue
        own[next((label for label, keys in SELF if any(k in leaf for k in keys)), "other")] += count
        # only what the event loop runs: the main thread's root frames (engine_sidecar's main, the loop) are
        # every sample's; vLLM anywhere in what runs wins over voxgate calling it (voxgate calling vLLM is vLLM's)
        loop_at = max(
            (i for i, t in enumerate(text) if t.startswith(("Handle._run ", "BaseEventLoop._run_once "))), default=-1
        )
        ran = text[loop_at + 1 :]
        excl[
            next(
                (label for label, keys in EXCLUSIVE if any(k in t for t in ran for k in keys)),
                "event loop with no Python below (asyncio itself + gRPC's Cython callbacks, not separable "
                "without --native)"
                if not ran
                else "other",
            )
        ] += count
        for label, keys in INCLUSIVE:
            if any(k in t for t in text for k in keys):
                incl[label] += count
        if frames:
            leaves[f"{frames[-1][0]} ({frames[-1][1].split('site-packages/')[-1]})"] += count
    busy = max(total - waiting, 1)
    return {
        "samples": total,
        "waiting_samples": waiting,
        "busy_samples": total - waiting,
        "note": "percentages are of the busy samples (waits excluded)",
        "exclusive_pct": {k: round(100 * v / busy, 1) for k, v in excl.most_common()},
        "self_pct": {k: round(100 * v / busy, 1) for k, v in own.most_common()},
        "inclusive_pct": {k: round(100 * incl[k] / busy, 1) for k, _ in INCLUSIVE},
        "top_leaves_pct": {k: round(100 * v / busy, 1) for k, v in leaves.most_common(15)},
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("profile", type=Path, help="py-spy record -f raw output")
    s = summarize(p.parse_args().profile)
    print(json.dumps(s, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
