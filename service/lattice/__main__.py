from lattice.cli.client import entry

entry()
