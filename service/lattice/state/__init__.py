"""The machine's visible state, as Blue Gene kept it in its database: the
database itself (db; postgres for a PostgreSQL one), the machine's description and directory (machine), blocks
and their nodes (blocks), RAS events (ras), personalities (personality), which
block a job holds (busy), and the sweep that returns to Free what dead
processes left behind (reclaim).  Everything else reads and writes the state
through these modules."""
