/* Lattice's PMI-1 client library: the classic PMI-1 API (as in MPICH's
 * pmi.h, whose return codes and prototypes are the ABI that dlopen users
 * such as Open MPI's pmix/flux component expect), spoken as the "simple"
 * PMI-1 wire protocol over the descriptor in PMI_FD. */
#ifndef LATTICE_PMI_H
#define LATTICE_PMI_H

#define PMI_SUCCESS                 0
#define PMI_FAIL                   -1
#define PMI_ERR_INIT                1
#define PMI_ERR_NOMEM               2
#define PMI_ERR_INVALID_ARG         3
#define PMI_ERR_INVALID_KEY         4
#define PMI_ERR_INVALID_KEY_LENGTH  5
#define PMI_ERR_INVALID_VAL         6
#define PMI_ERR_INVALID_VAL_LENGTH  7
#define PMI_ERR_INVALID_LENGTH      8
#define PMI_ERR_INVALID_NUM_ARGS    9
#define PMI_ERR_INVALID_ARGS       10
#define PMI_ERR_INVALID_NUM_PARSED 11
#define PMI_ERR_INVALID_KEYVALP    12
#define PMI_ERR_INVALID_SIZE       13

#define PMI_TRUE  1
#define PMI_FALSE 0

#define PMI_API __attribute__((visibility("default")))

PMI_API int PMI_Init(int *spawned);
PMI_API int PMI_Initialized(int *initialized);
PMI_API int PMI_Finalize(void);
PMI_API int PMI_Get_size(int *size);
PMI_API int PMI_Get_rank(int *rank);
PMI_API int PMI_Get_universe_size(int *size);
PMI_API int PMI_Get_appnum(int *appnum);
PMI_API int PMI_Get_clique_size(int *size);
PMI_API int PMI_Get_clique_ranks(int ranks[], int length);
PMI_API int PMI_Barrier(void);
PMI_API int PMI_Abort(int exit_code, const char error_msg[]);
PMI_API int PMI_KVS_Get_my_name(char kvsname[], int length);
PMI_API int PMI_KVS_Get_name_length_max(int *length);
PMI_API int PMI_KVS_Get_key_length_max(int *length);
PMI_API int PMI_KVS_Get_value_length_max(int *length);
PMI_API int PMI_KVS_Put(const char kvsname[], const char key[], const char value[]);
PMI_API int PMI_KVS_Commit(const char kvsname[]);
PMI_API int PMI_KVS_Get(const char kvsname[], const char key[], char value[], int length);

#endif
