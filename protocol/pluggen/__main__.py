from pluggen.cli import main

raise SystemExit(main())
