"""The audio an engine is fed: 16 kHz mono signed 16-bit little-endian PCM (AudioChunk.pcm16)."""

from __future__ import annotations

SAMPLE_RATE_HZ = 16000
BYTES_PER_SAMPLE = 2
BYTES_PER_MS = SAMPLE_RATE_HZ * BYTES_PER_SAMPLE // 1000
CHUNK_MS = 80  # the audio of one AudioChunk the service sends (a cut one is shorter): Voxtral's step
