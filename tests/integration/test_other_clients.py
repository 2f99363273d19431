"""The Node and Go clients (clients/node, clients/go) against a live server.

Each test builds what it runs (tests/integration/client_examples.py): without node/npm or go the tests skip
with the reason, unless VOXGATE_REQUIRE_CLIENT_TOOLCHAINS=1 (CI sets it), where they fail.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import wave
from pathlib import Path

import pytest

from tests.helpers import FIXTURES, ROOT, ServerProcess, non_speech_lines, word_error_rate, write_hold_and_keys_wav
from tests.integration.client_examples import (
    BUILD_TIMEOUT_S,
    NODE_DIR,
    TOOLCHAINS,
    go_example,
    node_example,
    tail,
    unavailable,
)

CLIP = FIXTURES / "audio" / "go_forward.wav"
CLIP_TEXT = "go forward ten meters"
MAX_WER = 0.25  # as in test_sphinx_speech.py
FINAL_LINE = re.compile(r"^\[(\d+\.\d\d)s → (\d+\.\d\d)s\] (\S.*)$")
pytestmark = pytest.mark.timeout(BUILD_TIMEOUT_S)
__all__ = ["go_example", "node_example"]  # fixtures


@pytest.fixture(params=["node", "go"])
def example(request: pytest.FixtureRequest) -> list[str]:
    fixture = {"node": "node_example", "go": "go_example"}[request.param]
    cmd: list[str] = request.getfixturevalue(fixture)
    return cmd


def _run(cmd: list[str], wav: Path, server: ServerProcess, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*cmd, str(wav), "--server", server.target, *extra], capture_output=True, text=True, timeout=120
    )


def _finals(stdout: str) -> list[tuple[float, float, str]]:
    out = []
    for line in stdout.splitlines():
        match = FINAL_LINE.match(line)
        assert match, f"not a final-result line: {line!r}"
        out.append((float(match.group(1)), float(match.group(2)), match.group(3)))
    return out


def test_example_transcribes_real_speech(example: list[str], sphinx_server: ServerProcess) -> None:
    """Paced in real time, as a live source: the transcript of go_forward.wav on PocketSphinx."""
    proc = _run(example, CLIP, sphinx_server)
    assert proc.returncode == 0, tail(proc)
    finals = _finals(proc.stdout)
    assert finals, f"no final result printed:\n{tail(proc)}"
    for start, end, _ in finals:
        assert 0 <= start < end <= 2.79 + 0.05
    assert [s for s, _, _ in finals] == sorted(s for s, _, _ in finals)
    text = " ".join(t for _, _, t in finals)
    assert word_error_rate(CLIP_TEXT, text) <= MAX_WER, text


def test_example_downmixes_stereo(example: list[str], sphinx_server: ServerProcess, tmp_path: Path) -> None:
    with wave.open(str(CLIP)) as src:
        mono, rate = src.readframes(src.getnframes()), src.getframerate()
    stereo = b"".join(mono[i : i + 2] * 2 for i in range(0, len(mono), 2))
    path = tmp_path / "stereo.wav"
    with wave.open(str(path), "wb") as out:
        out.setnchannels(2)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(stereo)
    proc = _run(example, path, sphinx_server, "--no-pace")
    assert proc.returncode == 0, tail(proc)
    text = " ".join(t for _, _, t in _finals(proc.stdout))
    assert word_error_rate(CLIP_TEXT, text) <= MAX_WER, text


def test_example_prints_what_the_python_cli_prints(example: list[str], fake_server: ServerProcess) -> None:
    """On the deterministic fake engine the three clients print the same lines."""
    python_cli = [sys.executable, "-c", "import sys; from voxgate_client.cli import main; sys.exit(main())"]
    expected = _run(python_cli, CLIP, fake_server, "--no-pace")
    assert expected.returncode == 0, tail(expected)
    assert _finals(expected.stdout)
    proc = _run(example, CLIP, fake_server, "--no-pace")
    assert proc.returncode == 0, tail(proc)
    assert proc.stdout == expected.stdout


def test_example_prints_music_and_digits_as_the_python_cli_does(
    example: list[str], sphinx_server: ServerProcess, tmp_path: Path
) -> None:
    wav = write_hold_and_keys_wav(tmp_path / "hold_and_keys.wav")
    python_cli = [sys.executable, "-c", "import sys; from voxgate_client.cli import main; sys.exit(main())"]
    for extra in ((), ("--json",)):
        expected = _run(python_cli, wav, sphinx_server, "--no-pace", "--non-speech", *extra)
        proc = _run(example, wav, sphinx_server, "--no-pace", "--non-speech", *extra)
        assert expected.returncode == 0 and proc.returncode == 0, tail(proc)
        if extra:
            kinds = ("dtmf", "music_started", "music_ended")
            lines = map(json.loads, expected.stdout.splitlines())
            events = [{k: v for k, v in e.items() if k != "seq"} for e in lines if e.get("event") in kinds]
            assert [e for e in _json_lines(proc) if e["type"] == "speech_event"] == events
        else:
            events = non_speech_lines(expected.stdout)
            assert non_speech_lines(proc.stdout) == events
        assert len(events) == 5, expected.stdout
    without = _run(example, wav, sphinx_server, "--no-pace")
    assert non_speech_lines(without.stdout) == [], "only when asked"


def test_rpc_error_exits_nonzero_with_the_reason(
    example: list[str], fake_server: ServerProcess, tmp_path: Path
) -> None:
    path = tmp_path / "4khz.wav"  # below the 8 kHz minimum: INVALID_ARGUMENT / UNSUPPORTED_AUDIO_FORMAT
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(4000)
        out.writeframes(b"\0\0" * 4000)
    proc = _run(example, path, fake_server)
    assert proc.returncode == 1, tail(proc)
    assert proc.stdout == ""
    assert "INVALID_ARGUMENT (UNSUPPORTED_AUDIO_FORMAT)" in proc.stderr, proc.stderr
    assert "sample_rate_hz" in proc.stderr


def test_unreadable_file_is_a_usage_error(example: list[str], fake_server: ServerProcess, tmp_path: Path) -> None:
    proc = _run(example, tmp_path / "missing.wav", fake_server)
    assert proc.returncode == 2, tail(proc)
    assert "cannot read" in proc.stderr


def test_generated_clients_match_proto() -> None:
    """clients/node/proto and clients/go/voxgatev1 were regenerated after the last proto change."""
    copy = NODE_DIR / "proto" / "voxgate" / "v1" / "speech.proto"
    source = ROOT / "proto" / "voxgate" / "v1" / "speech.proto"
    assert copy.read_text() == source.read_text(), "run scripts/gen_clients.sh go node"
    tools = ("protoc", "protoc-gen-go", "protoc-gen-go-grpc", "node", "npm")
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        unavailable(f"{', '.join(missing)} not found: cannot regenerate the Go/Node code to compare ({TOOLCHAINS})")
    proc = subprocess.run(
        [str(ROOT / "scripts" / "gen_clients.sh"), "--check"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, tail(proc)


def test_node_declarations_compile_and_match_the_module(node_example: list[str]) -> None:
    """index.d.ts compiles under --strict and declares exactly the values index.js exports
    (clients/node/scripts/check_types.js; it fails on a missing, extra or ill-typed declaration)."""
    proc = subprocess.run(
        [node_example[0], str(NODE_DIR / "scripts" / "check_types.js")], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, tail(proc)
    assert "declares the" in proc.stdout


def _json_lines(proc: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    assert proc.returncode == 0, tail(proc)
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_example_json_carries_revised_finals_and_interim_stability(
    example: list[str], sphinx_server: ServerProcess
) -> None:
    """PocketSphinx revises go_forward.wav: interims "go forward ten meters", final "go forward ten years"
    (the decoder's own final hypothesis). `--json` shows the session's interim stability and the final's
    `revised` flag exactly as the Python client's `--json` does."""
    lines = _json_lines(_run(example, CLIP, sphinx_server, "--no-pace", "--json"))
    python_cli = [sys.executable, "-c", "import sys; from voxgate_client.cli import main; sys.exit(main())"]
    expected = _json_lines(_run(python_cli, CLIP, sphinx_server, "--no-pace", "--json"))
    assert [line["type"] for line in lines] == [t for t in (e["type"] for e in expected) if t != "speech_event"]
    assert lines[0]["interim_stability"] == expected[0]["interim_stability"] == "revisable"
    results = [line for line in lines if line["type"] == "result"]
    per_session = ("session_id", "result_id")
    assert [{k: v for k, v in r.items() if k not in per_session} for r in results] == [
        {k: e[k] for k in r if k not in per_session}
        for r, e in zip(results, [e for e in expected if e["type"] == "result"], strict=True)
    ]
    interims = [r for r in results if not r["is_final"]]
    final = next(r for r in results if r["is_final"])
    assert interims and not any("revised" in r for r in interims)
    assert final.get("revised") is True, results  # the engine's final pass changed the interim text
    assert not str(final["text"]).startswith(str(interims[-1]["text"]))


@pytest.mark.parametrize(("server", "stability"), [("sphinx_server", "revisable"), ("fake_server", "append_only")])
def test_example_reports_the_engines_interim_stability(
    example: list[str], server: str, stability: str, request: pytest.FixtureRequest
) -> None:
    target: ServerProcess = request.getfixturevalue(server)
    proc = subprocess.run(
        [*example, "--capabilities", "--server", target.target], capture_output=True, text=True, timeout=60
    )
    (caps,) = _json_lines(proc)
    assert caps["interim_stability"] == stability
    assert caps["engine"]["name"] == server.removesuffix("_server")


@pytest.mark.parametrize("channels", ["separate", "mix"])
def test_example_sends_a_multichannel_wav_as_the_python_cli_does(
    example: list[str], sphinx_server: ServerProcess, tmp_path: Path, channels: str
) -> None:
    """--channels separate|mix: each channel's finals (prefixed "[chN] ") or the server's downmix, as
    `voxgate-transcribe` prints them (channels' lines may interleave differently: compared per channel)."""
    voices = []
    for name in ("go_forward.wav", "librivox_amiable_woman.wav"):
        with wave.open(str(FIXTURES / "audio" / name)) as src:
            voices.append(src.readframes(src.getnframes()))
    n = max(len(v) for v in voices)
    left, right = (v + b"\0" * (n - len(v)) for v in voices)
    path = tmp_path / "two_voices.wav"
    with wave.open(str(path), "wb") as out:
        out.setnchannels(2)
        out.setsampwidth(2)
        out.setframerate(16000)
        out.writeframes(b"".join(left[i : i + 2] + right[i : i + 2] for i in range(0, n, 2)))
    python_cli = [sys.executable, "-c", "import sys; from voxgate_client.cli import main; sys.exit(main())"]
    expected = _run(python_cli, path, sphinx_server, "--no-pace", "--channels", channels)
    proc = _run(example, path, sphinx_server, "--no-pace", "--channels", channels)
    assert expected.returncode == 0 and proc.returncode == 0, tail(expected) + tail(proc)

    def by_channel(stdout: str) -> dict[str, list[str]]:
        lines: dict[str, list[str]] = {}
        for line in stdout.splitlines():
            tag = line[: line.index("] ") + 2] if line.startswith("[ch") else ""
            lines.setdefault(tag, []).append(line)
        return lines

    got, want = by_channel(proc.stdout), by_channel(expected.stdout)
    assert got == want and set(want) == ({"[ch1] ", "[ch2] "} if channels == "separate" else {""})
