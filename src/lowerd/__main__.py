from lowerd.cli.main import main

raise SystemExit(main())
