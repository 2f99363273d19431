"""The Voxtral front end's CPU per stream, in process: engine options or probes side by side, A B B A.

N sessions of noise at real time (80 ms chunks) on a VoxtralEngine started in this process (the engine core
and its worker are vLLM's own child processes, not counted); this process's CPU over the run is the front
end's: vLLM's AsyncLLM, voxgate's engine wrapper, no gRPC, no service. Each variant is a set of engine
options and probes (engine_sidecar/engines/voxtral/probes.py); the variants alternate A B B A (… per
--repeats) so that drift on a shared box hits both alike.

    python bench/frontend_inproc.py --model /tmp/tiny --variant detokenizer=own --variant detokenizer=vllm
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CHUNK_BYTES = 2560  # 80 ms of 16 kHz PCM16


def parse_variant(text: str) -> dict[str, Any]:
    from engine_sidecar.engines.voxtral.flags import parse_items

    return parse_items(filter(None, text.split(",")))


async def one_run(model: str, options: dict[str, Any], n: int, seconds: float) -> dict[str, float]:
    from engine_sidecar.engines.voxtral.engine import VoxtralEngine
    from engine_sidecar.engines.voxtral.probes import split

    settings, probes = split(options)
    engine: Any = VoxtralEngine(model, max(16, n), settings, probes=probes)
    await engine.start()
    try:
        pcm = (np.random.default_rng(0).standard_normal(int(16000 * seconds)) * 3000).astype("<i2").tobytes()

        async def session(i: int) -> None:
            s = await engine.open_session(f"s{i}", "en")

            async def drain() -> None:
                async for _ in s.outputs():
                    pass

            reader = asyncio.create_task(drain())
            t0 = time.monotonic() + i * 0.02
            for k in range(0, len(pcm), CHUNK_BYTES):
                await asyncio.sleep(max(0.0, t0 + k / 32000 - time.monotonic()))
                await s.push_audio(pcm[k : k + CHUNK_BYTES], True)
            await s.close()
            await reader

        cpu, main, wall = time.process_time(), time.thread_time(), time.monotonic()
        await asyncio.gather(*(session(i) for i in range(n)))
        cpu, main, wall = time.process_time() - cpu, time.thread_time() - main, time.monotonic() - wall
    finally:
        await engine.shutdown()
    per = 1000 / (n * seconds)  # millicores per stream per second of audio
    return {
        "cpu_s": round(cpu, 3),
        "wall_s": round(wall, 2),
        "mc_per_stream": round(cpu * per, 2),
        "main_thread_mc_per_stream": round(main * per, 2),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="Voxtral checkpoint dir (e.g. `voxgate tiny-checkpoint DIR`)")
    p.add_argument("--variant", action="append", required=True, help="engine options k=v,k=v (repeat: 2+)")
    p.add_argument("-n", type=int, default=4, help="concurrent sessions (default 4)")
    p.add_argument("--seconds", type=float, default=20.0, help="audio per session (default 20)")
    p.add_argument("--repeats", type=int, default=2, help="A B B A blocks (default 2: A B B A A B B A)")
    p.add_argument("--out", type=Path, help="write the runs as JSON here")
    args = p.parse_args(argv)
    variants = [parse_variant(v) for v in args.variant]
    order = []
    for r in range(args.repeats):
        block = list(range(len(variants)))
        order += block + block[::-1] if r % 2 == 0 else block[::-1] + block
    runs = []
    for index in order:
        result = asyncio.run(one_run(args.model, {"dtype": "float32", **variants[index]}, args.n, args.seconds))
        runs.append({"variant": args.variant[index], **result})
        print(json.dumps(runs[-1]), flush=True)
    summary = {}
    for v in args.variant:
        values = [r["mc_per_stream"] for r in runs if r["variant"] == v]
        summary[v] = {"runs": values, "mean": round(sum(values) / len(values), 2)}
    report = {
        "n": args.n,
        "seconds": args.seconds,
        "runs": runs,
        "summary": summary,
        "ratio_to_last": {v: round(s["mean"] / summary[args.variant[-1]]["mean"], 3) for v, s in summary.items()},
    }
    print(json.dumps({"summary": summary, "ratio_to_last": report["ratio_to_last"]}, indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
