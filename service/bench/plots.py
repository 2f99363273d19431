"""PNG plots of a bench report: latency CDFs, lag over time, the concurrency sweep (needs matplotlib)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def write_plots(report: dict[str, Any], out_dir: Path, stem: str) -> list[Path]:
    """Writes the plots next to the JSON; returns their paths ([] without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    levels: list[dict[str, Any]] = report["levels"]
    if not levels:
        return []
    written: list[Path] = []
    title = f"{report['engine']} engine, {report['frame_ms']} ms frames, {report['duration_s']:g} s/session"

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=80)
    for lv in levels:
        lats = sorted(lv["latencies"])
        if lats:
            ax.plot(
                [x * 1000 for x in lats],
                [(i + 1) / len(lats) for i in range(len(lats))],
                label=f"N={lv['n']}" + ("" if lv["held"] else " (lost)"),
            )
    ax.set_xscale("log")
    ax.set_xlabel("audio sent → interim result (ms)")
    ax.set_ylabel("fraction of results")
    ax.set_title("latency CDF — " + title, fontsize=9)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    written.append(_save(fig, out_dir / f"{stem}-latency-cdf.png"))

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=80)
    show = [lv for lv in levels if lv["held"]][-1:] + [lv for lv in levels if not lv["held"]][:1]
    for lv in show or levels[-1:]:
        pts = lv["lag_series"]
        ax.scatter(
            [p[0] for p in pts],
            [p[1] * 1000 for p in pts],
            s=2,
            alpha=0.4,
            label=f"N={lv['n']}" + ("" if lv["held"] else " (lost)"),
        )
    ax.set_xlabel("time since the level started (s)")
    ax.set_ylabel("latency of each result (ms)")
    ax.set_title("lag over time — " + title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, markerscale=4)
    written.append(_save(fig, out_dir / f"{stem}-lag.png"))

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=80)
    ns = [lv["n"] for lv in levels]
    positive = False
    for key, label in (
        ("latency_p50_s", "latency p50"),
        ("latency_p99_s", "latency p99"),
        ("final_p99_s", "end of audio → final p99"),
    ):
        ys = [(lv[key] or float("nan")) * 1000 for lv in levels]
        positive = positive or any(y > 0 for y in ys)
        ax.plot(ns, ys, marker="o", label=label)
    ax.set_xscale("log", base=2)
    if positive:
        ax.set_yscale("log")
    ax.set_xlabel("concurrent sessions")
    ax.set_ylabel("ms")
    ax2 = ax.twinx()
    ax2.plot(
        ns,
        [lv["cpu_cores_per_session"].get("server", 0) * 1000 for lv in levels],
        color="grey",
        linestyle="--",
        marker="x",
        label="server CPU per session (millicores)",
    )
    ax2.set_ylabel("server millicores per session")
    for lv in levels:
        if not lv["held"]:
            ax.axvline(lv["n"], color="red", alpha=0.3)
    ax.set_title("concurrency sweep — " + title, fontsize=9)
    ax.grid(alpha=0.3)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="upper left")
    written.append(_save(fig, out_dir / f"{stem}-sweep.png"))
    return written


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
