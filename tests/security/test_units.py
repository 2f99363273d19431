"""Token files, token lookup, metadata parsing, and the names the auth layer relies on."""

from __future__ import annotations

import hmac
import json
from pathlib import Path

import grpc
import pytest

from service import errors
from service.security.auth import API_OF_SERVICE, OPEN_SERVICES, authenticate, bearer_token
from service.security.tokens import APIS, Tenant, TokenBook, TokenFileError, hash_token
from voxgate_client.v1 import speech_pb2 as pb


def test_json_and_lines_formats_give_the_same_book(tmp_path: Path) -> None:
    (tmp_path / "t.json").write_text(
        json.dumps(
            {
                "tenants": {
                    "acme": {"tokens": [hash_token("a1"), hash_token("a2")], "max_sessions": 2, "apis": ["voxgate"]},
                    "globex": {"tokens": [hash_token("g1")]},
                }
            }
        )
    )
    (tmp_path / "t.txt").write_text(
        f"# comment\n{hash_token('a1')} acme max_sessions=2 apis=voxgate\n\n{hash_token('a2')} acme  # second\n"
        f"{hash_token('g1')} globex\n"
    )
    for name in ("t.json", "t.txt"):
        book = TokenBook.load(tmp_path / name)
        acme, globex = book.lookup("a1"), book.lookup("g1")
        assert acme is not None and acme == book.lookup("a2")
        assert (acme.name, acme.max_sessions, acme.apis) == ("acme", 2, frozenset({"voxgate"}))
        assert globex is not None and (globex.max_sessions, globex.apis) == (0, frozenset(APIS))
        assert book.lookup("a3") is None and book.lookup("") is None
        assert sorted(book.tenants) == ["acme", "globex"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a1 acme\n", "stored hashed"),
        (f"{hash_token('a')}\n", "expected 'sha256:<hex> TENANT"),
        (f"{hash_token('a')} acme colour=red\n", "unknown option"),
        (f"{hash_token('a')} acme max_sessions=1\n{hash_token('b')} acme max_sessions=2\n", "given twice"),
        (f"{hash_token('a')} acme max_sessions=lots\n", "must be an integer"),
        (f"{hash_token('a')} acme apis=voxgate,aws\n", "apis must be"),
        (f"{hash_token('a')} acme\n{hash_token('a')} globex\n", "appears twice"),
        (f"{hash_token('a')} 'acme'\n", "tenant name"),
        ('{"tenants": []}', "expected"),
        ('{"tenants": {"acme": {"tokens": [], "quota": 1}}}', "unknown keys"),
        ("{not json", "not valid JSON"),
        (f"{hash_token('a').upper()} acme\n", "stored hashed"),
    ],
)
def test_bad_token_files_are_refused_with_a_reason(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "t").write_text(text)
    with pytest.raises(TokenFileError, match=message):
        TokenBook.load(tmp_path / "t")


def test_token_from_metadata() -> None:
    assert bearer_token([("authorization", "Bearer abc")]) == "abc"
    assert bearer_token([("authorization", "bearer  abc ")]) == "abc"
    assert bearer_token([("x-goog-api-key", "abc")]) == "abc"
    assert bearer_token([("authorization", "Basic abc")]) is None
    assert bearer_token([("authorization", "Bearer ")]) is None
    assert bearer_token([("authorization-bin", b"x")]) is None
    assert bearer_token(None) is None


def test_authenticate_codes(tmp_path: Path) -> None:
    (tmp_path / "t").write_text(f"{hash_token('v')} vox apis=voxgate\n")
    book = TokenBook.load(tmp_path / "t")
    assert authenticate(book, "voxgate.v1.Speech", [("authorization", "Bearer v")]).name == "vox"
    for service, metadata, code, reason in [
        ("voxgate.v1.Speech", [], grpc.StatusCode.UNAUTHENTICATED, errors.TOKEN_MISSING),
        ("voxgate.v1.Speech", [("authorization", "Bearer w")], grpc.StatusCode.UNAUTHENTICATED, errors.TOKEN_INVALID),
        (
            "google.cloud.speech.v1.Speech",
            [("authorization", "Bearer v")],
            grpc.StatusCode.PERMISSION_DENIED,
            errors.API_NOT_ALLOWED,
        ),
    ]:
        with pytest.raises(errors.StreamError) as err:
            authenticate(book, service, metadata)
        assert (err.value.code, err.value.reason) == (code, reason)


def test_auth_names_match_the_apis_and_the_proto() -> None:
    # (That they are the served services' names: test_tokens checks against a server's reflection.)
    assert pb.DESCRIPTOR.services_by_name["Speech"].full_name in API_OF_SERVICE
    assert set(API_OF_SERVICE.values()) == set(APIS)
    assert not OPEN_SERVICES & set(API_OF_SERVICE)
    for reason in (errors.TOKEN_MISSING, errors.TOKEN_INVALID, errors.API_NOT_ALLOWED, errors.SESSION_QUOTA):
        assert pb.ErrorReason.Value(reason)


def test_lookup_compares_every_digest() -> None:
    """No early exit: a lookup costs the same whichever entry (if any) matches."""
    calls: list[tuple[bytes, bytes]] = []
    book = TokenBook({bytes.fromhex(hash_token(t)[7:]): Tenant(t) for t in ("a", "b", "c")})
    real = hmac.compare_digest

    def counted(x: bytes, y: bytes) -> bool:
        calls.append((x, y))
        return real(x, y)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(hmac, "compare_digest", counted)
        found, missing = book.lookup("a"), book.lookup("z")
    assert found == Tenant("a") and missing is None
    assert len(calls) == 6 and len(book) == 3
