"""voxgate speech-to-text for Pipecat: a streaming STTService over voxgate's gRPC API."""

from .stt import VoxgateResult, VoxgateSTTService, VoxgateSTTSettings, VoxgateWord

__version__ = "0.1.0"

__all__ = ["VoxgateResult", "VoxgateSTTService", "VoxgateSTTSettings", "VoxgateWord", "__version__"]
