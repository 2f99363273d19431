"""Whisper on the CPU (faster-whisper / CTranslate2, int8): the embedded engine with real words.

model.py finds and checks the model, decoder.py decodes one buffer, decode_queue.py shares the decoder
between sessions (finals first, interims coalesced), engine.py streams utterances with LocalAgreement-2."""
