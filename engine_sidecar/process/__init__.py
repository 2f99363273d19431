"""The process layer: serving the engine API, hosting an engine core and its front ends."""
