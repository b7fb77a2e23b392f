"""kldtui: measure how far a quantized LLM's output distribution has moved from a reference."""

__version__ = "0.1.0"
