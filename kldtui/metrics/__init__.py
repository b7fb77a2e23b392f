"""Pure metric code: per-row kernels (:mod:`.kernels`) and statistics (:mod:`.stats`). No I/O."""
