from lowerd.main import main

raise SystemExit(main())
