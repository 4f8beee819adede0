from lattice.cli import main

raise SystemExit(main())
