"""lattice-pluggen: ZOID-style plug-ins from annotated C headers (docs/plugins.md)."""
