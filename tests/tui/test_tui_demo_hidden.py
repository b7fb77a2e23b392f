"""The dashboard of `kldtui demo --hidden` counts its units as contexts, in the words of a hidden-state
suite: the grid's title, the reference card's range, and no "window" anywhere on screen."""

from __future__ import annotations

from pathlib import Path

from kldtui.tui.app import create_app
from kldtui.workflow import demo
from tests.fixtures_tui import screen_lines, settle, sync


@sync
async def test_the_hidden_demos_dashboard_shows_contexts(tmp_path: Path) -> None:
    profile = demo.prepare_demo(tmp_path / "demo", hidden=True)
    contexts = len(demo.DEMO_DOMAINS) * demo.DEMO_CONTEXTS_PER_SOURCE
    app = create_app(profile=profile, config_dir=tmp_path / "cfg", remember_theme=False,
                     title="kldtui demo (hidden states)")
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(app, pilot)
        model = app.main.model
        assert model.unit == "context"
        pending = [(i, "pending") for i in range(contexts)]
        assert [(w.index, w.state) for w in model.windows.values()] == pending
        text = "\n".join(screen_lines(app))
        assert "Contexts" in text and f"contexts 0-{contexts - 1}" in text, text
        assert "window" not in text.lower(), text
