from lahar.cli.main import main

raise SystemExit(main())
