from eaglehead.cli import main

raise SystemExit(main())
