/*
 * mpiio FILE [BLOCK] - every rank writes its own byte pattern, BLOCK bytes
 * (default 65536), at offset rank * BLOCK of one shared FILE with
 * MPI_File_write_at_all; rank 0 then reads the whole file back and checks
 * every byte.  Byte i of rank r's block is (r * 31 + i * 7 + 1) & 0xff, so a
 * test can check the file from outside.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static unsigned char pattern(int r, long i) { return (unsigned char)((r * 31 + i * 7 + 1) & 0xff); }

int main(int argc, char **argv)
{
    int rank, size, bad = 0;
    MPI_File fh;
    MPI_Status st;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 2) {
        if (rank == 0)
            fprintf(stderr, "usage: mpiio FILE [BLOCK]\n");
        MPI_Finalize();
        return 2;
    }
    long block = argc > 2 ? atol(argv[2]) : 65536;
    unsigned char *buf = malloc(block);
    for (long i = 0; i < block; i++)
        buf[i] = pattern(rank, i);

    int rc = MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_WRONLY,
                           MPI_INFO_NULL, &fh);
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len;
        MPI_Error_string(rc, msg, &len);
        fprintf(stderr, "mpiio: rank %d: open %s: %s\n", rank, argv[1], msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_File_set_size(fh, 0);
    rc = MPI_File_write_at_all(fh, (MPI_Offset)rank * block, buf, (int)block, MPI_BYTE, &st);
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    if (rc != MPI_SUCCESS || count != block) {
        fprintf(stderr, "mpiio: rank %d: write_at_all wrote %d of %ld bytes\n", rank, count, block);
        bad = 1;
    }
    MPI_File_close(&fh);
    MPI_Barrier(MPI_COMM_WORLD);

    if (rank == 0) {
        long total = block * size;
        unsigned char *all = malloc(total);
        rc = MPI_File_open(MPI_COMM_SELF, argv[1], MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
        MPI_Offset fsize = -1;
        if (rc == MPI_SUCCESS) {
            MPI_File_get_size(fh, &fsize);
            rc = MPI_File_read_at(fh, 0, all, (int)total, MPI_BYTE, &st);
            MPI_Get_count(&st, MPI_BYTE, &count);
            MPI_File_close(&fh);
        }
        if (rc != MPI_SUCCESS || fsize != total || count != total) {
            fprintf(stderr, "mpiio: read back %d bytes, file size %lld, expected %ld\n",
                    count, (long long)fsize, total);
            bad = 1;
        } else {
            for (long i = 0; i < total; i++)
                if (all[i] != pattern((int)(i / block), i % block)) {
                    fprintf(stderr, "mpiio: byte %ld is %u, expected %u\n", i, all[i],
                            pattern((int)(i / block), i % block));
                    bad = 1;
                    break;
                }
        }
        if (!bad)
            printf("mpiio: %d ranks wrote %ld bytes to %s: verified\n", size, total, argv[1]);
        free(all);
    }
    MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
    free(buf);
    MPI_Finalize();
    return bad;
}
