"""One module per `lattice` command."""
