"""voxgate plugin for LiveKit Agents.

Speech-to-text from a self-hosted voxgate server (https://github.com/voxgate): streaming
recognition with interim and final transcripts, speech start/end events and word timings, and
batch recognition, over voxgate's gRPC API through its Python client (`voxgate-client`).
"""

from livekit.agents import Plugin

from .log import logger
from .stt import STT, SpeechStream
from .version import __version__

__all__ = ["STT", "SpeechStream", "__version__"]


class VoxgatePlugin(Plugin):
    def __init__(self) -> None:
        super().__init__(__name__, __version__, __package__, logger)


Plugin.register_plugin(VoxgatePlugin())
