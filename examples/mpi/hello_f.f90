! hello_f - Fortran hello with `use mpi`: each rank prints rank and size,
! one allreduce of rank+1 is checked against size*(size+1)/2.
program hello_f
  use mpi
  implicit none
  integer :: ierr, rank, nprocs, one, total

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
  write (*, '(a,i0,a,i0)') 'hello_f from rank ', rank, ' of ', nprocs
  one = rank + 1
  call MPI_Allreduce(one, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (total /= nprocs * (nprocs + 1) / 2) then
     write (0, '(a,i0,a,i0)') 'hello_f: allreduce gave ', total, ' on rank ', rank
     call MPI_Finalize(ierr)
     stop 1
  end if
  if (rank == 0) write (*, '(a,i0,a)') 'hello_f: allreduce ok (', total, ')'
  call MPI_Finalize(ierr)
end program hello_f
