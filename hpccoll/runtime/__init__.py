"""The runtime: what runs collectives on MPI, under the schedule executor and the shared objects.

* :mod:`.executor`: Plan and Binding -- one rank's schedule program bound to buffers;
* :mod:`.operation`: Operation -- a binding run on mpi4py (deadline, failure, abandonment);
* :mod:`.scheduled`, :mod:`.native`: the compiled executors (Numba code posting MPI calls);
* :mod:`.ops`: a bound step's local work (CopyOp, ReduceOp, RowsOp, MoveOp);
* :mod:`.progress`: CollectiveTimeout, deadlines and the one polling loop every wait uses;
* :mod:`.agreement`: ranks deciding together (every rank's data; "did every rank succeed");
* :mod:`.window`: node-shared memory (segments, alignment, the executor's NodeWindow);
* :mod:`.buffers`: user arrays (host or GPU memory), MPI datatypes and ops, GPU-aware MPI;
* :mod:`.device`: GPU memory through Numba's CUDA layer (the simulator too), device kernels;
* :mod:`.kernels`: the Numba kernels for reductions and packing.
"""
