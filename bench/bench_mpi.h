/* bench_mpi.h — `mpirun -np N ds4cl-bench --mpi-bench -m MODEL`: decode
 * tokens/s of the model on rank 0 alone and split over the job's N ranks
 * (mpi/dmpi.h), in the same run on the same fixture, with the bytes the
 * split moves per token and its cost per hop (CSV on stdout). Needs an
 * MPI build (make MPI=1). */
#ifndef DS4CL_BENCH_MPI_H
#define DS4CL_BENCH_MPI_H

/* Parses its own flags from argv; returns the exit status. */
int bench_mpi_main(int argc, char **argv);

#endif
