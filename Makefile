# Builds the node-side C programs.  The service node (Python) is installed by
# scripts/setup.sh into .venv; `make` alone needs only gcc and libjansson.
CC      ?= gcc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wimplicit-fallthrough -Iprotocol
BUILD   := build

CIOD_SRC   := $(wildcard ionode/ciod/*.c)
CNODE_SRC  := $(wildcard compute/cnode/*.c)
CLIENT_SRC := $(wildcard compute/libcnclient/*.c)
HEADERS    := protocol/lattice/wire.h

.PHONY: all ciod cnode libcnclient examples clean
all: ciod cnode libcnclient examples

ciod: $(BUILD)/bin/ciod
cnode: $(BUILD)/bin/cnode
libcnclient: $(BUILD)/lib/libcnclient.so

$(BUILD)/bin/ciod: $(CIOD_SRC) $(wildcard ionode/ciod/*.h) $(HEADERS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -pthread -o $@ $(CIOD_SRC)

$(BUILD)/bin/cnode: $(CNODE_SRC) $(wildcard compute/cnode/*.h) $(HEADERS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $(CNODE_SRC) -ljansson

$(BUILD)/lib/libcnclient.so: $(CLIENT_SRC) $(wildcard compute/libcnclient/*.h) $(HEADERS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fPIC -shared -pthread -o $@ $(CLIENT_SRC)

# Example programs run as jobs (tests and the README's main job use them).
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c)) \
            $(patsubst examples/%.f90,$(BUILD)/examples/%,$(wildcard examples/*.f90))
examples: $(EXAMPLES)

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
