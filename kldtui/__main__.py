from kldtui.cli import main

raise SystemExit(main())
