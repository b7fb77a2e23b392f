"""One module per pipeline stage: reference (download/verify), serve, capture, finalize, compare."""
