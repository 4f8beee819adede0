# Lattice's PMI-1 client library (build/lib/libpmi.so), which Open MPI's
# pmix/flux component dlopens (FLUX_PMI_LIBRARY_PATH), and the Open MPI
# example programs (examples/openmpi/), built with the distribution's
# Open MPI wrapper.
LIBPMI_SRC := $(wildcard compute/libpmi/*.c)
OMPI_EXAMPLES := $(patsubst examples/openmpi/%.c,$(BUILD)/examples/openmpi/%,$(wildcard examples/openmpi/*.c))

.PHONY: libpmi openmpi-examples
all: libpmi openmpi-examples
libpmi: $(BUILD)/lib/libpmi.so

# Only the PMI_* API is exported (-fvisibility=hidden, PMI_API marks it).
$(BUILD)/lib/libpmi.so: $(LIBPMI_SRC) $(wildcard compute/libpmi/*.h)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fPIC -shared -fvisibility=hidden -pthread -Wl,-soname,libpmi.so -o $@ $(LIBPMI_SRC)

# Open MPI examples need mpicc.openmpi; skipped (with a note) where it is missing.
openmpi-examples: $(OMPI_EXAMPLES)
$(BUILD)/examples/openmpi/%: examples/openmpi/%.c
	@mkdir -p $(@D)
	@if command -v mpicc.openmpi >/dev/null; then \
	    echo "mpicc.openmpi -O2 -g -Wall -Wextra -o $@ $<"; mpicc.openmpi -std=c11 -O2 -g -Wall -Wextra -o $@ $<; \
	else echo "mpicc.openmpi not found: skipping $@"; fi
