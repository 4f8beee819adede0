# Plug-ins (docs/plugins.md): lattice-pluggen turns each annotated header into
# compute-side stubs (a static library the program links) and an I/O-node
# dispatcher, linked with the hand-written implementation into the shared
# object ciod loads (--plugin, [ionode] plugins in machine.toml).
PLUGGEN     := PYTHONPATH=protocol python3 -m pluggen
PLUGGEN_SRC := $(wildcard protocol/pluggen/*.py)
PLUG_CFLAGS := -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Wimplicit-fallthrough

.PHONY: plugins
all: plugins
plugins: $(BUILD)/plugins/liblofar_ciod.so $(BUILD)/plugins/liblofar.a $(BUILD)/plugins/lofar_test

$(BUILD)/plugins/lofar/lofar_stubs.c $(BUILD)/plugins/lofar/lofar_ciod.c &: plugins/lofar/lofar.h $(PLUGGEN_SRC)
	@mkdir -p $(@D)
	$(PLUGGEN) plugins/lofar/lofar.h --id 2 --out $(BUILD)/plugins/lofar

$(BUILD)/plugins/liblofar_ciod.so: $(BUILD)/plugins/lofar/lofar_ciod.c plugins/lofar/lofar_impl.c ionode/include/lattice/zoid_ion.h
	$(CC) $(PLUG_CFLAGS) -fPIC -shared -pthread -Iionode/include -Iplugins/lofar -o $@ \
	    $(BUILD)/plugins/lofar/lofar_ciod.c plugins/lofar/lofar_impl.c

$(BUILD)/plugins/lofar/lofar_stubs.o: $(BUILD)/plugins/lofar/lofar_stubs.c compute/include/lattice/zoid.h
	$(CC) $(PLUG_CFLAGS) -fPIC -Icompute/include -Iplugins/lofar -c -o $@ $<

$(BUILD)/plugins/liblofar.a: $(BUILD)/plugins/lofar/lofar_stubs.o
	rm -f $@
	$(AR) rcs $@ $<

$(BUILD)/plugins/lofar_test: plugins/lofar/lofar_test.c $(BUILD)/plugins/liblofar.a
	$(CC) $(PLUG_CFLAGS) -Iplugins/lofar -o $@ $< $(BUILD)/plugins/liblofar.a
