"""The command line: the parser and its one error boundary (main), one module
a command (cmd/), and the warm server that runs commands without Python's
start-up (warm) with its small client (client).  This file stays empty of
code: every `lattice` command imports the package before the client, and the
client must start in about a millisecond."""
