/*
 * lattice/zoid_nr.h - the numbers of the plug-in call (lattice/zoid.h),
 * alone so freestanding cnk can include them.
 */
#ifndef LATTICE_ZOID_NR_H
#define LATTICE_ZOID_NR_H

/* Above every x86-64 Linux call number in use, below the x32 range (512):
 * a kernel without cnk answers ENOSYS. */
#define LAT_NR_ZOID 511
#define LAT_ZOID_MAX_IOV 64         /* iovecs per direction of one call */

#endif
