"""A recognition session (core.Session), split along its two directions.

core.py          the lifecycle: Phase (phase.py) and every way a session ends, in one place
inbound.py       client stream → intake.py (limits, resume skip, decode/VAD/chunks) → the engine queue
engine_inputs.py what goes through the engine queue: Chunk, Flush, Close
engine_chain.py  the engine queue → a chain of engine streams (writer, receiver, watchdog), seams and replay
                 (replay.py), the freeze watch (freeze.py), engine outputs → results.py → the response log
engine_source.py the interface to the engine: EngineSource opens EngineStreams; engine_link.py is the
                 real one (gRPC to the sidecar), tests/session/harness.py a fake one
log.py           the numbered, replayable responses a client stream reads
timers.py        the client's clocks (idle, resume window, FlowStatus); alarm.py waits on the injected clock
stats.py         metrics and trace attributes
"""
