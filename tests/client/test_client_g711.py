"""G.711 codecs against CPython's audioop, the reference implementation."""

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from voxgate_client import g711

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # removed in 3.13
    audioop = pytest.importorskip("audioop")

ALL_CODES = bytes(range(256))
ALL_INT16 = np.arange(-32768, 32768, dtype=np.int32).astype(np.int16)
CODECS = [
    (g711.encode_mulaw, g711.decode_mulaw, audioop.lin2ulaw, audioop.ulaw2lin),
    (g711.encode_alaw, g711.decode_alaw, audioop.lin2alaw, audioop.alaw2lin),
]
IDS = ["mulaw", "alaw"]


@pytest.mark.parametrize(("enc", "dec", "ref_enc", "ref_dec"), CODECS, ids=IDS)
def test_decode_matches_audioop_for_every_code(enc, dec, ref_enc, ref_dec):
    expected = np.frombuffer(ref_dec(ALL_CODES, 2), dtype="<i2")
    got = dec(ALL_CODES)
    assert got.dtype == np.int16
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(("enc", "dec", "ref_enc", "ref_dec"), CODECS, ids=IDS)
def test_encode_matches_audioop_for_every_int16(enc, dec, ref_enc, ref_dec):
    assert enc(ALL_INT16) == ref_enc(ALL_INT16.astype("<i2").tobytes(), 2)


@pytest.mark.parametrize(("enc", "dec", "ref_enc", "ref_dec"), CODECS, ids=IDS)
def test_round_trip_is_a_monotone_quantiser(enc, dec, ref_enc, ref_dec):
    once = dec(enc(ALL_INT16)).astype(np.int64)
    x = ALL_INT16.astype(np.int64)
    # Logarithmic quantiser: error grows with magnitude (step <= |x|/16 in the top segment).
    assert np.all(np.abs(once - x) <= np.abs(x) / 16 + 8)
    assert np.all(np.diff(once) >= 0)
    # Quantising a quantised value changes nothing.
    assert enc(once.astype(np.int16)) == enc(ALL_INT16)


def test_codes_survive_decode_encode():
    assert g711.encode_alaw(g711.decode_alaw(ALL_CODES)) == ALL_CODES
    # mu-law has two zeros (0x7F is "-0"); every other code is preserved.
    back = g711.encode_mulaw(g711.decode_mulaw(ALL_CODES))
    assert [i for i in range(256) if back[i] != i] == [0x7F]


@given(hnp.arrays(np.int16, hnp.array_shapes(max_dims=2, max_side=64)))
def test_encode_accepts_any_shape_and_layout(samples):
    for enc, _, ref_enc, _ in CODECS:
        flat = samples.reshape(-1)
        assert enc(samples) == ref_enc(flat.astype("<i2").tobytes(), 2)
        assert enc(samples.T) == enc(np.ascontiguousarray(samples.T))


@given(st.binary(max_size=512))
def test_decode_length_is_one_sample_per_byte(data):
    assert len(g711.decode_mulaw(data)) == len(data) == len(g711.decode_alaw(data))


def test_encode_rejects_non_int16():
    with pytest.raises(TypeError):
        g711.encode_mulaw(np.zeros(4, dtype=np.float32))


def test_decode_accepts_memoryview_and_tables_are_read_only():
    out = g711.decode_mulaw(memoryview(b"\x00\xff"))
    np.testing.assert_array_equal(out, [-32124, 0])
    out[0] = 1  # the result is a fresh array, not a view of the table
    assert g711.decode_mulaw(b"\x00")[0] == -32124
