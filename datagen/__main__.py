from eaglehead.datagen.pipeline import main

raise SystemExit(main())
