/*
 * lattice/fwd_posix.h - the POSIX function shipping (files and sockets) as
 * one annotated header: the only description of LAT_SYS_OPENAT ..
 * LAT_SYS_RECV_RDV.  `lattice-pluggen --wire` (docs/plugins.md "Wire mode")
 * turns it into
 *   - the LAT_SYS_* block of wire.h (committed; a test and the generated
 *     decoder's _Static_asserts check it is current: `make wire-h`),
 *   - ciod's decoder and dispatch table (build/gen/fwd_posix_ciod.c), which
 *     validates every request per the annotations below and calls the
 *     hand-written implementation srv_NAME() of ionode/ciod/ship.c, sock.c,
 *   - the compute-side encoding stubs fwd_NAME() (build/gen/fwd_posix_stubs.c),
 *     #included by the shipping client core (compute/shipc/fwd.c), which
 *     supplies the transport and is linked into cnk and libcnclient.
 *
 * Wire mode, in short: the comment before a prototype gives its message
 * number (msg=N), and :mbox when the call may travel in the mailbox
 * (docs/protocol.md section 6.4; wire.h's LAT_MBOX_MAP, lat_mbox_ok()): a
 * call that never waits, so not the socket calls.  Integer in:obj arguments
 * travel in struct lat_sysreq's a0..a3 in order (a=N puts one in slot N;
 * a=none means it is not sent: it is the length of the array it sizes,
 * which then takes the rest of the payload); fd marks a remote descriptor
 * (EBADF unless it is open); min=, max= refuse a value outside (EINVAL),
 * clamp= lowers it.  Strings and in arrays follow the lat_sysreq, packed,
 * in argument order; out pointers and out arrays are the reply data, in
 * order (an out array carries ret elements, at most its length; an inout
 * array comes back whole).  zerocopy marks the data array of a call that
 * may go in bulk: rendezvous or a pipelined series, said by the header
 * flags LAT_HF_* (docs/protocol.md sections 2.1 and 6.2; wire.h's
 * LAT_BULK_MAP).  vec: the stub also comes as fwd_NAME_v, taking that array
 * as the program's iovecs.  The stubs return ret or the side's error (cnk:
 * -errno; libcnclient: -1 and errno).
 *
 * The prototypes are the compute-side stubs; hidden, so libcnclient.so
 * does not export them.
 */
#ifndef LATTICE_FWD_POSIX_H
#define LATTICE_FWD_POSIX_H

#include <stdint.h>

#include <lattice/wire.h>

struct lat_statx {                  /* a Linux struct statx, as the kernel fills it */
    uint8_t raw[256];
};

#pragma GCC visibility push(hidden)

/* ---- files ---- */

/* msg=0x0300:mbox */
int64_t fwd_openat(int dirfd /* in:obj */, int flags /* in:obj */, int mode /* in:obj */,
                   const char *path /* in:str */);
/* msg=0x0301:mbox */
int64_t fwd_close(int fd /* in:obj:fd */);
/* msg=0x0302:mbox */
int64_t fwd_read(int fd /* in:obj:fd */, void *buf /* out:arr:size=+1:zerocopy:vec */,
                 uint64_t count /* in:obj:max=LAT_MAX_IO */);
/* msg=0x0303:mbox */
int64_t fwd_write(int fd /* in:obj:fd */, const void *buf /* in:arr:size=+1:zerocopy:vec */,
                  uint64_t count /* in:obj:a=none:max=LAT_MAX_IO */);
/* msg=0x0304:mbox */
int64_t fwd_pread(int fd /* in:obj:fd */, void *buf /* out:arr:size=+1:zerocopy:vec */,
                  uint64_t count /* in:obj:max=LAT_MAX_IO */, int64_t offset /* in:obj */);
/* msg=0x0305:mbox */
int64_t fwd_pwrite(int fd /* in:obj:fd */, const void *buf /* in:arr:size=+1:zerocopy:vec */,
                   uint64_t count /* in:obj:a=none:max=LAT_MAX_IO */, int64_t offset /* in:obj:a=2 */);
/* msg=0x0306:mbox */
int64_t fwd_lseek(int fd /* in:obj:fd */, int64_t offset /* in:obj */, int whence /* in:obj */);
/* msg=0x0307:mbox  fstat is path "" with AT_EMPTY_PATH */
int64_t fwd_fstatat(int dirfd /* in:obj */, int flags /* in:obj */, const char *path /* in:str */,
                    struct lat_stat *st /* out:ptr */);
/* msg=0x0308:mbox */
int64_t fwd_statx(int dirfd /* in:obj */, int flags /* in:obj */, int mask /* in:obj */,
                  const char *path /* in:str */, struct lat_statx *stx /* out:ptr */);
/* msg=0x0309:mbox */
int64_t fwd_faccessat(int dirfd /* in:obj */, int mode /* in:obj */, int flags /* in:obj */,
                      const char *path /* in:str */);
/* msg=0x030A:mbox  flags: AT_REMOVEDIR */
int64_t fwd_unlinkat(int dirfd /* in:obj */, int flags /* in:obj */, const char *path /* in:str */);
/* msg=0x030B:mbox */
int64_t fwd_renameat(int olddirfd /* in:obj */, int newdirfd /* in:obj */, int flags /* in:obj */,
                     const char *oldpath /* in:str */, const char *newpath /* in:str */);
/* msg=0x030C:mbox */
int64_t fwd_mkdirat(int dirfd /* in:obj */, int mode /* in:obj */, const char *path /* in:str */);
/* msg=0x030D:mbox  linux_dirent64 records */
int64_t fwd_getdents64(int fd /* in:obj:fd */, void *buf /* out:arr:size=+1 */,
                       uint64_t count /* in:obj:max=LAT_MAX_IO */);
/* msg=0x030E:mbox  no NUL; a larger buffer than LAT_MAX_IO is clamped, not refused */
int64_t fwd_readlinkat(int dirfd /* in:obj */, const char *path /* in:str */,
                       char *buf /* out:arr:size=+1 */, int64_t bufsiz /* in:obj:min=1:clamp=LAT_MAX_IO */);
/* msg=0x030F:mbox */
int64_t fwd_truncate(const char *path /* in:str */, int64_t length /* in:obj:a=1 */);
/* msg=0x0310:mbox */
int64_t fwd_ftruncate(int fd /* in:obj:fd */, int64_t length /* in:obj */);
/* msg=0x0311:mbox */
int64_t fwd_fsync(int fd /* in:obj:fd */);
/* msg=0x0312:mbox */
int64_t fwd_fdatasync(int fd /* in:obj:fd */);
/* msg=0x0313:mbox  ret: the new remote descriptor */
int64_t fwd_dup(int fd /* in:obj:fd */);
/* msg=0x0314:mbox  cmd F_GETFL or F_SETFL */
int64_t fwd_fcntl(int fd /* in:obj:fd */, int cmd /* in:obj */, int arg /* in:obj */);
/* msg=0x0315:mbox */
int64_t fwd_chdir(const char *path /* in:str */);
/* msg=0x0316:mbox */
int64_t fwd_fchdir(int fd /* in:obj:fd */);
/* msg=0x0317:mbox  the path with its NUL; ret its length (ERANGE if size is short) */
int64_t fwd_getcwd(char *buf /* out:arr:size=+1 */, int64_t size /* in:obj:min=0:clamp=LAT_MAX_IO */);
/* msg=0x0318:mbox  ret: the old mask */
int64_t fwd_umask(int64_t mask /* in:obj */);
/* msg=0x0319:mbox */
int64_t fwd_fchmodat(int dirfd /* in:obj */, int mode /* in:obj */, int flags /* in:obj */,
                     const char *path /* in:str */);
/* msg=0x031A:mbox */
int64_t fwd_fchmod(int fd /* in:obj:fd */, int mode /* in:obj */);
/* msg=0x031B:mbox  times always travel; has_times 0 means "now" (a NULL times) */
int64_t fwd_utimensat(int dirfd /* in:obj */, int flags /* in:obj */, int has_times /* in:obj */,
                      const struct lat_timespec *times /* in:arr:len=2 */, const char *path /* in:str */);
/* msg=0x031C:mbox */
int64_t fwd_statfs(const char *path /* in:str */, struct lat_statfs *sfs /* out:ptr */);
/* msg=0x031D:mbox */
int64_t fwd_fstatfs(int fd /* in:obj:fd */, struct lat_statfs *sfs /* out:ptr */);

/* ---- sockets (docs/protocol.md section 6.1): remote descriptors too.  A
 * call that may block carries a wait in ms (-1: until done); when it runs
 * out the reply is err LAT_ERR_WAIT ("not done, ask again"). ---- */

/* msg=0x031E */
int64_t fwd_socket(int domain /* in:obj */, int type /* in:obj */, int protocol /* in:obj */);
/* msg=0x031F  resume: 1 = the call resumes a waited connect */
int64_t fwd_connect(int fd /* in:obj:fd */, int wait /* in:obj:min=-1:max=INT32_MAX */,
                    int resume /* in:obj */, const void *addr /* in:arr:size=+1 */,
                    uint32_t addrlen /* in:obj:a=none:min=2:max=LAT_MAX_SOCKADDR */);
/* msg=0x0320 */
int64_t fwd_bind(int fd /* in:obj:fd */, const void *addr /* in:arr:size=+1 */,
                 uint32_t addrlen /* in:obj:a=none:min=2:max=LAT_MAX_SOCKADDR */);
/* msg=0x0321  ret: bytes sent */
int64_t fwd_sendmsg(int fd /* in:obj:fd */, int flags /* in:obj */,
                    const void *name /* in:arr:size=+1 */, uint32_t namelen /* in:obj:max=LAT_MAX_SOCKADDR */,
                    const void *buf /* in:arr:size=+1:vec */, uint64_t len /* in:obj:a=none:max=LAT_MAX_IO */,
                    int wait /* in:obj:min=-1:max=INT32_MAX */);
/* msg=0x0322  ret: bytes received (more than count with MSG_TRUNC) */
int64_t fwd_recvmsg(int fd /* in:obj:fd */, int flags /* in:obj */,
                    struct lat_sockname *from /* out:ptr */, void *buf /* out:arr:size=+1:vec */,
                    uint64_t count /* in:obj:max=LAT_MAX_IO */, int wait /* in:obj:min=-1:max=INT32_MAX */);
/* msg=0x0323 */
int64_t fwd_shutdown(int fd /* in:obj:fd */, int how /* in:obj */);
/* msg=0x0324 */
int64_t fwd_setsockopt(int fd /* in:obj:fd */, int level /* in:obj */, int name /* in:obj */,
                       const void *val /* in:arr:size=+1 */, uint32_t len /* in:obj:a=none:max=LAT_MAX_SOCKOPT */);
/* msg=0x0325  ret: the option's length */
int64_t fwd_getsockopt(int fd /* in:obj:fd */, int level /* in:obj */, int name /* in:obj */,
                       void *val /* out:arr:size=+1 */, uint32_t len /* in:obj:max=LAT_MAX_SOCKOPT */);
/* msg=0x0326  ret: the address's length */
int64_t fwd_getsockname(int fd /* in:obj:fd */, void *addr /* out:arr:len=LAT_MAX_SOCKADDR */);
/* msg=0x0327  ret: the address's length */
int64_t fwd_getpeername(int fd /* in:obj:fd */, void *addr /* out:arr:len=LAT_MAX_SOCKADDR */);
/* msg=0x0328  ret: descriptors ready; fds comes back with revents */
int64_t fwd_poll(struct lat_pollfd *fds /* inout:arr:size=+1 */, uint32_t nfds /* in:obj:max=LAT_MAX_FDS */,
                 int wait /* in:obj:min=-1:max=INT32_MAX */);
/* msg=0x0329  SENDMSG whose bytes stay in the process's memory, named by
 * segs (a socket rendezvous, docs/protocol.md section 6.1): ciod sends them
 * from there.  ret: bytes sent */
int64_t fwd_send_rdv(int fd /* in:obj:fd */, int flags /* in:obj */,
                     const void *name /* in:arr:size=+1 */, uint32_t namelen /* in:obj:max=LAT_MAX_SOCKADDR */,
                     const struct lat_rdv_seg *segs /* in:arr:size=+1 */,
                     uint32_t nseg /* in:obj:a=none:min=1:max=LAT_RDV_MAXSEG */,
                     int wait /* in:obj:min=-1:max=INT32_MAX */);
/* msg=0x032A  RECVMSG into the process's memory named by segs (a socket
 * rendezvous): ciod receives straight there.  ret: bytes received (more
 * than the segments hold with MSG_TRUNC) */
int64_t fwd_recv_rdv(int fd /* in:obj:fd */, int flags /* in:obj */, struct lat_sockname *from /* out:ptr */,
                     const struct lat_rdv_seg *segs /* in:arr:size=+1 */,
                     uint32_t nseg /* in:obj:a=none:min=1:max=LAT_RDV_MAXSEG */,
                     int wait /* in:obj:min=-1:max=INT32_MAX */);

/* ---- locks, held on the I/O node for the process (docs/protocol.md
 * section 6.6).  A blocking request waits at most wait ms (-1: until done);
 * when that runs out the reply is err LAT_ERR_WAIT, as for the socket
 * calls: the process asks again. ---- */

/* msg=0x032B  cmd: F_GETLK, F_SETLK, F_SETLKW or their F_OFD_ forms; fl comes back as the call left it */
int64_t fwd_lock(int fd /* in:obj:fd */, int cmd /* in:obj */, int wait /* in:obj:min=-1:max=INT32_MAX */,
                 struct lat_flock *fl /* inout:arr:len=1 */);
/* msg=0x032C  op: LOCK_SH, LOCK_EX or LOCK_UN, with LOCK_NB */
int64_t fwd_flock(int fd /* in:obj:fd */, int op /* in:obj */, int wait /* in:obj:min=-1:max=INT32_MAX */);

/* ---- more file calls ---- */

/* msg=0x032D:mbox */
int64_t fwd_symlinkat(int newdirfd /* in:obj */, const char *target /* in:str */, const char *path /* in:str */);
/* msg=0x032E:mbox  flags: AT_SYMLINK_FOLLOW, AT_EMPTY_PATH */
int64_t fwd_linkat(int olddirfd /* in:obj */, int newdirfd /* in:obj */, int flags /* in:obj */,
                   const char *oldpath /* in:str */, const char *newpath /* in:str */);
/* msg=0x032F:mbox  uid, gid -1: unchanged; fchown is path "" with AT_EMPTY_PATH */
int64_t fwd_fchownat(int dirfd /* in:obj */, int64_t uid /* in:obj:min=-1:max=UINT32_MAX */,
                     int64_t gid /* in:obj:min=-1:max=UINT32_MAX */, int flags /* in:obj */,
                     const char *path /* in:str */);
/* msg=0x0330:mbox  a FIFO or a regular file (devices need a capability the I/O node's worker lacks) */
int64_t fwd_mknodat(int dirfd /* in:obj */, int mode /* in:obj */, uint64_t dev /* in:obj */,
                    const char *path /* in:str */);
/* msg=0x0331:mbox */
int64_t fwd_fallocate(int fd /* in:obj:fd */, int mode /* in:obj */, int64_t offset /* in:obj */,
                      int64_t len /* in:obj */);
/* msg=0x0332:mbox  OPENAT, then fstat of what it opened: one round trip (the FUSE client's open, create) */
int64_t fwd_openat_stat(int dirfd /* in:obj */, int flags /* in:obj */, int mode /* in:obj */,
                        const char *path /* in:str */, struct lat_stat *st /* out:ptr */);

#pragma GCC visibility pop

#endif
