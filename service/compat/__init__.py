"""Compatibility endpoints on voxgate's port: NVIDIA Riva ASR and Google Speech-to-Text v1.

Each maps its own request stream onto a voxgate session (SpeechServicer.run_session)
and its responses back from voxgate's outputs; see docs/compat.md.
"""

from __future__ import annotations

import grpc

from ..api import SpeechServicer
from ..config import Config
from . import google_stt, riva
from ._proto import cloud_speech_pb2_grpc, riva_asr_pb2_grpc

SERVICES = (riva.SERVICE, google_stt.SERVICE)


def register(server: grpc.aio.Server, speech: SpeechServicer, config: Config) -> tuple[str, ...]:
    """Add the compat servicers to `server`; returns their full service names (for reflection and health)."""
    riva_asr_pb2_grpc.add_RivaSpeechRecognitionServicer_to_server(riva.RivaServicer(speech, config), server)
    cloud_speech_pb2_grpc.add_SpeechServicer_to_server(google_stt.GoogleSpeechServicer(speech, config), server)
    return SERVICES
