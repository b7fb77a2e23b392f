"""Widgets shared by the dashboard and the viewer screens, one module per concern.

Colours come from component classes styled in ``app.tcss`` with theme variables, never from
literals in the widgets.
"""

from __future__ import annotations

from kldtui.tui.widgets.board_charts import BoardCharts
from kldtui.tui.widgets.campaign_board import CampaignBoard
from kldtui.tui.widgets.diff_pane import DiffPane
from kldtui.tui.widgets.kl_chart import KLChart
from kldtui.tui.widgets.leaderboard import LeaderboardTable
from kldtui.tui.widgets.log_view import LogView
from kldtui.tui.widgets.progress import ProgressPanel
from kldtui.tui.widgets.result_pane import ResultPane
from kldtui.tui.widgets.stage_rail import StageBox, StageRail
from kldtui.tui.widgets.window_grid import WindowGrid

__all__ = ["BoardCharts", "CampaignBoard", "DiffPane", "KLChart", "LeaderboardTable", "LogView",
           "ProgressPanel", "ResultPane", "StageBox", "StageRail", "WindowGrid"]
