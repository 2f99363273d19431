"""`voxgate token new|hash`: make bearer tokens and the hashed entries of a token file."""

from __future__ import annotations

import argparse
import sys

from .tokens import hash_token, new_token


def add_token_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="token_command", required=True)
    new = sub.add_parser("new", help="a new random token (line 1) and its token-file line (line 2)")
    new.add_argument("tenant", nargs="?", default="TENANT", help="tenant name to put in the file line")
    hashed = sub.add_parser("hash", help="the 'sha256:<hex>' entry of an existing token")
    hashed.add_argument(
        "token", nargs="?", help="the token; omitted: read one line from stdin (keeps it out of shell history)"
    )


def run_token(args: argparse.Namespace) -> int:
    if args.token_command == "new":
        token = new_token()
        print(token)
        print(f"{hash_token(token)} {args.tenant}")
        print(
            "# line 1 goes to the client (it is stored nowhere); line 2 goes into --auth-tokens-file", file=sys.stderr
        )
        return 0
    token = args.token if args.token is not None else sys.stdin.readline().strip()
    if not token:
        print("voxgate token hash: error: empty token", file=sys.stderr)
        return 2
    print(hash_token(token))
    return 0
