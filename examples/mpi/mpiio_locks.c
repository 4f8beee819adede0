/*
 * mpiio_locks DIR - the MPI-IO paths that take file locks in ROMIO (MPICH's
 * MPI-IO), each checked byte for byte by rank 0:
 *   interleaved: a strided file view (each rank owns every size-th block of
 *     BLK bytes) written with MPI_File_write_all: data sieving and two-phase
 *     collective buffering, which lock the ranges they read-modify-write;
 *   shared: every rank appends a record with MPI_File_write_shared (the shared
 *     file pointer lives in a hidden file that ROMIO updates under a lock);
 *   atomic: MPI_File_set_atomicity(1), then every rank writes the same
 *     overlapping range with its own byte: the result is one rank's bytes whole.
 * Prints one line per check ("interleaved: ok"), exits 1 if any failed.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLK 1000
#define NBLK 16

static int check_open(int rc, const char *what, int rank)
{
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len;
        MPI_Error_string(rc, msg, &len);
        fprintf(stderr, "mpiio_locks: rank %d: %s: %s\n", rank, what, msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return 0;
}

static unsigned char byte_of(int r, long i) { return (unsigned char)('A' + (r * 7 + i) % 26); }

int main(int argc, char **argv)
{
    int rank, size, bad = 0;
    char path[4096];
    MPI_File fh;
    MPI_Status st;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *dir = argc > 1 ? argv[1] : ".";

    /* interleaved: rank r owns blocks r, r+size, r+2*size ... */
    snprintf(path, sizeof(path), "%s/interleaved.dat", dir);
    MPI_Datatype vec, view;
    MPI_Type_vector(NBLK, BLK, BLK * size, MPI_BYTE, &vec);
    MPI_Type_create_resized(vec, 0, (MPI_Aint)BLK * size * NBLK, &view);
    MPI_Type_commit(&view);
    unsigned char *mine = malloc(BLK * NBLK);
    for (long i = 0; i < BLK * NBLK; i++)
        mine[i] = byte_of(rank, i);
    check_open(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh),
               "open interleaved", rank);
    MPI_File_set_size(fh, 0);
    MPI_File_set_view(fh, (MPI_Offset)rank * BLK, MPI_BYTE, view, "native", MPI_INFO_NULL);
    if (MPI_File_write_all(fh, mine, BLK * NBLK, MPI_BYTE, &st) != MPI_SUCCESS)
        bad |= 1;
    MPI_File_close(&fh);

    /* shared: one record per rank, in some order, none lost or torn */
    snprintf(path, sizeof(path), "%s/shared.dat", dir);
    check_open(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY,
                             MPI_INFO_NULL, &fh), "open shared", rank);
    MPI_File_set_size(fh, 0);
    MPI_Barrier(MPI_COMM_WORLD);
    char rec[32];
    snprintf(rec, sizeof(rec), "record of rank %4d\n", rank);       /* 20 bytes */
    if (MPI_File_write_shared(fh, rec, (int)strlen(rec), MPI_CHAR, &st) != MPI_SUCCESS)
        bad |= 2;
    MPI_File_close(&fh);

    /* atomic: overlapping writes, each whole or not at all */
    snprintf(path, sizeof(path), "%s/atomic.dat", dir);
    check_open(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh),
               "open atomic", rank);
    MPI_File_set_size(fh, 0);
    MPI_File_set_atomicity(fh, 1);
    int atomic = 0;
    MPI_File_get_atomicity(fh, &atomic);
    unsigned char *same = malloc(BLK * 4);
    memset(same, 'a' + rank % 26, BLK * 4);
    MPI_Barrier(MPI_COMM_WORLD);
    if (MPI_File_write_at(fh, 0, same, BLK * 4, MPI_BYTE, &st) != MPI_SUCCESS)
        bad |= 4;
    MPI_File_close(&fh);
    MPI_Barrier(MPI_COMM_WORLD);

    if (rank == 0) {
        FILE *f;
        long n;
        unsigned char *all = malloc((size_t)BLK * NBLK * size + 1);
        /* interleaved */
        snprintf(path, sizeof(path), "%s/interleaved.dat", dir);
        f = fopen(path, "rb");
        n = f ? (long)fread(all, 1, (size_t)BLK * NBLK * size + 1, f) : -1;
        int ok = n == (long)BLK * NBLK * size;
        for (long i = 0; ok && i < n; i++) {
            long blk = i / BLK, r = blk % size, k = (blk / size) * BLK + i % BLK;
            ok = all[i] == byte_of((int)r, k);
        }
        if (f)
            fclose(f);
        printf("interleaved: %s (%ld bytes)\n", ok && !(bad & 1) ? "ok" : "WRONG", n);
        bad |= !ok;
        /* shared */
        snprintf(path, sizeof(path), "%s/shared.dat", dir);
        f = fopen(path, "rb");
        n = f ? (long)fread(all, 1, 20 * (size_t)size + 1, f) : -1;
        int seen = 0;
        ok = n == 20L * size;
        for (int i = 0; ok && i < size; i++) {
            int r;
            ok = sscanf((char *)all + 20 * i, "record of rank %4d\n", &r) == 1 && r >= 0 && r < size
                 && !(seen & (1 << r)) && all[20 * i + 19] == '\n';
            seen |= ok ? 1 << r : 0;
        }
        if (f)
            fclose(f);
        printf("shared: %s (%ld bytes)\n", ok ? "ok" : "WRONG", n);
        bad |= !ok;
        /* atomic */
        snprintf(path, sizeof(path), "%s/atomic.dat", dir);
        f = fopen(path, "rb");
        n = f ? (long)fread(all, 1, BLK * 4 + 1, f) : -1;
        ok = n == BLK * 4 && atomic == 1;
        for (long i = 1; ok && i < n; i++)
            ok = all[i] == all[0];
        if (f)
            fclose(f);
        printf("atomic: %s (%ld bytes of one rank, atomicity %d)\n", ok ? "ok" : "WRONG", n, atomic);
        bad |= !ok;
        free(all);
    }
    MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Type_free(&view);
    MPI_Type_free(&vec);
    free(mine);
    free(same);
    MPI_Finalize();
    return bad ? 1 : 0;
}
