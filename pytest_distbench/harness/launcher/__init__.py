"""Launcher mode: torchrun, srun or mpirun started every rank; pytest runs in each."""
