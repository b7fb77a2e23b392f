"""The embedded server: a tiny deterministic CPU model behind an OpenAI-compatible HTTP API.

Run ``python -m kldtui.embedded --port P --served-model-name NAME --model-seed S
--vocab-size V --perturb EPS --capture-dir DIR`` (or set ``VLLM_KLD_CAPTURE_DIR``). It stands in
for vLLM in ``kldtui demo`` and the tests; see :mod:`kldtui.embedded.server`.
"""
