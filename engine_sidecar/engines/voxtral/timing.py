"""Audio time of each output token, and how much audio one engine request can hold.

Every number comes from the model's own tokenizer (mistral_common's audio
config and streaming prompt); nothing here is a Voxtral literal.

Timing. vLLM's realtime buffer (VoxtralRealtimeBuffer) feeds the request
`left padding (L frames of silence) + the real audio + right padding`. Its first
step takes the whole streaming prompt of P tokens (BOS + L left-pad + D/F delay
tokens) with P frames of padded audio; every later step takes one token and
one more frame of F ms. So after output token k (0-based within the request)
the model has seen padded audio up to (P + k)·F ms, i.e. real audio up to
(P + k)·F − L·F ms, and it speaks D ms late. Hence token k describes

    end_ms(k)   = offset_ms + (P + k)·F − L·F − D
    start_ms(k) = end_ms(k) − F

where offset_ms is the session audio consumed by earlier requests (rollover).
With Voxtral's values (P = 23, L = 16, D = 480, F = 80) that is the frame
[k·80, (k+1)·80) ms of the request's audio. Both ends are clamped to the audio
actually pushed: right-padding tokens lie after the real audio.

Capacity. The buffer stops a request (silently) once its positions would reach
max_model_len. With S samples of real audio the request needs
L + S/N + R + 1 positions (N samples per frame, R right-pad frames), so a
request may take at most (max_model_len − L − R − 1 − margin)·N samples.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine_api.audio import SAMPLE_RATE_HZ


@dataclass(frozen=True)
class StreamGeometry:
    prompt_tokens: int  # P
    left_pad_frames: int  # L
    right_pad_frames: int  # R
    delay_ms: int  # D
    frame_ms: int  # F
    samples_per_frame: int  # N
    blank_token_id: int

    def token_end_ms(self, k: int) -> int:
        return (self.prompt_tokens + k) * self.frame_ms - self.left_pad_frames * self.frame_ms - self.delay_ms

    def token_span_ms(self, k: int, offset_ms: int, audio_ms: int) -> tuple[int, int]:
        """Session-time span of token k of a request that started at offset_ms and has audio_ms of audio."""
        end = min(self.token_end_ms(k), audio_ms)
        start = min(max(end - self.frame_ms, 0), audio_ms)
        return offset_ms + start, offset_ms + max(end, start)

    def max_request_samples(self, max_model_len: int, margin_tokens: int) -> int:
        frames = max_model_len - self.left_pad_frames - self.right_pad_frames - 1 - margin_tokens
        if frames < 16:
            raise ValueError(f"max_model_len {max_model_len} leaves only {frames} frames of audio per request")
        return frames * self.samples_per_frame


def geometry_from_tokenizer(tokenizer: object) -> StreamGeometry:
    """Read the stream geometry off vLLM's Mistral tokenizer (its mistral_common instruct tokenizer)."""
    instruct = tokenizer.instruct  # type: ignore[attr-defined]
    encoder = instruct.audio_encoder
    config = encoder.audio_config
    prompt = instruct.start() + encoder.encode_streaming_tokens()
    frame_ms = round(1000 / config.frame_rate)
    samples = config.raw_audio_length_per_tok
    if config.sampling_rate != SAMPLE_RATE_HZ:
        raise ValueError(f"model expects {config.sampling_rate} Hz audio; voxgate feeds {SAMPLE_RATE_HZ} Hz")
    return StreamGeometry(
        prompt_tokens=len(prompt),
        left_pad_frames=config.n_left_pad_tokens,
        right_pad_frames=config.n_right_pad_tokens(),
        delay_ms=int(config.transcription_delay_ms),
        frame_ms=frame_ms,
        samples_per_frame=samples,
        blank_token_id=int(encoder.streaming_pad),
    )
