"""Engine options have one way in: `--preset`, the named flags and `--engine-option KEY=VALUE` (or their
VOXGATE_<FLAG> variables). `voxgate serve` passes them on unread; the sidecar reads them once."""

from __future__ import annotations

import argparse

import pytest

from engine_sidecar.engines import engine_options
from engine_sidecar.engines.voxtral.flags import add_engine_arguments, option_items, parse_items
from engine_sidecar.process.main import add_sidecar_arguments
from service.cli import main as voxgate


def sidecar_args(*argv: str, environ: dict[str, str] | None = None, engine: str = "voxtral") -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    if environ is None:
        add_sidecar_arguments(parser)
    else:
        parser.add_argument("--engine", default="voxtral")
        add_engine_arguments(parser, environ)
    return parser.parse_args(["--engine", engine, *(["--socket", "/s"] if environ is None else []), *argv])


def test_a_preset_then_the_named_flags_then_engine_option_items_each_later_one_winning() -> None:
    args = sidecar_args(
        "--preset",
        "16gb",
        "--max-num-seqs",
        "3",
        "--max-model-len",
        "1024",
        "--engine-option",
        "max_model_len=2048",
        "--engine-option",
        "rut_blank_frames=300",
    )
    options = engine_options(args)
    assert options is not None
    assert (options.max_num_seqs, options.max_model_len, options.rut_blank_frames) == (3, 2048, 300)
    assert options.decoder_sliding_window == 512  # the preset's, untouched


def test_what_serve_passes_on_reads_back_the_same_in_the_sidecar() -> None:
    given = sidecar_args("--max-num-seqs", "3", "--no-reanchor", "--engine-option", "allocator=system")
    again = sidecar_args(*(arg for item in option_items(given) for arg in ("--engine-option", item)))
    assert engine_options(given) == engine_options(again)
    assert option_items(given) == ("max_num_seqs=3", "reanchor=false", "allocator=system")


def test_every_engine_flag_reads_its_environment_variable() -> None:
    args = sidecar_args(
        environ={
            "VOXGATE_PRESET": "16gb",
            "VOXGATE_MAX_NUM_SEQS": "2",
            "VOXGATE_NO_REANCHOR": "1",
            "VOXGATE_ENGINE_OPTION": "rut_blank_frames=7 stall_timeout_s=3.5",
        }
    )
    options = engine_options(args)
    assert options is not None
    assert (options.max_num_seqs, options.reanchor, options.rut_blank_frames, options.stall_timeout_s) == (
        2,
        False,
        7,
        3.5,
    )
    assert sidecar_args("--max-num-seqs", "5", environ={"VOXGATE_MAX_NUM_SEQS": "2"}).max_num_seqs == 5


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (("--engine-option", "no_such_option=1"), "unknown voxtral option 'no_such_option'"),
        (("--engine-option", "max_num_seqs"), "--engine-option wants KEY=VALUE"),
        (("--max-num-seqs", "0"), "max_num_seqs must be >= 1"),
    ],
)
def test_a_wrong_option_is_a_clear_error(argv: tuple[str, ...], said: str) -> None:
    with pytest.raises(ValueError, match=said):
        engine_options(sidecar_args(*argv))


def test_another_engine_takes_no_engine_options() -> None:
    assert engine_options(sidecar_args(engine="sphinx")) is None
    with pytest.raises(ValueError, match="the sphinx engine takes no engine options"):
        engine_options(sidecar_args("--preset", "16gb", engine="sphinx"))


def test_voxgate_serve_refuses_wrong_engine_options_before_starting_anything(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert voxgate(["serve", "--engine", "voxtral", "--engine-option", "no_such_option=1"]) == 2
    assert "voxgate serve: unknown voxtral option 'no_such_option'" in capsys.readouterr().err
    assert voxgate(["serve", "--engine", "fake", "--max-model-len", "512"]) == 2
    assert "the fake engine takes no engine options" in capsys.readouterr().err


def test_values_are_json_where_they_parse_else_strings() -> None:
    assert parse_items(["a=1", "b=true", "c=auto", 'd={"x": 1}', "e="]) == {
        "a": 1,
        "b": True,
        "c": "auto",
        "d": {"x": 1},
        "e": "",
    }


def test_probes_are_no_engine_options_and_reach_a_sidecar_only_through_its_environment() -> None:
    from engine_sidecar.engines.voxtral.probes import Probes, split

    for probe in ("emit_empty_deltas=true", "exact_rope_tables=true", "chunk_render=vllm"):
        with pytest.raises(ValueError, match="unknown voxtral option"):
            engine_options(sidecar_args("--engine-option", probe))
    probes = Probes(emit_empty_deltas=True, step_driver="vllm")
    assert Probes.from_env(probes.env()) == probes and Probes.from_env({}) == Probes()
    options, split_probes = split({"max_num_seqs": 2, "reanchor_rotate": "none"})
    assert options == {"max_num_seqs": 2} and split_probes == Probes(reanchor_rotate="none")
    with pytest.raises(ValueError, match="probe step_driver"):
        Probes(step_driver="fast")
    with pytest.raises(ValueError, match="unknown probes"):
        Probes.from_mapping({"max_num_seqs": 2})
