"""``hpccoll jobs``: SLURM batch jobs from the templates in ``templates/`` (the repository's
top-level ``jobs/`` links there), and their results.

* ``render TEMPLATE --nodes N --ntasks-per-node M [...]`` fills ``templates/TEMPLATE.sbatch``
  (``bench``, ``scaling``, ``verify``, ``tune``) after checking every value: impossible
  requests (no nodes, a malformed time, an unknown template, launcher, collective, dtype or
  algorithm, an algorithm that cannot serve the job's rank count) are refused with a message
  saying why, before anything reaches the queue (:mod:`.rendering`).
* ``collect RUNDIR... [--out PREFIX] [--plot]`` merges the ``bench-*.json`` of several run
  directories into one scaling table (PREFIX.json, PREFIX.md, PREFIX.png with ``--plot``):
  per collective, algorithm and size, the time and bus bandwidth against the rank (and node)
  count.  Every run's state is reported; any run that did not complete, or whose data check
  found wrong elements, makes it exit 1 (:mod:`.scaling`).
* ``status RUNDIR...`` prints each run's state: the job's own record (``status.json``,
  written by the job script however it ends) and, where the SLURM commands answer, SLURM's
  (``sacct``, ``sacct -c`` for the job-completion log, ``scontrol show job``); exit 1 unless
  every run completed (:mod:`.slurm`).

:mod:`.command` registers the subcommands on the ``hpccoll`` parser.
"""


class JobError(ValueError):
    """A request that cannot be rendered, or run directories that cannot be read."""
