"""The ``hpccoll`` command line (:mod:`.cli`, one module per subcommand) and the tools behind
it: the benchmark, the algorithm catalogue and the SLURM jobs."""
