"""voxgate service: the public gRPC server that owns client sessions. Imports no torch or vLLM."""
