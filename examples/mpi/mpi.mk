# MPI example programs (tests/e2e/test_t06*, bench/), built with the
# distribution's MPICH (mpicc.mpich / mpifort.mpich, ch4:ucx) as ordinary
# dynamic executables in build/examples/mpi/.  Included by the top-level
# Makefile; skipped with a note when MPICH is not installed.
MPI_EX_DIR := $(BUILD)/examples/mpi
MPICC      ?= mpicc.mpich
MPIFC      ?= mpifort.mpich
MPI_CFLAGS := -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra

MPI_EXAMPLES := $(addprefix $(MPI_EX_DIR)/, \
    hello ring allreduce collectives mpiio abort pingpong hello_f ring_f libmaps names mpiio_locks)

.PHONY: mpi-examples
ifneq ($(shell command -v $(MPICC) 2>/dev/null),)
examples: mpi-examples
mpi-examples: $(MPI_EXAMPLES)
else
mpi-examples:
	@echo "mpi-examples: $(MPICC) not found (apt-get install mpich libmpich-dev)"
endif

# hello prints the node's personality
$(MPI_EX_DIR)/hello: examples/mpi/hello.c $(BUILD)/lib/liblatpers.a \
    compute/include/lattice/personality.h
	@mkdir -p $(@D)
	$(MPICC) $(MPI_CFLAGS) -Icompute/include -o $@ $< $(BUILD)/lib/liblatpers.a

$(MPI_EX_DIR)/libmaps: examples/libmaps.h
$(MPI_EX_DIR)/%: examples/mpi/%.c
	@mkdir -p $(@D)
	$(MPICC) $(MPI_CFLAGS) -o $@ $<

$(MPI_EX_DIR)/%: examples/mpi/%.f90
	@mkdir -p $(@D)/mod
	$(MPIFC) -O2 -g -Wall -J $(@D)/mod -o $@ $<
