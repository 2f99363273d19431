"""The voxgate-transcribe command: argument errors and end-to-end runs."""

import argparse
import io
import json
import sys
import wave

import numpy as np
import pytest

from voxgate_client import cli


def write_wav(path, *, rate=8000, channels=1, seconds=0.25):
    frames = np.zeros((int(rate * seconds), channels), dtype="<i2")
    frames[:, 0] = 1000
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(frames.tobytes())
    return path


@pytest.fixture
def raw_file(tmp_path):
    path = tmp_path / "audio.raw"
    path.write_bytes(b"\x00\x01" * 1600)
    return path


def test_raw_input_without_sample_rate_is_a_usage_error(raw_file, capsys):
    assert cli.main([str(raw_file)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("voxgate-transcribe: error: ")
    assert "--sample-rate is required" in err
    assert "no WAV header" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--encoding", "opus", "f"], "invalid choice"),
        (["--no-pace", "--speed", "2", "f"], "not allowed with argument"),
        (["--speed", "0", "f"], "must be positive"),
        (["--sample-rate", "abc", "f"], "not a number"),
        (["--chunk-ms", "-5", "f"], "must be positive"),
        (["--endpointing-silence-ms", "0", "f"], "must be positive"),
        ([], "required"),
    ],
)
def test_bad_arguments_exit_2(argv, message, capsys):
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_help_exits_0(capsys):
    assert cli.main(["--help"]) == 0
    assert "--sample-rate" in capsys.readouterr().out


def test_missing_file_exits_2(tmp_path, capsys):
    assert cli.main([str(tmp_path / "nope.wav")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_wav_with_other_sample_rate_exits_2(tmp_path, capsys):
    path = write_wav(tmp_path / "a.wav", rate=16000)
    assert cli.main(["--sample-rate", "8000", str(path)]) == 2
    assert "16000 Hz" in capsys.readouterr().err


def test_arguments_reusable_in_another_parser(raw_file, capsys):
    parser = argparse.ArgumentParser(prog="voxgate")
    sub = parser.add_subparsers(dest="command", required=True)
    cli.add_transcribe_arguments(sub.add_parser("transcribe"))
    args = parser.parse_args(["transcribe", "--no-pace", "--encoding", "MULAW", str(raw_file)])
    assert (args.encoding, args.no_pace, args.chunk_ms) == ("mulaw", True, 100)
    assert cli.run_transcribe(args) == 2
    assert capsys.readouterr().err.startswith("voxgate transcribe: error: ")


def test_wav_json_end_to_end(tmp_path, fake_speech, capsys):
    path = write_wav(tmp_path / "stereo.wav", channels=2, seconds=0.25)
    argv = ["--server", fake_speech.target, "--no-pace", "--json", "--encoding", "mulaw"]
    assert cli.main([*argv, str(path)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["type"] for line in lines] == ["started", "result", "result", "result", "result", "ended"]
    assert lines[0]["effective_config"]["encoding"] == "mulaw"
    finals = [line for line in lines if line["type"] == "result" and line["is_final"]]
    assert [f["text"] for f in finals] == ["utterance 0 bytes 2000"]  # 1 byte a sample
    assert fake_speech.servicer.received[0].count("audio") == 3  # 100 + 100 + 50 ms
    assert lines[-1]["reason"] == "client_end"


def test_endpointing_and_limits_reach_the_config(tmp_path, fake_speech, capsys):
    path = write_wav(tmp_path / "a.wav")
    argv = [
        "--server",
        fake_speech.target,
        "--no-pace",
        "--json",
        "--endpointing-silence-ms",
        "2500",
        "--max-duration",
        "90",
        "--idle-timeout",
        "15",
    ]
    assert cli.main([*argv, str(path)]) == 0
    config = json.loads(capsys.readouterr().out.splitlines()[0])["effective_config"]
    assert config["endpointing_silence_ms"] == 2500
    assert config["limits"] == {"max_duration_s": 90.0, "idle_timeout_s": 15.0}


def test_plain_output_prints_only_finals(tmp_path, fake_speech, capsys):
    path = write_wav(tmp_path / "a.wav", seconds=0.2)
    assert cli.main(["--server", fake_speech.target, "--speed", "50", str(path)]) == 0
    assert capsys.readouterr().out == "[0.00s → 0.20s] utterance 0 bytes 3200\n"


def test_tty_output_updates_interim_in_place(tmp_path, fake_speech, monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    monkeypatch.setattr(sys, "stdout", out)
    path = write_wav(tmp_path / "a.wav", seconds=0.2)
    assert cli.main(["--server", fake_speech.target, "--no-pace", str(path)]) == 0
    text = out.getvalue()
    assert "\r\x1b[Kpartial 1600" in text
    assert text.endswith("\r\x1b[K[0.00s → 0.20s] utterance 0 bytes 3200\n")


def test_raw_stdin_drops_partial_sample(fake_speech, monkeypatch, capsys):
    stdin = io.TextIOWrapper(io.BytesIO(b"\x00\x01" * 1000 + b"\x07"))
    monkeypatch.setattr(sys, "stdin", stdin)
    argv = ["--server", fake_speech.target, "--no-pace", "--sample-rate", "8000", "-"]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert "utterance 0 bytes 2000" in captured.out
    assert "dropped 1 trailing byte" in captured.err
    assert fake_speech.servicer.received[0].count("audio") == 2  # 1600 + 400 bytes


def test_rpc_error_exits_1_with_one_line(tmp_path, fake_speech, capsys):
    path = write_wav(tmp_path / "a.wav")
    argv = ["--server", fake_speech.target, "--no-pace", "--json", "--language", "fail"]
    assert cli.main([*argv, str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.err == ("voxgate-transcribe: error: UNAVAILABLE (CAPACITY): no free engine slot; retry in 1.5s\n")
    error = json.loads(captured.out.splitlines()[-1])
    assert error["type"] == "error"
    assert (error["code"], error["reason"], error["retry_delay_s"]) == (
        "UNAVAILABLE",
        "CAPACITY",
        1.5,
    )


def test_unreachable_server_exits_1(tmp_path, capsys):
    path = write_wav(tmp_path / "a.wav")
    assert cli.main(["--server", "127.0.0.1:1", "--no-pace", str(path)]) == 1
    assert "UNAVAILABLE" in capsys.readouterr().err
