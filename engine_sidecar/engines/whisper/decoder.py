"""One Whisper decode of one buffer of 16 kHz audio: its words, with times from Whisper's alignment heads.

Interims and finals decode the same way, so the final is the model's answer for exactly the samples it
was given. The encoder runs on the audio plus PAD_S of padding, not on Whisper's full 30 s window, and the
output is capped at TOKENS_PER_S per second of audio: about half the CPU of a full-window decode for clips
of a few seconds, at the same WER on tests/fixtures (docs/benchmarks.md). The padding matters: with 1-3 s
of it, short clips loop ("5 5 5 5 ..."). A decode that loops anyway (its text compresses more than
LOOP_COMPRESSION, Whisper's own test) is run again on the full window, then with a repetition penalty.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine_api.audio import BYTES_PER_MS
from engine_sidecar.engines.engine import EngineStartError
from engine_sidecar.engines.whisper import hints
from engine_sidecar.engines.words import Word, word_key

SAMPLE_RATE = 16000
FRAMES_PER_S = 100  # Whisper's log-mel frames
WINDOW_FRAMES = 30 * FRAMES_PER_S  # the encoder's longest input
PAD_S = 10
# A decode that Whisper itself says is not speech is dropped (faster-whisper's rule)...
NO_SPEECH_PROB = 0.6
NO_SPEECH_LOGPROB = -1.0
# ... and so is one it is far from sure of, whatever its no-speech token says: music and tones decode to a
# word or two ("you", "So") at -2.3 to -5.3 per token; whole clips of real speech, 16 kHz and μ-law, at -1.0
# and above (docs/operating.md, "What counts as speech").
GUESS_LOGPROB = -2.0
# Tokens per second of audio a decode may emit (fast speech is ~4), so a repetition loop ends early.
TOKENS_PER_S = 8
LOOP_COMPRESSION = 2.4
# The retries of a decode that loops: (encoder window padded to the full 30 s, repetition penalty).
RETRIES = ((True, 1.0), (True, 1.2))
CONTEXT_TOKENS = 448
MAX_PROMPT_TOKENS = CONTEXT_TOKENS // 2 - 1
# Phrase hints ("hotwords", as faster-whisper calls them) go first in the prompt, before the text so far, and
# take at most this share of it: the text before the audio keeps the rest.
MAX_HOTWORD_TOKENS = MAX_PROMPT_TOKENS // 2
# Utterances up to this long have their hint candidates judged by the model (one encoder window).
MAX_JUDGED_MS = 30_000
# Log-probabilities of texts on one utterance's audio, given a prompt and hotwords (WhisperDecoder._forced).
ForcedScores = Callable[[list[str], str, str], list[float]]
# When the decoder stops early, the alignment gives its last word all the audio after it: no word is longer.
MAX_WORD_MS = 1500
CONTINUE_AFTER_MS = 2000  # audio left after a decode's last word that is decoded again
MIN_PART_MS = 1000  # each further decode must cover this much more, or the transcription ends
# A stretch of this many words or more said twice in a row is Whisper looping, not a speaker repeating
# himself ("no, no" is two words; a loop repeats a whole sentence it invented).
MIN_LOOP_WORDS = 6
# Punctuation Whisper's word splitter leaves on its own: joined to the word before it.
TRAILING_PUNCTUATION = frozenset(".,!?:;%)]}\"'\u3002\uff0c\uff01\uff1f\u3001")


@dataclass(frozen=True)
class Hypothesis:
    words: tuple[Word, ...]


def pcm16_to_float(pcm16: bytes) -> np.ndarray:
    return np.frombuffer(pcm16, np.int16).astype(np.float32) / 32768.0


def loops(text: str) -> bool:
    data = text.encode()
    return len(data) > 12 and len(data) / len(zlib.compress(data)) > LOOP_COMPRESSION


def not_speech(no_speech_prob: float, mean_logprob: float) -> bool:
    """Whisper's own evidence that a decode heard no speech: its no-speech token and its text's mean
    log-probability per token."""
    return (no_speech_prob > NO_SPEECH_PROB and mean_logprob < NO_SPEECH_LOGPROB) or mean_logprob < GUESS_LOGPROB


def without_loops(part: list[Word], before: str) -> list[Word]:
    """A decode's words, cut where Whisper loops on its own text: a part that only says again the last words
    before it (the prompt it was given) is dropped, and a stretch of MIN_LOOP_WORDS or more said twice in a
    row is kept once. Music decoded with its invented text as the prompt does both (issue 45)."""
    keys = [word_key(w.text) for w in part]
    said = [word_key(t) for t in before.split()]
    if len(keys) >= 3 and said[-len(keys) :] == keys:
        return []
    for start in range(len(keys)):
        for n in range(MIN_LOOP_WORDS, (len(keys) - start) // 2 + 1):
            if keys[start : start + n] == keys[start + n : start + 2 * n]:
                return part[: start + n]
    return part


def join_punctuation(words: list[Word]) -> list[Word]:
    """Punctuation on its own joins the word before it; with no word before it, it is no word (a decode of
    music may be a lone ".", which would be a final result of its own)."""
    joined: list[Word] = []
    for w in words:
        if all(c in TRAILING_PUNCTUATION for c in w.text):
            if joined:
                last = joined[-1]
                joined[-1] = Word(last.text + w.text, last.start_ms, max(last.end_ms, w.end_ms))
        else:
            joined.append(w)
    return joined


class WhisperDecoder:
    """Up to `workers` decodes at once, from as many threads, each on `threads` cores."""

    def __init__(self, directory: Path, threads: int, workers: int = 1) -> None:
        try:
            from faster_whisper import WhisperModel
            from threadpoolctl import threadpool_limits
        except ImportError as e:
            raise EngineStartError(
                f"the whisper engine needs {e.name}: install voxgate with its whisper extra "
                "(`make install`, or pip install 'voxgate[whisper]')"
            ) from e

        # The log-mel features are a numpy matmul: OpenBLAS would keep a thread per core spinning after each
        # one, twice the CPU of a decode for the same wall time (docs/benchmarks.md §4). The decodes are the
        # parallelism here. Process-wide: this sidecar runs only this engine.
        threadpool_limits(1, user_api="blas")

        self._model = WhisperModel(
            str(directory), device="cpu", compute_type="int8", cpu_threads=threads, num_workers=workers
        )
        self.multilingual = bool(self._model.model.is_multilingual)
        self.languages: tuple[str, ...] = tuple(self._model.supported_languages) if self.multilingual else ("en",)
        self._tokenizers: dict[str, object] = {}

    def _tokenizer(self, language: str) -> object:
        from faster_whisper.tokenizer import Tokenizer

        if language not in self._tokenizers:
            self._tokenizers[language] = Tokenizer(
                self._model.hf_tokenizer, self.multilingual, task="transcribe", language=language
            )
        return self._tokenizers[language]

    def decode(
        self,
        pcm16: bytes,
        offset_ms: int,
        prompt: str = "",
        language: str = "en",
        hotwords: str = "",
        beam_size: int = 1,
    ) -> Hypothesis:
        """The words of pcm16 (at most 30 s), their times offset by offset_ms; prompt: the text before it;
        hotwords: phrases to favour, put before that text in the prompt."""
        samples = pcm16_to_float(pcm16)
        if samples.size == 0:
            return Hypothesis(())
        features = self._model.feature_extractor(samples)
        frames = min(features.shape[1], WINDOW_FRAMES)
        tokenizer = self._tokenizer(language if self.multilingual else "en")
        start = self._start(tokenizer, prompt, hotwords)
        max_length = min(CONTEXT_TOKENS, len(start) + int(TOKENS_PER_S * samples.size / SAMPLE_RATE) + 16)
        eot = tokenizer.eot  # type: ignore[attr-defined]
        for full_window, penalty in ((False, 1.0), *RETRIES):
            encoded = self._encode(features, frames, full_window)
            result = self._model.model.generate(
                encoded,
                [start],
                beam_size=beam_size,
                max_length=max_length,
                repetition_penalty=penalty,
                return_scores=True,
                return_no_speech_prob=True,
                suppress_blank=True,
                suppress_tokens=[-1],
            )[0]
            text_tokens = [t for t in result.sequences_ids[0] if t < eot]
            if not loops(tokenizer.decode(text_tokens)):  # type: ignore[attr-defined]
                break
        if not text_tokens or not_speech(result.no_speech_prob, result.scores[0]):
            return Hypothesis(())
        aligned = self._model.find_alignment(tokenizer, [text_tokens], encoded, frames)[0]
        words = []
        for w in aligned:
            text = w["word"].strip()
            if text:
                start_ms = offset_ms + int(w["start"] * 1000)
                end_ms = min(offset_ms + int(w["end"] * 1000), start_ms + MAX_WORD_MS)
                words.append(Word(text, start_ms, max(start_ms, end_ms)))
        return Hypothesis(tuple(join_punctuation(words)))

    def _start(self, tokenizer: object, prompt: str, hotwords: str) -> list[int]:
        """The decoder's start: the hotwords, then as much of the text before as fits, then Whisper's task."""
        hints = tokenizer.encode(" " + hotwords.strip())[:MAX_HOTWORD_TOKENS] if hotwords.strip() else []  # type: ignore[attr-defined]
        previous = tokenizer.encode(" " + prompt.strip()) if prompt.strip() else []  # type: ignore[attr-defined]
        context = [*hints, *previous[-(MAX_PROMPT_TOKENS - len(hints)) :]] if previous else hints
        head = [tokenizer.sot_prev, *context] if context else []  # type: ignore[attr-defined]
        return [*head, *tokenizer.sot_sequence, tokenizer.no_timestamps]  # type: ignore[attr-defined]

    def _encode(self, features: np.ndarray, frames: int, full_window: bool = False) -> object:
        """The encoder's output for the features' first frames, padded by PAD_S (or to the full window)."""
        import ctranslate2

        window = WINDOW_FRAMES if full_window else min(WINDOW_FRAMES, frames + PAD_S * FRAMES_PER_S)
        batch = np.zeros((1, features.shape[0], window), np.float32)
        batch[0, :, :frames] = features[:, :frames]
        return self._model.model.encode(ctranslate2.StorageView.from_array(batch), to_cpu=False)

    def log_probs(self, pcm16: bytes, texts: list[str], prompt: str, language: str, hotwords: str) -> list[float]:
        """Each text's log-probability as the transcript of pcm16 (at most 30 s), forced through the decoder
        after the same start as decode()'s (its end of text aside: ctranslate2's alignment gives it none)."""
        return self._forced(pcm16, language)(texts, prompt, hotwords)

    def _forced(self, pcm16: bytes, language: str) -> ForcedScores:
        """log_probs on pcm16 for any texts and start; the encoder runs once. The texts go one at a time
        (measured: a batch of 16 costs twice 16 single ones)."""
        features = self._model.feature_extractor(pcm16_to_float(pcm16))
        frames = min(features.shape[1], WINDOW_FRAMES)
        tokenizer = self._tokenizer(language if self.multilingual else "en")
        encoded = self._encode(features, frames)

        def score(texts: list[str], prompt: str, hotwords: str) -> list[float]:
            start, scores = self._start(tokenizer, prompt, hotwords), []
            for text in texts:
                tokens = tokenizer.encode(" " + text.strip())  # type: ignore[attr-defined]
                (aligned,) = self._model.model.align(encoded, start, [tokens], frames)
                scores.append(float(np.log(np.maximum(aligned.text_token_probs, 1e-30)).sum()))
            return scores

        return score

    def transcribe(
        self,
        pcm16: bytes,
        offset_ms: int,
        prompt: str = "",
        language: str = "en",
        phrases: tuple[str, ...] = (),
        judge: bool = True,
    ) -> Hypothesis:
        """All the words of pcm16 (at most 30 s), with phrase hints where they gain one (whisper/hints.py).
        `judge` False skips the model's judgement of hinted words (bench/hint_cost.py measures what it costs)."""
        plain = self._transcribe(pcm16, offset_ms, prompt, language, "")
        if not phrases:
            return plain
        hotwords = hints.prompt(phrases)
        hinted = self._transcribe(pcm16, offset_ms, prompt, language, hotwords, hints.HINTED_BEAM)
        judging = judge and len(pcm16) <= MAX_JUDGED_MS * BYTES_PER_MS
        forced = functools.cache(lambda: self._forced(pcm16, language))  # the encoder runs once, if at all
        gained = hints.gained(plain.words, hinted.words, phrases)
        chosen = hints.choose(plain.words, hinted.words, gained)
        if chosen is not plain.words and hints.may_have_lost_words(plain.words, chosen, gained) and judging:
            # The model judges them: far less likely than the plain words, they changed more than a name. Both
            # texts are scored with only the gained phrases as the hint.
            texts = [" ".join(w.text for w in ws) for ws in (plain.words, chosen)]
            base, score = forced()(texts, prompt, hints.prompt(gained))
            chosen = chosen if score > base - hints.HINTED_MARGIN else plain.words
        words = hints.spelled(chosen, phrases)
        found = hints.candidates(words, phrases)
        if not found or not judging:
            return Hypothesis(tuple(words))
        return Hypothesis(tuple(hints.judged(words, found, self._gains(words, found, prompt, forced()))))

    @staticmethod
    def _gains(words: list[Word], found: list[hints.Candidate], prompt: str, forced: ForcedScores) -> list[float]:
        """Each candidate's log-probability over the words', both with only its phrase as the hint: the question
        is whether that phrase is said there, and a long list in the prompt costs each forced pass its length."""
        by_phrase: dict[str, list[int]] = {}
        for k, c in enumerate(found):
            by_phrase.setdefault(c.phrase, []).append(k)
        gains = [0.0] * len(found)
        for phrase, ks in by_phrase.items():
            texts = [" ".join(w.text for w in ws) for ws in (words, *(found[k].applied_to(words) for k in ks))]
            base, *scores = forced(texts, prompt, phrase)
            for k, score in zip(ks, scores, strict=True):
                gains[k] = score - base
        return gains

    def _transcribe(
        self, pcm16: bytes, offset_ms: int, prompt: str, language: str, hotwords: str, beam_size: int = 1
    ) -> Hypothesis:
        """All the words of pcm16 (at most 30 s): decode, and while the words end CONTINUE_AFTER_MS or more
        before the audio does, decode the rest after them with the text so far as the prompt. Without
        timestamps Whisper may end its text early, after a change of topic or speaker (measured: a 25 s
        piece of a sonnet then spontaneous speech came back as the sonnet's last words alone)."""
        words: list[Word] = []
        audio_ms, start_ms = len(pcm16) // BYTES_PER_MS, 0
        while True:
            text = " ".join([prompt, *(w.text for w in words)]).strip()
            rest = pcm16[start_ms * BYTES_PER_MS :]
            decoded = self.decode(rest, offset_ms + start_ms, text, language, hotwords, beam_size).words
            part = without_loops(list(decoded), text)
            if not part:
                return Hypothesis(tuple(words))
            if len(part) < len(decoded):
                return Hypothesis(tuple(words + part))  # the rest of the audio is what it looped on
            words += part
            covered_ms = part[-1].end_ms - offset_ms
            if audio_ms - covered_ms < CONTINUE_AFTER_MS or covered_ms < start_ms + MIN_PART_MS:
                return Hypothesis(tuple(words))
            start_ms = covered_ms
