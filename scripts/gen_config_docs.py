"""Write docs/configuration.md's flag tables from the real parser of `voxgate serve` (the only way they are made).

Source: service.cli.build_parser(), its `serve` subcommand, one table per argument group. Each row is a flag,
the environment variable that sets it (if the code has one), its default and its help. The environment
variable is found by trying it: a flag has `VOXGATE_<NAME>` when setting that variable changes the flag's
default or the Config that `voxgate serve` builds. The parser is built with every VOXGATE_* variable of
the caller's environment removed, so the defaults are the code's.

The tables sit between docs/configuration.md's `<!-- flags:begin -->` and `<!-- flags:end -->` lines.

Run: python scripts/gen_config_docs.py          rewrites the tables in docs/configuration.md
     python scripts/gen_config_docs.py --check  exits 1 when docs/configuration.md's tables differ from the code
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "clients/python")]  # run as a script from anywhere

DOC = ROOT / "docs" / "configuration.md"
BEGIN = "<!-- flags:begin -->"
END = "<!-- flags:end -->"
ENV_PREFIX = "VOXGATE_"
PROBES = ("1", "2")  # every type the flags use parses both; one of them differs from any default
ENV_NOTE = re.compile(r"\s*\[env [^\]]*\]")  # the "[env X; default: Y]" the help adds: columns of their own


@contextlib.contextmanager
def environment(extra: dict[str, str] | None = None) -> Iterator[None]:
    """os.environ without any VOXGATE_* variable, plus `extra`, for the duration."""
    saved = dict(os.environ)
    for key in [k for k in os.environ if k.startswith(ENV_PREFIX)]:
        del os.environ[key]
    os.environ.update(extra or {})
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def serve_parser() -> argparse.ArgumentParser:
    """`voxgate serve`'s parser, built as `voxgate` builds it (call inside environment())."""
    from service.cli import build_parser

    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices["serve"]
    raise RuntimeError("voxgate's parser has no subcommands")


def _config(parser: argparse.ArgumentParser) -> Any:
    from service.config import config_from_args

    return config_from_args(parser.parse_args([]))


def _flags(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]


def env_name(action: argparse.Action, default: Any, config: Any) -> str:
    """The VOXGATE_* variable that sets this flag, or "" when the code reads none."""
    candidates = [ENV_PREFIX + action.dest.upper()]
    candidates += [ENV_PREFIX + s.lstrip("-").replace("-", "_").upper() for s in action.option_strings]
    for name in dict.fromkeys(candidates):
        for probe in PROBES:
            with environment({name: probe}):
                try:
                    parser = serve_parser()
                except Exception:  # noqa: BLE001 - the variable is read (and refused this probe)
                    return name
                changed = next(a for a in _flags(parser) if a.dest == action.dest).default != default
                if not changed:
                    try:
                        changed = _config(parser) != config
                    except Exception:  # noqa: BLE001 - the variable is read (and refused this probe)
                        changed = True
            if changed:
                return name
    return ""


def default_text(value: Any) -> str:
    if value is None or value == "" or value == []:
        return "–"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    return f"`{value}`"


def help_text(action: argparse.Action, prog: str) -> str:
    text = action.help or ""
    params = {**vars(action), "prog": prog}
    if isinstance(params.get("choices"), (list, tuple, dict)):
        params["choices"] = ", ".join(map(str, params["choices"]))
    with contextlib.suppress(KeyError, TypeError, ValueError):
        text = text % params
    text = ENV_NOTE.sub("", text).strip()
    if action.choices:
        text += f" (one of: {', '.join(f'`{c}`' for c in action.choices)})"
    return " ".join(text.split()).replace("|", "\\|")


def tables() -> str:
    """The markdown between the markers: one table per argument group of `voxgate serve`."""
    with environment():
        parser = serve_parser()
        config = _config(parser)
    out: list[str] = []
    for group in parser._action_groups:
        rows = [a for a in group._group_actions if a.option_strings and not isinstance(a, argparse._HelpAction)]
        if not rows:
            continue
        title = "service" if group.title in ("options", "optional arguments") else group.title
        out += ["", f"**{title}**", "", "| flag | environment | default | what it does |", "|---|---|---|---|"]
        for action in rows:
            env = env_name(action, action.default, config)
            flags = ", ".join(f"`{s}`" for s in action.option_strings)
            out.append(
                f"| {flags} | {f'`{env}`' if env else '–'} | {default_text(action.default)} "
                f"| {help_text(action, parser.prog)} |"
            )
    return "\n".join(out[1:]) + "\n"


def with_tables(text: str, generated: str) -> str:
    head, sep, rest = text.partition(BEGIN + "\n")
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise ValueError(f"the document needs a line {BEGIN!r} and, after it, a line {END!r}")
    return head + BEGIN + "\n" + generated + END + tail


def check(doc: Path = DOC, generated: str | None = None) -> int:
    current = doc.read_text()
    wanted = with_tables(current, tables() if generated is None else generated)
    if current == wanted:
        return 0
    sys.stdout.writelines(
        difflib.unified_diff(current.splitlines(keepends=True), wanted.splitlines(keepends=True), str(doc), "generated")
    )
    print(f"\n{doc} is out of date: run python scripts/gen_config_docs.py", file=sys.stderr)
    return 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when docs/configuration.md is out of date")
    args = parser.parse_args()
    if args.check:
        return check()
    DOC.write_text(with_tables(DOC.read_text(), tables()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
