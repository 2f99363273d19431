"""A tiny in-process Speech servicer for client tests (no engine, no real server).

It answers each FINALIZE or the half-close with a final result whose text
says how many audio bytes the utterance had, and records what it received.
language_code "fail" makes it reject the stream with a rich UNAVAILABLE status.

A drain can be scripted (`drain_at_bytes`): the stream that reaches that much audio stops
reading there (a chunk that crosses the mark counts only up to it, like audio that arrived
after the server stopped taking input), sends the final result of what it took and ends with
SessionEnded{DRAINING}; the next `refuse_after_drain` streams are refused with UNAVAILABLE
DRAINING, as a balancer that still picks the draining instance would have them.

A dropped connection can be scripted too (`drop_at_bytes`): the stream that reaches that much
audio of its session takes it up to the mark, then fails with UNAVAILABLE and no ErrorInfo, as
a connection that broke; 0 drops it right after its `started`. A session with flow status
enabled gets a resume token and can be resumed as the real server does it (a `started` with
`resumed`, the responses after `resume_last_seq` again, resent audio skipped by count); one
dropped before any audio is gone (SESSION_NOT_FOUND). `ack_audio` sends a FlowStatus
acknowledging the session's audio after each audio request; `drop_after_end` fails each stream
with UNAVAILABLE after its `ended`.
"""

from __future__ import annotations

import threading
from concurrent import futures
from dataclasses import dataclass, field

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2

from voxgate_client.v1 import speech_pb2 as pb
from voxgate_client.v1 import speech_pb2_grpc


def _dur(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(round(seconds * 1e9))
    return d


def _packed(message) -> any_pb2.Any:
    a = any_pb2.Any()
    a.Pack(message)
    return a


@dataclass
class _Session:
    id: str
    config: pb.StreamingConfig
    total: int = 0  # audio bytes processed
    utterance: int = 0
    start: int = 0  # where the current utterance starts
    seq: int = 0
    log: list[pb.StreamingRecognizeResponse] = field(default_factory=list)  # for a resume


class FakeSpeech(speech_pb2_grpc.SpeechServicer):
    def __init__(self) -> None:
        self.received: list[list[str]] = []  # request kinds per stream
        self.audio: list[bytearray] = []  # audio per stream, as processed
        self.lock = threading.Lock()
        self.drain_at_bytes: int | None = None  # the first stream to get there is drained
        self.refuse_after_drain = 0
        self.refused = 0
        self.reset_after_drain = False  # the next stream after the drain is reset (CANCELLED) as a proxy would
        self.drop_at_bytes: int | None = None  # the first stream to get there is dropped
        self.ack_audio = False
        self.drop_after_end = False
        self.sessions: dict[str, _Session] = {}  # by resume token

    def GetCapabilities(self, request, context):
        return pb.GetCapabilitiesResponse(
            encodings=[pb.AUDIO_ENCODING_LINEAR16, pb.AUDIO_ENCODING_MULAW],
            engine=pb.EngineInfo(name="fake", model="none"),
            max_sessions=2,
        )

    @staticmethod
    def _unavailable(context, reason: str, message: str):
        FakeSpeech._abort(
            context,
            grpc.StatusCode.UNAVAILABLE,
            reason,
            message,
            _packed(error_details_pb2.RetryInfo(retry_delay=_dur(1.5))),
        )

    @staticmethod
    def _abort(context, code: grpc.StatusCode, reason: str, message: str, *more: any_pb2.Any):
        status = status_pb2.Status(
            code=code.value[0],
            message=message,
            details=[_packed(error_details_pb2.ErrorInfo(reason=reason, domain="voxgate.dev")), *more],
        )
        context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
        context.abort(code, message)

    def _drop(self, context, session: _Session):
        with self.lock:
            self.drop_at_bytes = None  # one drop
            if not session.total:  # nothing to resume: the server ends such a session at once
                self.sessions = {t: s for t, s in self.sessions.items() if s is not session}
        context.abort(grpc.StatusCode.UNAVAILABLE, "connection reset")  # no ErrorInfo: not the server's choice

    def StreamingRecognize(self, request_iterator, context):
        kinds: list[str] = []
        audio = bytearray()
        with self.lock:
            self.received.append(kinds)
            self.audio.append(audio)
            stream = len(self.received)
            refuse = self.refused < self.refuse_after_drain and self.drain_at_bytes == -1
            if refuse:
                self.refused += 1
            reset = self.reset_after_drain and self.drain_at_bytes == -1
            if reset:
                self.reset_after_drain = False
        first = next(request_iterator)
        kinds.append(first.WhichOneof("request"))
        config = first.config
        resumed = bool(config.resume_token)
        skip = 0  # resent audio the session already has
        token = config.resume_token
        if resumed:
            with self.lock:
                session = self.sessions.get(config.resume_token)
            if session is None:
                self._abort(context, grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND", "no session to resume")
            skip = session.total - config.resume_audio_bytes
            if skip < 0:  # the client would resend from beyond what the session has: a gap
                context.abort(grpc.StatusCode.OUT_OF_RANGE, "resume_audio_bytes beyond the session's audio")
            yield pb.StreamingRecognizeResponse(
                started=pb.SessionStarted(
                    session_id=session.id,
                    effective_config=session.config,
                    resume_token=config.resume_token,
                    resumed=True,
                )
            )
            yield from [r for r in session.log if r.seq > config.resume_last_seq]
            config = session.config
        else:
            if config.language_code == "fail":
                self._unavailable(context, "CAPACITY", "no free engine slot")
            if refuse:
                self._unavailable(context, "DRAINING", "server is draining; connect to another instance")
            if reset:
                context.abort(grpc.StatusCode.CANCELLED, "CANCELLED")  # no ErrorInfo: not the server's choice
            session = _Session(f"fake-{stream}", config)
            token = f"token-{stream}" if config.flow_status.enabled else ""
            if token:
                with self.lock:
                    self.sessions[token] = session
        width = 2 if config.encoding == pb.AUDIO_ENCODING_LINEAR16 else 1
        rate = config.sample_rate_hz

        def respond(**fields) -> pb.StreamingRecognizeResponse:
            session.seq += 1
            response = pb.StreamingRecognizeResponse(seq=session.seq, **fields)
            session.log.append(response)
            return response

        if not resumed:
            yield respond(
                started=pb.SessionStarted(
                    session_id=session.id,
                    effective_config=config,
                    engine=pb.EngineInfo(name="fake"),
                    resume_token=token,
                )
            )
        if self.drop_at_bytes == 0:
            self._drop(context, session)

        def final() -> pb.StreamingRecognizeResponse:
            text = f"utterance {session.utterance} bytes {session.total - session.start}"
            result = pb.RecognitionResult(
                result_id=f"r{session.utterance}",
                utterance_index=session.utterance,
                is_final=True,
                text=text,
                delta=text,
                start_offset=_dur(session.start / width / rate),
                end_offset=_dur(session.total / width / rate),
            )
            session.utterance += 1
            session.start = session.total
            return respond(result=result)

        drained = dropped = False
        for request in request_iterator:
            kind = request.WhichOneof("request")
            kinds.append(kind)
            if skip and kind != "audio":
                continue  # a control item resent with audio the session already has
            if kind == "audio":
                data = request.audio[skip:]
                skip = max(skip - len(request.audio), 0)
                if not data:
                    continue
                total = session.total
                with self.lock:
                    drain_at = self.drain_at_bytes
                    if drain_at is not None and drain_at >= 0 and total + len(data) >= drain_at:
                        data, drained = data[: drain_at - total], True
                        self.drain_at_bytes = -1  # one drain; refusals may follow
                    drop_at = self.drop_at_bytes
                    if not drained and drop_at is not None and total + len(data) >= drop_at:
                        data, dropped = data[: drop_at - total], True
                audio.extend(data)
                session.total += len(data)
                if dropped:
                    self._drop(context, session)
                if drained:
                    break
                if self.ack_audio and config.flow_status.enabled:
                    yield respond(flow_status=pb.FlowStatus(acked_audio_bytes=session.total))
                if config.interim_results:
                    yield respond(
                        result=pb.RecognitionResult(
                            result_id=f"r{session.utterance}",
                            utterance_index=session.utterance,
                            text=f"partial {session.total - session.start}",
                        )
                    )
            elif kind == "finalize":
                yield final()
        if session.total > session.start:
            yield final()
        reason = pb.SESSION_END_REASON_DRAINING if drained else pb.SESSION_END_REASON_CLIENT_END
        yield respond(ended=pb.SessionEnded(reason=reason, audio_duration=_dur(session.total / width / rate)))
        if self.drop_after_end:  # the connection breaks after the session's clean end: nothing is lost
            context.abort(grpc.StatusCode.UNAVAILABLE, "connection reset")


class FakeServer:
    def __init__(self) -> None:
        self.servicer = FakeSpeech()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        speech_pb2_grpc.add_SpeechServicer_to_server(self.servicer, self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.target = f"127.0.0.1:{port}"

    def __enter__(self) -> FakeServer:
        self.server.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.stop(grace=None)
