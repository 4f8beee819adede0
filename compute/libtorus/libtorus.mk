# Lattice's torus collectives (build/lib/libtorus.so): a PMPI library that
# `lattice run --collectives torus` preloads into MPICH programs
# (docs/architecture.md, "Collectives").  Built with the distribution's
# MPICH wrapper; skipped with a note where it is missing.
TORUS_SRC  := $(wildcard compute/libtorus/*.c)
TORUS_MPICC ?= mpicc.mpich

.PHONY: libtorus
all: libtorus
ifneq ($(shell command -v $(TORUS_MPICC) 2>/dev/null),)
libtorus: $(BUILD)/lib/libtorus.so $(BUILD)/tests/torus_sched_check $(BUILD)/bench/coll_bench
else
libtorus:
	@echo "libtorus: $(TORUS_MPICC) not found (apt-get install mpich libmpich-dev)"
endif

# Only the MPI_ entry points are exported; liblatpers reads the personality.
# (-Wno-stringop-overflow: gcc takes MPICH's MPI_STATUSES_IGNORE, (MPI_Status *)1,
# for an empty array.)
$(BUILD)/lib/libtorus.so: $(TORUS_SRC) $(wildcard compute/libtorus/*.h) $(PERS_SRC) $(PERS_HDR)
	@mkdir -p $(@D)
	$(TORUS_MPICC) $(CFLAGS) -fPIC -shared -fvisibility=hidden -Wno-stringop-overflow -Icompute/include -Wl,-soname,libtorus.so -Wl,-z,defs \
	    -o $@ $(TORUS_SRC) $(PERS_SRC)

# The schedule alone (no MPI): tests/unit/test_torus_sched.py runs it.
$(BUILD)/tests/torus_sched_check: tests/unit/torus_sched_check.c compute/libtorus/sched.c compute/libtorus/sched.h
	@mkdir -p $(@D)
	$(CC) -std=c11 -O2 -g -Wall -Wextra -Icompute/libtorus -o $@ $< compute/libtorus/sched.c

# bench/collectives.py's MPI program (an explicit rule: bench/*.c are plain gcc otherwise).
$(BUILD)/bench/coll_bench: bench/coll_bench.c
	@mkdir -p $(@D)
	$(TORUS_MPICC) -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -o $@ $<
