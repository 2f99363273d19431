"""Voxtral realtime on vLLM: checkpoint builder, engine options, streaming helpers."""
