"""Client audio → 16 kHz PCM16 chunks with speech flags and speech events."""
