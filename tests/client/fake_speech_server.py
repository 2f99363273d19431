"""A tiny in-process Speech servicer for client tests (no engine, no real server).

It answers each FINALIZE or the half-close with a final result whose text
says how many audio bytes the utterance had, and records what it received.
language_code "fail" makes it reject the stream with a rich UNAVAILABLE status.
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
        self.lock = threading.Lock()

    def GetCapabilities(self, request, context):
        return pb.GetCapabilitiesResponse(
            encodings=[pb.AUDIO_ENCODING_LINEAR16, pb.AUDIO_ENCODING_MULAW],
            engine=pb.EngineInfo(name="fake", model="none"),
            max_sessions=2,
        )

    def StreamingRecognize(self, request_iterator, context):
        kinds: list[str] = []
        with self.lock:
            self.received.append(kinds)
        first = next(request_iterator)
        kinds.append(first.WhichOneof("request"))
        config = first.config
        if config.language_code == "fail":
            status = status_pb2.Status(
                code=grpc.StatusCode.UNAVAILABLE.value[0],
                message="no free engine slot",
                details=[
                    _packed(error_details_pb2.ErrorInfo(reason="CAPACITY", domain="voxgate.dev")),
                    _packed(error_details_pb2.RetryInfo(retry_delay=_dur(1.5))),
                ],
            )
            context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
            context.abort(grpc.StatusCode.UNAVAILABLE, "no free engine slot")
        width = 2 if config.encoding == pb.AUDIO_ENCODING_LINEAR16 else 1
        rate = config.sample_rate_hz
        seq = 0

        def respond(**fields) -> pb.StreamingRecognizeResponse:
            nonlocal seq
            seq += 1
            return pb.StreamingRecognizeResponse(seq=seq, **fields)

        yield respond(
            started=pb.SessionStarted(session_id="fake-1", effective_config=config, engine=pb.EngineInfo(name="fake"))
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

        for request in request_iterator:
            kind = request.WhichOneof("request")
            kinds.append(kind)
            if kind == "audio":
                total += len(request.audio)
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
        yield respond(
            ended=pb.SessionEnded(reason=pb.SESSION_END_REASON_CLIENT_END, audio_duration=_dur(total / width / rate))
        )


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
