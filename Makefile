# Builds the node-side C programs.  The service node (Python) is installed by
# scripts/setup.sh into .venv; `make` alone needs only gcc, libjansson and libssl.
CC      ?= gcc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wimplicit-fallthrough -Iprotocol
BUILD   := build

CIOD_SRC   := $(wildcard ionode/ciod/*.c)
CNODE_SRC  := $(wildcard compute/cnode/*.c)
CLIENT_SRC := $(wildcard compute/libcnclient/*.c)
PEER_SRC   := protocol/peer/peer.c protocol/peer/seal.c
HEADERS    := protocol/lattice/wire.h protocol/lattice/fwd_posix.h protocol/lattice/hello_mac.h protocol/lattice/peer.h protocol/lattice/seal.h protocol/lattice/libcache_name.h

.PHONY: all ciod cnode pidns-init cnk libcnclient lattice-fs liblatpers examples clean wire-h py-wire syscalls-md
all: ciod cnode pidns-init cnk libcnclient lattice-fs liblatpers examples py-wire

# The function shipping (LAT_SYS_*) is generated from one annotated header
# (docs/plugins.md "Wire mode"): ciod's decoder, the implementations'
# prototypes and the compute-side stubs go to build/gen/; the LAT_SYS block
# of wire.h is committed (`make wire-h` rewrites it; a test checks it).
FWD_HDR := protocol/lattice/fwd_posix.h
FWD_GEN := $(BUILD)/gen/fwd_posix_ciod.c $(BUILD)/gen/fwd_posix_srv.h $(BUILD)/gen/fwd_posix_stubs.c $(BUILD)/gen/fwd_posix_stubs.h
FWD_PY  := $(wildcard protocol/pluggen/*.py)

$(FWD_GEN) &: $(FWD_HDR) $(FWD_PY)
	@mkdir -p $(BUILD)/gen
	PYTHONPATH=protocol python3 -m pluggen --wire $(FWD_HDR) --out $(BUILD)/gen

wire-h:
	PYTHONPATH=protocol python3 -m pluggen --wire $(FWD_HDR) --out $(BUILD)/gen --wire-h protocol/lattice/wire.h

# The one list of system calls (compute/include/lattice/syscalls.def): cnk's
# table and handlers are made from it by the preprocessor; `make syscalls-md`
# rewrites the table in compute/cnk/README.md (a test checks it is current).
SYSCALLS_DEF := compute/include/lattice/syscalls.def
syscalls-md:
	PYTHONPATH=protocol python3 -m pluggen.syscalls --readme compute/cnk/README.md

# The service node's view of wire.h (every LAT_* number and struct layout),
# generated from it; tests/unit/test_service_wire.py checks it against gcc.
PY_WIRE := service/lattice/transport/wire_h.py
py-wire: $(PY_WIRE)
$(PY_WIRE): protocol/lattice/wire.h protocol/pluggen/pywire.py
	PYTHONPATH=protocol python3 -m pluggen.pywire $< $@

ciod: $(BUILD)/bin/ciod
cnode: $(BUILD)/bin/cnode
libcnclient: $(BUILD)/lib/libcnclient.so

$(BUILD)/bin/ciod: $(CIOD_SRC) $(PEER_SRC) $(wildcard ionode/ciod/*.h) $(HEADERS) $(FWD_GEN)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -pthread -Iionode/ciod -I$(BUILD)/gen -o $@ $(CIOD_SRC) $(PEER_SRC) $(BUILD)/gen/fwd_posix_ciod.c -lcrypto

$(BUILD)/bin/cnode: $(CNODE_SRC) $(PEER_SRC) $(wildcard compute/cnode/*.h) compute/include/lattice/cnk_report.h $(HEADERS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -pthread -o $@ $(CNODE_SRC) $(PEER_SRC) -ljansson -lcrypto

# pid 1 of a block's pid namespace on a host (compute/pidns/init.c), started
# by the host agent with the block's network (service/lattice/nodes/blocknet.py)
pidns-init: $(BUILD)/bin/lattice-pidns-init
$(BUILD)/bin/lattice-pidns-init: compute/pidns/init.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $<

# The shipping client core (compute/shipc/), one set of sources built twice
# into static archives: freestanding for cnk, position-independent and
# hidden for libcnclient.so (-ffreestanding there too, so a libc header that
# slips in fails both builds).
SHIPC_SRC  := $(wildcard compute/shipc/*.c)
SHIPC_DEPS := $(wildcard compute/shipc/*.h) $(wildcard compute/include/lattice/*.h) $(SYSCALLS_DEF) $(HEADERS) $(FWD_GEN)
SHIPC_INC  := -Iprotocol -Icompute/include -Icompute/shipc -I$(BUILD)/gen

# cnk: freestanding (no libc: the program owns %fs and errno), static-PIE so
# it never sits where a fixed-address program wants to be; it leaves the
# program's vector registers alone (-mgeneral-regs-only).
CNK_SRC    := $(wildcard compute/cnk/*.c) $(wildcard compute/cnk/*.S)
CNK_CC     := -std=c11 -g -Wall -Wextra -Wimplicit-fallthrough -Werror=implicit-function-declaration -ffreestanding -fno-stack-protector \
              -fno-builtin -fPIE -fvisibility=hidden -O2 -mgeneral-regs-only $(SHIPC_INC)
CNK_CFLAGS := $(CNK_CC) -nostdlib -static-pie -Wl,-z,noexecstack
cnk: $(BUILD)/bin/cnk

$(BUILD)/obj/shipc-cnk/%.o: compute/shipc/%.c $(SHIPC_DEPS)
	@mkdir -p $(@D)
	$(CC) $(CNK_CC) -DSHIPC_CNK -c -o $@ $<

$(BUILD)/obj/shipc-lcn/%.o: compute/shipc/%.c $(SHIPC_DEPS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fPIC -fvisibility=hidden -fno-stack-protector -ffreestanding $(SHIPC_INC) -c -o $@ $<

$(BUILD)/lib/libshipc-cnk.a: $(patsubst compute/shipc/%.c,$(BUILD)/obj/shipc-cnk/%.o,$(SHIPC_SRC))
$(BUILD)/lib/libshipc-lcn.a: $(patsubst compute/shipc/%.c,$(BUILD)/obj/shipc-lcn/%.o,$(SHIPC_SRC))
$(BUILD)/lib/libshipc-cnk.a $(BUILD)/lib/libshipc-lcn.a:
	@mkdir -p $(@D)
	rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/bin/cnk: $(CNK_SRC) $(wildcard compute/cnk/*.h) $(SHIPC_DEPS) $(BUILD)/lib/libshipc-cnk.a
	@mkdir -p $(@D)
	$(CC) $(CNK_CFLAGS) -o $@ $(CNK_SRC) $(BUILD)/lib/libshipc-cnk.a

$(BUILD)/lib/libcnclient.so: $(CLIENT_SRC) $(wildcard compute/libcnclient/*.h) $(SHIPC_DEPS) $(BUILD)/lib/libshipc-lcn.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fPIC -shared -pthread -Wl,-z,defs $(SHIPC_INC) -o $@ $(CLIENT_SRC) $(BUILD)/lib/libshipc-lcn.a -ldl

# lattice-fs, the job's FUSE file client in the Linux node sandbox
# (compute/cnfs/): libfuse3's low-level API over the shipping core's
# connection, stubs and bulk path (the position-independent archive; its
# entry hooks are compute/cnfs/entry.c).
# Debian's libfuse3-dev without pkg-config installed: its usual flags.
CNFS_SRC := $(wildcard compute/cnfs/*.c)
FUSE_CFLAGS = $(shell pkg-config --cflags fuse3 2>/dev/null || echo -I/usr/include/fuse3)
FUSE_LIBS = $(shell pkg-config --libs fuse3 2>/dev/null || echo -lfuse3)
lattice-fs: $(BUILD)/bin/lattice-fs
$(BUILD)/bin/lattice-fs: $(CNFS_SRC) $(wildcard compute/cnfs/*.h) $(SHIPC_DEPS) $(BUILD)/lib/libshipc-lcn.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -pthread $(SHIPC_INC) $(FUSE_CFLAGS) -o $@ $(CNFS_SRC) $(BUILD)/lib/libshipc-lcn.a $(FUSE_LIBS)

# The personality API for programs: lattice/personality.h, -llatpers.
PERS_SRC := compute/libpersonality/personality.c
PERS_HDR := compute/include/lattice/personality.h
liblatpers: $(BUILD)/lib/liblatpers.a $(BUILD)/lib/liblatpers.so

$(BUILD)/obj/liblatpers.o: $(PERS_SRC) $(PERS_HDR)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Icompute/include -fPIC -c -o $@ $<

$(BUILD)/lib/liblatpers.a: $(BUILD)/obj/liblatpers.o
	rm -f $@
	$(AR) rcs $@ $<

$(BUILD)/lib/liblatpers.so: $(BUILD)/obj/liblatpers.o
	$(CC) $(CFLAGS) -shared -Wl,-soname,liblatpers.so -o $@ $<

# Example programs run as jobs (tests and the README's main job use them).
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c)) \
            $(patsubst examples/%.f90,$(BUILD)/examples/%,$(wildcard examples/*.f90))
examples: $(EXAMPLES)
$(BUILD)/examples/libmaps: examples/libmaps.h
$(BUILD)/examples/conformance $(BUILD)/examples/conformance_fault: examples/conformance.h
$(BUILD)/examples/conformance: examples/conformance_proc.h

$(BUILD)/examples/%: examples/%.c
	@mkdir -p $(@D)
	$(CC) -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -o $@ $<

$(BUILD)/examples/%: examples/%.f90
	@mkdir -p $(@D)
	gfortran -O2 -g -Wall -J $(@D) -o $@ $<

clean:
	rm -rf $(BUILD)

# Benchmark programs (bench/*.c), same binary for the baseline and Lattice.
BENCH := $(patsubst bench/%.c,$(BUILD)/bench/%,$(wildcard bench/*.c))
.PHONY: bench
all: bench
bench: $(BENCH)
$(BUILD)/bench/%: bench/%.c
	@mkdir -p $(@D)
	$(CC) -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -o $@ $<

# cnk example programs (examples/cnk/) and the benchmarks that need their own
# flags (static, FFTW): explicit rules there win over the pattern rules above.
include examples/cnk/examples.mk bench/bench.mk

# MPI example programs (examples/mpi/), built with the distribution's MPICH
# wrappers (mpicc.mpich, mpifort.mpich).
-include examples/mpi/mpi.mk

# Lattice's PMI-1 client library (Open MPI's pmix/flux bootstrap) and Open MPI examples.
-include compute/libpmi/libpmi.mk

# Lattice's torus collectives (PMPI, preloaded into MPICH programs).
-include compute/libtorus/libtorus.mk

# Plug-ins generated from annotated headers (lattice-pluggen) and their examples.
-include plugins/plugins.mk
