# Programs that show unchanged applications running under cnk (tests/e2e/
# test_t05*).  Included by the top-level Makefile.  Each program is built as
# an ordinary dynamic executable (build/examples/cnk/NAME) and, where the tests
# need them, as -static (NAME-static) and -static-pie (NAME-spie) variants.
CNK_EX_DIR   := $(BUILD)/examples/cnk
CNK_EX_FLAGS := -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -pthread
CNK_EX_DEPS  := examples/cnk/smaps.h

CNK_EXAMPLES := $(addprefix $(CNK_EX_DIR)/, \
    stdio_malloc stdio_malloc-static stdio_malloc-spie \
    bigalloc bigalloc-static \
    threads threads-static threads-spie \
    memmap memmap-static memmap-spie \
    forkcheck forkcheck-static \
    unsupported unsupported-static \
    bigbss bigbss-static \
    fortran_file fortran_file-static \
    launcher launcher-static execprobe execprobe-spie \
    affinity sigio sigio-static memlimit memlimit-static)

# the personality API is being written beside this; build its example once it exists
ifneq ($(wildcard compute/include/lattice/personality.h),)
CNK_EXAMPLES += $(CNK_EX_DIR)/personality $(CNK_EX_DIR)/personality-static
$(CNK_EX_DIR)/personality $(CNK_EX_DIR)/personality-static: $(BUILD)/lib/liblatpers.a \
    compute/include/lattice/personality.h
$(CNK_EX_DIR)/personality: examples/cnk/personality.c
	@mkdir -p $(@D)
	$(CC) $(CNK_EX_FLAGS) -Icompute/include -o $@ $< $(BUILD)/lib/liblatpers.a
$(CNK_EX_DIR)/personality-static: examples/cnk/personality.c
	@mkdir -p $(@D)
	$(CC) $(CNK_EX_FLAGS) -Icompute/include -static -o $@ $< $(BUILD)/lib/liblatpers.a
endif

.PHONY: cnk-examples
examples: cnk-examples
cnk-examples: $(CNK_EXAMPLES)

$(CNK_EX_DIR)/%: examples/cnk/%.c $(CNK_EX_DEPS)
	@mkdir -p $(@D)
	$(CC) $(CNK_EX_FLAGS) -o $@ $<

$(CNK_EX_DIR)/%-static: examples/cnk/%.c $(CNK_EX_DEPS)
	@mkdir -p $(@D)
	$(CC) $(CNK_EX_FLAGS) -static -o $@ $<

$(CNK_EX_DIR)/%-spie: examples/cnk/%.c $(CNK_EX_DEPS)
	@mkdir -p $(@D)
	$(CC) $(CNK_EX_FLAGS) -static-pie -fPIE -o $@ $<

$(CNK_EX_DIR)/%: examples/cnk/%.f90
	@mkdir -p $(@D)/mod
	gfortran -O2 -g -Wall -J $(@D)/mod -o $@ $<

$(CNK_EX_DIR)/%-static: examples/cnk/%.f90
	@mkdir -p $(@D)/mod
	gfortran -O2 -g -Wall -J $(@D)/mod -static -o $@ $<
