# Benchmark programs that need flags of their own.  Included by the top-level
# Makefile; these explicit rules win over its bench/%.c pattern rule.
#
# gups, stream_copy, fft2d and noise are unmodified static executables: the
# same file runs on plain Linux and under cnk.  The -spie copies are the same
# sources built -static-pie (cnk can place them on 1 GiB pages, where a
# fixed-address executable at 0x400000 gets 2 MiB pages).  syscall_cost is
# dynamic so the preload client of `--kernel linux` can ship its calls too.
BENCH_FLAGS := -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra

bench: $(BUILD)/bench/gups-spie $(BUILD)/bench/stream_copy-spie

$(BUILD)/bench/gups $(BUILD)/bench/noise: $(BUILD)/bench/%: bench/%.c bench/pages.h
	@mkdir -p $(@D)
	$(CC) $(BENCH_FLAGS) -static -o $@ $<

$(BUILD)/bench/stream_copy: bench/stream_copy.c bench/pages.h
	@mkdir -p $(@D)
	$(CC) $(BENCH_FLAGS) -O3 -static -o $@ $<

$(BUILD)/bench/gups-spie: bench/gups.c bench/pages.h
	@mkdir -p $(@D)
	$(CC) $(BENCH_FLAGS) -static-pie -fPIE -o $@ $<

$(BUILD)/bench/stream_copy-spie: bench/stream_copy.c bench/pages.h
	@mkdir -p $(@D)
	$(CC) $(BENCH_FLAGS) -O3 -static-pie -fPIE -o $@ $<

$(BUILD)/bench/fft2d: bench/fft2d.c bench/pages.h
	@mkdir -p $(@D)
	$(CC) $(BENCH_FLAGS) -static -o $@ $< -lfftw3 -lm

$(BUILD)/bench/syscall_cost: bench/syscall_cost.c
	@mkdir -p $(@D)
	$(CC) $(BENCH_FLAGS) -o $@ $<

# MPI benchmark programs: dynamic executables built with the distribution's
# MPICH (as examples/mpi/), the same file for mpiexec.hydra and lattice run.
MPICC ?= mpicc.mpich
# Skipped with a note when MPICH is not installed.
$(BUILD)/bench/launch_hello $(BUILD)/bench/rma_bench: $(BUILD)/bench/%: bench/%.c
	@mkdir -p $(@D)
	@if command -v $(MPICC) >/dev/null 2>&1; then \
	    echo "$(MPICC) $(BENCH_FLAGS) -o $@ $<"; $(MPICC) $(BENCH_FLAGS) -o $@ $<; \
	else echo "$@: $(MPICC) not found (apt-get install mpich libmpich-dev)"; fi

# sockets.py: a dynamic executable, so the same file runs directly, under cnk
# and under the preload client of `--kernel linux`.
$(BUILD)/bench/sock_tput: bench/sock_tput.c
	@mkdir -p $(@D)
	$(CC) $(BENCH_FLAGS) -o $@ $<

# MPI application kernels (bench/apps.py): CG, MG, FT, IS, EP, NPB-like and
# self-verifying, dynamic MPICH executables (the same file for mpiexec.hydra
# and lattice run).  -ffp-contract=off: no fused multiply-adds whatever the
# target, so the recorded reference values hold for any build.
APPS := cg mg ft is ep
APPS_FLAGS := $(BENCH_FLAGS) -ffp-contract=off
ifneq ($(shell command -v $(MPICC) 2>/dev/null),)
bench: $(addprefix $(BUILD)/bench/apps/,$(APPS))
endif
$(BUILD)/bench/apps/%: bench/apps/%.c bench/apps/apps.h
	@mkdir -p $(@D)
	$(MPICC) $(APPS_FLAGS) -o $@ $< -lm

$(BUILD)/bench/apps/is: bench/pages.h

$(BUILD)/bench/apps/ft: bench/apps/ft.c bench/apps/apps.h
	@mkdir -p $(@D)
	$(MPICC) $(APPS_FLAGS) -o $@ $< -lfftw3 -lm

# What a job's container costs: the bench links cnode's container module itself.
$(BUILD)/bench/container_cost: bench/container_cost.c compute/cnode/container.c compute/cnode/container.h
	@mkdir -p $(@D)
	$(CC) $(BENCH_FLAGS) -Icompute/cnode -o $@ bench/container_cost.c compute/cnode/container.c
