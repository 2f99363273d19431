"""`python -m engine_sidecar --engine NAME --socket PATH`: the engine sidecar as its own process.

The service spawns it this way (service/sidecar.py); `voxgate sidecar` runs the same for operators.
"""

from __future__ import annotations

import argparse
import sys

from engine_api.logs import configure_logging
from engine_sidecar.process.main import add_sidecar_arguments, run_sidecar


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m engine_sidecar", description="voxgate engine sidecar: one speech engine on a Unix socket"
    )
    add_sidecar_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging()
    return run_sidecar(args)


if __name__ == "__main__":
    sys.exit(main())
