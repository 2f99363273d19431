"""voxgate engine sidecar: one process that owns exactly one speech engine."""
