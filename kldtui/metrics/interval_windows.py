"""How many windows a 95 % interval over windows needs before a view shows it as one: the one owner
of the count, standard library only (the viewer asks it at start-up, before NumPy loads).

Below :data:`MIN_INTERVAL_WINDOWS` the headline interval's measured coverage is under 93 %
(docs/STATISTICS.md, "One report's mean KL"; 0.915 at 4 windows for log-normal window means): every
view shows the estimate and says why there is no interval (kldtui.formats.report_names), and
reports mark their headline interval ``rests_on_too_few_windows`` (kldtui.metrics.inference).
"""

MIN_INTERVAL_WINDOWS = 8

__all__ = ["MIN_INTERVAL_WINDOWS"]
