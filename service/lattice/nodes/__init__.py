"""Making the nodes: booting and freeing a block (boot), where its nodes run
(placement: this host, ssh hosts, Slurm), the agent that starts them on each
host (agent), and the per-host seam for what a host offers or limits: cores,
/dev/shm and huge pages (host, cores, hugepages), processes and threads
(capacity), cgroups (container), the block network (blocknet, rtnl)."""
