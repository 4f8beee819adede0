from lattice.cli import entry

entry()
