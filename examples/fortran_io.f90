! fortran_io: Fortran runtime I/O through the I/O node.  Each rank writes
! rank-R.dat with formatted records, reads it back, checks the values, and
! leaves the file for the caller to inspect.
program fortran_io
  implicit none
  character(len=32) :: rank_str, fname
  integer :: rank, i, v, ios
  real(8) :: x

  call get_environment_variable("LATTICE_RANK", rank_str)
  read (rank_str, *, iostat=ios) rank
  if (ios /= 0) rank = 0
  write (fname, '(a,i0,a)') 'rank-', rank, '.dat'

  open (unit=10, file=trim(fname), status='replace', action='write')
  do i = 1, 10
    write (10, '(i6,1x,f12.4)') i * (rank + 1), real(i, 8) / 4.0d0
  end do
  close (10)

  open (unit=11, file=trim(fname), status='old', action='read')
  do i = 1, 10
    read (11, *) v, x
    if (v /= i * (rank + 1) .or. abs(x - real(i, 8) / 4.0d0) > 1d-9) then
      write (0, *) 'rank', rank, ': bad record', i
      stop 2
    end if
  end do
  close (11)
  print '(a,i0,a)', 'rank ', rank, ': fortran ok'
end program fortran_io
