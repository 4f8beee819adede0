! ring_f - Fortran ring with `use mpi`: rank 0 sends a token around all
! ranks ten times, every rank adds rank+1, rank 0 checks the sum.
program ring_f
  use mpi
  implicit none
  integer :: ierr, rank, nprocs, nxt, prv, r, token, first, want, bad, req
  integer :: status(MPI_STATUS_SIZE)

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nprocs, ierr)
  nxt = mod(rank + 1, nprocs)
  prv = mod(rank + nprocs - 1, nprocs)
  want = nprocs * (nprocs + 1) / 2
  bad = 0
  do r = 1, 10
     if (rank == 0) then
        first = 1   ! its own buffer: one rank sends to itself
        call MPI_Isend(first, 1, MPI_INTEGER, nxt, r, MPI_COMM_WORLD, req, ierr)
        call MPI_Recv(token, 1, MPI_INTEGER, prv, r, MPI_COMM_WORLD, status, ierr)
        call MPI_Wait(req, status, ierr)
        if (token /= want) then
           write (0, '(a,i0,a,i0,a,i0)') 'ring_f: round ', r, ': token ', token, ' expected ', want
           bad = 1
        end if
     else
        call MPI_Recv(token, 1, MPI_INTEGER, prv, r, MPI_COMM_WORLD, status, ierr)
        token = token + rank + 1
        call MPI_Send(token, 1, MPI_INTEGER, nxt, r, MPI_COMM_WORLD, ierr)
     end if
  end do
  call MPI_Bcast(bad, 1, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
  if (rank == 0 .and. bad == 0) write (*, '(a,i0,a,i0,a)') 'ring_f: ', nprocs, ' ranks, token ', want, ' ok'
  call MPI_Finalize(ierr)
  if (bad /= 0) stop 1
end program ring_f
