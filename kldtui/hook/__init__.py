"""The server-side capture hook: vLLM plugin and source patch (both write through formats.chunks)."""
