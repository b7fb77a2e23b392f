from kldtui.cli.main import main

raise SystemExit(main())
