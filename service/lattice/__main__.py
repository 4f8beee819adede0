from lattice.client import entry

entry()
