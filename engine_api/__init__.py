"""The contract between the voxgate service and its engine sidecar: the one package both import.

- `v1`: the engine API's gRPC stubs (generated from proto/voxgate/engine/v1/engine.proto into `_proto/`).
- `audio`: the audio format the engine is fed (16 kHz mono PCM16).
- `outputs`: what an engine session says (Delta, Revision, Diagnostic, Flushed, Closed, Progress).
- `info`, `status`: what an engine says about itself (EngineInfo at start, EngineStatus at each status call).
- `wire`: the one converter between those dataclasses and the wire messages.
- `presets`: the named engine settings (`voxgate serve --preset`, `voxgate plan`).
- `limits`: how flow-control bounds are named; `frontends`: a sidecar's front-end sockets; `sockets`: private
  Unix sockets.

Nothing here imports the service or the sidecar, nor torch, vLLM or any engine.
"""
