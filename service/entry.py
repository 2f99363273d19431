"""The `voxgate` command (and `python -m service`): SIGTERM is handled from its first moment.

Only the standard library is imported before the handler (service/early_stop.py says why); `serve` keeps
it until its event loop's drain handler replaces it, and every other command goes back to the default.
"""

from __future__ import annotations

import sys

from .early_stop import take_sigterm_as_stop


def main() -> int:
    take_sigterm_as_stop()
    from .cli import main as cli_main

    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
