"""The largest figures a comparison of float32 logits can give, for the readers that refuse impossible
values on load (score records, reports). Standard library only: the report model imports it."""

from __future__ import annotations

# The largest finite KL (either direction) float32 logits give (kldtui.metrics.kernels keeps a finite
# logit's log-ratio however low, so a finite row is never +inf): a log-ratio a - b is at most twice the
# largest float32, 3.4e38 (a <= 0, b >= -2 * 3.4e38), and the normalisers add at most log(vocabulary),
# which does not move a float64 of that size; 7e38 leaves a margin for float64 rounding. A mean, a
# quantile or a bootstrap estimate of such rows is no larger. Above it a KL is +inf (a masked token) or
# damage, and the statistics over it would overflow.
KL_ROW_MAX = 7e38
