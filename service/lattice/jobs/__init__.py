"""Running a job: what a run asks for (request), its one entry that finds or
boots a block and runs it (launch), the queue of submitted jobs and their
detached runners (queue, runner); on a booted block: the launch and its life (job), the ranks'
environment and MPI settings (jobenv, mpienv), rank placement on nodes
(mapping, distribution), the ranks' output and its files (output, outfiles), standard input (jobinput),
PMI's tree of `lattice run` processes (pmitree), time limits (timelimit) and
the file trees a Linux-mode job sees (trees)."""
