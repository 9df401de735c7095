from sanitizerd.cli.main import main

raise SystemExit(main())
