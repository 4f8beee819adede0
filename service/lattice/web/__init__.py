"""`lattice serve`: the service node's long-running process, the Blue Gene
Navigator's role.  It owns the web console (static/: plain HTML, JS and CSS,
no build step), the read-only JSON API under /api/ (built with
lattice.views), the live-update stream /api/events (server-sent events), the
Prometheus endpoint /metrics (metrics), and who may read any of it (auth).
It changes no state on a request: its loop only imports the I/O nodes' RAS
spool and starts queued jobs whose turn has come (watch)."""

# The database connection the package's functions take, whichever the backend
from lattice.state.db import Connection as Connection
