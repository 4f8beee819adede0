! fortran_file: Fortran runtime file I/O, unchanged, under any kernel.
!
! Each rank R (from LATTICE_RANK) writes in the working directory
!   table-R.txt  formatted, sequential: N lines "i  i*(R+1)  sqrt(i)"
!   recs-R.bin   unformatted, direct access: N records of (i, dble(i)/8),
!                written in reverse order
! then appends a trailer line to table-R.txt, reads both files back,
! checks every value, uses INQUIRE for the record file's size, writes and
! deletes a scratch file (CLOSE STATUS='DELETE'), and prints
!   rank R: fortran file i/o ok records=N bytes=B
! The files stay for the caller to check.
program fortran_file
  implicit none
  character(len=32) :: arg, rank_str, table, recs
  integer :: rank, n, i, v, w, ios, iv
  integer(8) :: bytes
  real(8) :: x, y
  logical :: there

  call get_environment_variable("LATTICE_RANK", rank_str)
  read (rank_str, *, iostat=ios) rank
  if (ios /= 0) rank = 0
  n = 100
  if (command_argument_count() >= 1) then
    call get_command_argument(1, arg)
    read (arg, *) n
  end if
  write (table, '(a,i0,a)') 'table-', rank, '.txt'
  write (recs, '(a,i0,a)') 'recs-', rank, '.bin'

  open (unit=10, file=trim(table), status='replace', action='write', form='formatted')
  do i = 1, n
    write (10, '(i8,1x,i10,1x,f14.8)') i, i * (rank + 1), sqrt(real(i, 8))
  end do
  close (10)
  open (unit=10, file=trim(table), status='old', position='append', action='write')
  write (10, '(a)') 'end'
  close (10)

  open (unit=11, file=trim(recs), status='replace', access='direct', form='unformatted', recl=16)
  do i = n, 1, -1
    write (11, rec=i) int(i, 8), real(i, 8) / 8.0d0
  end do
  close (11)

  open (unit=10, file=trim(table), status='old', action='read')
  do i = 1, n
    read (10, *) v, w, x
    if (v /= i .or. w /= i * (rank + 1) .or. abs(x - sqrt(real(i, 8))) > 1d-6) call fail('table', i)
  end do
  read (10, '(a)') arg
  if (trim(arg) /= 'end') call fail('trailer', 0)
  close (10)

  open (unit=11, file=trim(recs), status='old', access='direct', form='unformatted', recl=16, action='read')
  do i = 1, n
    read (11, rec=i) bytes, y
    iv = int(bytes)
    if (iv /= i .or. y /= real(i, 8) / 8.0d0) call fail('record', i)
  end do
  close (11)
  inquire (file=trim(recs), exist=there, size=bytes)
  if (.not. there) call fail('inquire', 0)

  open (unit=12, file='scratch-'//trim(adjustl(rank_str))//'.tmp', status='replace', action='readwrite')
  write (12, *) 'temporary'
  close (12, status='delete')

  print '(a,i0,a,i0,a,i0)', 'rank ', rank, ': fortran file i/o ok records=', n, ' bytes=', bytes
contains
  subroutine fail(what, i)
    character(len=*), intent(in) :: what
    integer, intent(in) :: i
    write (0, '(a,a,a,i0)') 'fortran_file: bad ', what, ' at ', i
    stop 2
  end subroutine fail
end program fortran_file
