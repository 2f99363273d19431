"""RoPE re-anchoring of cached attention keys."""
