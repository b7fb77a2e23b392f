from kldtui.cli.main import run

run()
