"""A tiny in-process Speech servicer for client tests (no engine, no real server).

It answers each FINALIZE or the half-close with a final result whose text
says how many audio bytes the utterance had, and records what it received.
language_code "fail" makes it reject the stream with a rich UNAVAILABLE status.

A drain can be scripted (`drain_at_bytes`): the stream that reaches that much audio stops
reading there (a chunk that crosses the mark counts only up to it, like audio that arrived
after the server stopped taking input), sends the final result of what it took and ends with
SessionEnded{DRAINING}; the next `refuse_after_drain` streams are refused with UNAVAILABLE
DRAINING, as a balancer that still picks the draining instance would have them.
"""

from __future__ import annotations

import threading
from concurrent import futures

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2

from voxgate_client._proto import speech_pb2 as pb
from voxgate_client._proto import speech_pb2_grpc


def _dur(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(round(seconds * 1e9))
    return d


def _packed(message) -> any_pb2.Any:
    a = any_pb2.Any()
    a.Pack(message)
    return a


class FakeSpeech(speech_pb2_grpc.SpeechServicer):
    def __init__(self) -> None:
        self.received: list[list[str]] = []  # request kinds per stream
        self.audio: list[bytearray] = []  # audio per stream, as processed
        self.lock = threading.Lock()
        self.drain_at_bytes: int | None = None  # the first stream to get there is drained
        self.refuse_after_drain = 0
        self.refused = 0
        self.reset_after_drain = False  # the next stream after the drain is reset (CANCELLED) as a proxy would

    def GetCapabilities(self, request, context):
        return pb.GetCapabilitiesResponse(
            encodings=[pb.AUDIO_ENCODING_LINEAR16, pb.AUDIO_ENCODING_MULAW],
            engine=pb.EngineInfo(name="fake", model="none"),
            max_sessions=2,
        )

    @staticmethod
    def _unavailable(context, reason: str, message: str):
        status = status_pb2.Status(
            code=grpc.StatusCode.UNAVAILABLE.value[0],
            message=message,
            details=[
                _packed(error_details_pb2.ErrorInfo(reason=reason, domain="voxgate.dev")),
                _packed(error_details_pb2.RetryInfo(retry_delay=_dur(1.5))),
            ],
        )
        context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
        context.abort(grpc.StatusCode.UNAVAILABLE, message)

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
        if config.language_code == "fail":
            self._unavailable(context, "CAPACITY", "no free engine slot")
        if refuse:
            self._unavailable(context, "DRAINING", "server is draining; connect to another instance")
        if reset:
            context.abort(grpc.StatusCode.CANCELLED, "CANCELLED")  # no ErrorInfo: not the server's choice
        width = 2 if config.encoding == pb.AUDIO_ENCODING_LINEAR16 else 1
        rate = config.sample_rate_hz
        seq = 0

        def respond(**fields) -> pb.StreamingRecognizeResponse:
            nonlocal seq
            seq += 1
            return pb.StreamingRecognizeResponse(seq=seq, **fields)

        yield respond(
            started=pb.SessionStarted(
                session_id=f"fake-{stream}", effective_config=config, engine=pb.EngineInfo(name="fake"),
                resume_token=f"token-{stream}" if config.flow_status.enabled else "",
            )
        )
        total = utterance = start = 0

        def final() -> pb.StreamingRecognizeResponse:
            nonlocal utterance, start
            text = f"utterance {utterance} bytes {total - start}"
            result = pb.RecognitionResult(
                result_id=f"r{utterance}",
                utterance_index=utterance,
                is_final=True,
                text=text,
                delta=text,
                start_offset=_dur(start / width / rate),
                end_offset=_dur(total / width / rate),
            )
            utterance += 1
            start = total
            return respond(result=result)

        drained = False
        for request in request_iterator:
            kind = request.WhichOneof("request")
            kinds.append(kind)
            if kind == "audio":
                data = request.audio
                with self.lock:
                    drain_at = self.drain_at_bytes
                    if drain_at is not None and drain_at >= 0 and total + len(data) >= drain_at:
                        data, drained = data[: drain_at - total], True
                        self.drain_at_bytes = -1  # one drain; refusals may follow
                audio.extend(data)
                total += len(data)
                if drained:
                    break
                if config.interim_results:
                    yield respond(
                        result=pb.RecognitionResult(
                            result_id=f"r{utterance}",
                            utterance_index=utterance,
                            text=f"partial {total - start}",
                        )
                    )
            elif kind == "finalize":
                yield final()
        if total > start:
            yield final()
        reason = pb.SESSION_END_REASON_DRAINING if drained else pb.SESSION_END_REASON_CLIENT_END
        yield respond(ended=pb.SessionEnded(reason=reason, audio_duration=_dur(total / width / rate)))


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
