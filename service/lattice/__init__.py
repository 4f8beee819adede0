"""Lattice service node: owns the machine's state, boots blocks, runs jobs."""
