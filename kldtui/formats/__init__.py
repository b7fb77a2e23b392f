"""On-disk formats: suite, safetensors, capture chunks, logits manifests, the report. No stage logic."""
