from lowerd.cli.command import main

raise SystemExit(main())
