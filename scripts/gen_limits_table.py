"""Write docs/configuration.md's "Flow-control limits" table from the limits modules (the only way it is made).

Sources: service/limits.py, engine_sidecar/engines/limits.py, clients/python/voxgate_client/limits.py. The table
sits between docs/configuration.md's `<!-- limits:begin -->` and `<!-- limits:end -->` lines; each bound is shown in
ms of audio or messages (a bound in bytes also as ms of 16 kHz LINEAR16, the engine's format).

Run: python scripts/gen_limits_table.py          rewrites the table in docs/configuration.md
     python scripts/gen_limits_table.py --check  exits 1 when the doc's table differs from the modules
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "clients/python")]  # run as a script from anywhere

from engine_api.audio import BYTES_PER_MS  # noqa: E402
from engine_sidecar.engines import limits as sidecar_limits  # noqa: E402
from service import limits as service_limits  # noqa: E402
from voxgate_client import limits as client_limits  # noqa: E402

DOC = ROOT / "docs" / "configuration.md"
BEGIN = "<!-- limits:begin -->"
END = "<!-- limits:end -->"


class Bound(Protocol):
    """A limit of any of the three modules (the client's has its own dataclass: it ships alone)."""

    @property
    def name(self) -> str: ...
    @property
    def value(self) -> int: ...
    @property
    def unit(self) -> str: ...
    @property
    def scope(self) -> str: ...
    @property
    def at_limit(self) -> str: ...
    @property
    def setting(self) -> str: ...


PROCESSES: tuple[tuple[str, Sequence[Bound]], ...] = (
    ("service", service_limits.LIMITS),
    ("engine sidecar", sidecar_limits.LIMITS),
    ("Python client", client_limits.LIMITS),
)


def bound_text(limit: Bound) -> str:
    """The bound in ms of audio or messages."""
    unit = str(limit.unit)
    if unit == "bytes":
        return f"{limit.value // BYTES_PER_MS} ms of audio ({limit.value} bytes of 16 kHz LINEAR16)"
    return f"{limit.value} {unit}"


def table(processes: Sequence[tuple[str, Sequence[Bound]]] = PROCESSES) -> str:
    lines = ["| process | what is bounded | bound | scope | when it is reached | set by |", "|---|---|---|---|---|---|"]
    for process, limits in processes:
        for limit in limits:
            cells = (
                process,
                limit.name,
                bound_text(limit),
                limit.scope,
                limit.at_limit,
                f"`{limit.setting}`" if limit.setting else "fixed",
            )
            if any("|" in cell for cell in cells):
                raise ValueError(f"{limit.name}: a table cell may not contain '|'")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def with_table(doc: str, body: str) -> str:
    """`doc` with `body` between the markers (ValueError when they are missing or out of order)."""
    start, end = doc.find(BEGIN + "\n"), doc.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the document needs a line {BEGIN!r} and, after it, a line {END!r}")
    return doc[: start + len(BEGIN) + 1] + body + doc[end:]


def check(doc_path: Path = DOC) -> int:
    current = doc_path.read_text()
    wanted = with_table(current, table())
    if current == wanted:
        print(f"gen_limits_table.py --check: {doc_path.name}'s table matches the limits modules")
        return 0
    sys.stdout.writelines(
        difflib.unified_diff(
            current.splitlines(True), wanted.splitlines(True), f"{doc_path.name} (now)", "from the limits modules"
        )
    )
    print(
        f"gen_limits_table.py --check: {doc_path.name}'s table differs from the limits modules; "
        "run python scripts/gen_limits_table.py"
    )
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when docs/configuration.md's table is out of date")
    args = parser.parse_args(argv)
    if args.check:
        return check()
    DOC.write_text(with_table(DOC.read_text(), table()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
