"""The README's `voxgate transcribe` examples and the finals it shows for each, read from README.md itself, so
that a test runs the commands a new user copies and compares the lines they are told to expect."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from service.bench.wer import word_errors

COMMAND = ".venv/bin/voxgate transcribe"
FINAL_LINE = re.compile(r"^\[(?P<start>\d+\.\d+)s → (?P<end>\d+\.\d+)s\] (?P<text>.*)$")

# What may differ on another CPU (README says so in one line): Whisper's punctuation and capitals, and a
# final's times by a word's length or so (2.06 s against 2.18 s for "morning" on an AMD EPYC).
TIME_TOLERANCE_S = 0.3


@dataclass(frozen=True)
class Final:
    start_s: float
    end_s: float
    text: str

    @classmethod
    def parse(cls, line: str) -> Final | None:
        match = FINAL_LINE.match(line.strip())
        if match is None:
            return None
        return cls(float(match["start"]), float(match["end"]), match["text"])

    def agrees_with(self, shown: Final) -> bool:
        """The same words, times within the tolerance: what holds on every CPU."""
        return (
            word_errors(shown.text, self.text) == 0
            and abs(self.start_s - shown.start_s) <= TIME_TOLERANCE_S
            and abs(self.end_s - shown.end_s) <= TIME_TOLERANCE_S
        )


@dataclass(frozen=True)
class Example:
    args: tuple[str, ...]  # after `voxgate transcribe`
    finals: tuple[Final, ...]  # as the README shows them


def _blocks(markdown: str) -> list[tuple[str, list[str]]]:
    """Fenced blocks: (info string, lines)."""
    blocks, info, lines = [], None, []
    for line in markdown.splitlines():
        if line.startswith("```"):
            if info is None:
                info, lines = line[3:].strip(), []
            else:
                blocks.append((info, lines))
                info = None
        elif info is not None:
            lines.append(line)
    return blocks


def _commands(lines: list[str]) -> list[tuple[str, list[str]]]:
    """Each command of a shell block (continuations joined), with the `# [..]` output comments after it."""
    found: list[tuple[str, list[str]]] = []
    pending = ""
    for line in lines:
        if pending or line.startswith(COMMAND):
            pending += line.rstrip("\\").rstrip() + " "
            if not line.endswith("\\"):
                found.append((pending.strip(), []))
                pending = ""
        elif line.startswith("# [") and found:
            found[-1][1].append(line[2:])
    return found


def readme_examples(readme: Path) -> list[Example]:
    """Every `voxgate transcribe` example with the finals shown for it: in `# [..]` comments after the
    command, or in the plain block that follows its block. `--json` examples are left out: their interims
    depend on timing, as the README says."""
    blocks = _blocks(readme.read_text())
    examples = []
    for i, (info, lines) in enumerate(blocks):
        if info != "sh":
            continue
        following = blocks[i + 1][1] if i + 1 < len(blocks) and blocks[i + 1][0] == "" else []
        for command, comments in _commands(lines):
            shown = comments or following
            finals = tuple(f for f in map(Final.parse, shown) if f is not None)
            args = tuple(shlex.split(command.removeprefix(COMMAND)))
            if finals and "--json" not in args:
                examples.append(Example(args, finals))
    return examples
