"""Python client for voxgate, a real-time streaming speech-to-text gRPC service."""

from .audio import Audio, chunk_bytes, chunks, decode, encode, read_raw, read_wav, read_wav_channels
from .client import AsyncSpeechClient, SpeechClient, Transcript
from .config import (
    FINALIZE,
    KEEP_ALIVE,
    AudioItem,
    Control,
    Phrase,
    SetPhrases,
    StreamConfig,
    as_phrases,
)
from .encodings import ENCODINGS, Encoding
from .g711 import decode_alaw, decode_mulaw, encode_alaw, encode_mulaw
from .responses import (
    capabilities_to_dict,
    config_to_dict,
    error_details,
    format_error,
    response_to_dict,
)
from .resume import ResumePolicy
from .security import bearer_metadata, tls_credentials

__version__ = "0.1.0"

__all__ = [
    "ENCODINGS",
    "FINALIZE",
    "KEEP_ALIVE",
    "AsyncSpeechClient",
    "Audio",
    "AudioItem",
    "Control",
    "Encoding",
    "Phrase",
    "ResumePolicy",
    "SetPhrases",
    "SpeechClient",
    "StreamConfig",
    "Transcript",
    "__version__",
    "as_phrases",
    "bearer_metadata",
    "capabilities_to_dict",
    "chunk_bytes",
    "chunks",
    "config_to_dict",
    "decode",
    "decode_alaw",
    "decode_mulaw",
    "encode",
    "encode_alaw",
    "encode_mulaw",
    "error_details",
    "format_error",
    "read_raw",
    "read_wav",
    "read_wav_channels",
    "response_to_dict",
    "tls_credentials",
]
