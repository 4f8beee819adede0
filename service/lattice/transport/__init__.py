"""The wire to the node daemons: message layouts generated from
protocol/lattice/wire.h (wire_h), their packing, sealing and MACs (wire), and
the service node's client of an I/O node's control channel (ciodclient)."""
