"""Lattice service node: owns the machine's state, boots blocks, runs jobs."""

__version__ = "0.1.0"       # pyproject.toml's (a unit test keeps them equal)
