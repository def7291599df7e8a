# memlyze - build, test, install.
#
#   make                 build everything under build/
#   make test            build and run every test; ends with "N passed, N failed, N skipped"
#   make asan            the unit tests under ASan+UBSan (also part of make test)
#   make fuzz            run the fuzzers (reader, importers) for FUZZ_SECONDS in all (default 60)
#   make soak            long attach/detach and kill runs (not in CI)
#   make deps            apt-get the Debian packages the build and tests need
#   make install PREFIX=/usr/local
#
# SANITIZE=address,undefined or SANITIZE=thread builds into its own folder,
# so sanitized and plain objects never mix.

CC       ?= gcc
PREFIX   ?= /usr/local
SANITIZE ?=
FUZZ_SECONDS ?= 60

comma := ,
O := build$(if $(SANITIZE),/san-$(subst $(comma),-,$(SANITIZE)))

# Every object is PIC with hidden visibility: the same objects link into the
# memlyze tools and into the injected libmemlyze.so, which exports only the
# symbols marked MLZ_EXPORT.
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -fPIC -fvisibility=hidden -fno-omit-frame-pointer \
           -MMD -MP -Iformat -Icore -Igotpatch -Ipayload -Iproc $(addprefix -I,$(TOOL_DIRS))
ifneq ($(SANITIZE),)
CFLAGS  += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SANITIZE)
endif

# libzstd and zlib are referenced only weakly (format/codec_split.c, so the payload
# need not have them): --no-as-needed keeps the linker from dropping them.
ZSTDLIB := -Wl,--push-state,--no-as-needed -lzstd -lz -Wl,--pop-state
SYSLIBS := -ljansson -llz4 $(ZSTDLIB) -ldw -lelf -ldeflate -lcapstone -lz -lpthread -lm -ldl
# memlyze watch draws with ncurses (memlyze serve loads libmicrohttpd itself: cmd_serve.c).
SYSLIBS  += -lncursesw

FORMAT_OBJ := $(patsubst %.c,$(O)/%.o,$(wildcard format/*.c))
CORE_OBJ   := $(patsubst %.c,$(O)/%.o,$(wildcard core/*.c))
GOT_OBJ    := $(patsubst %.c,$(O)/%.o,$(wildcard gotpatch/*.c))
PROC_OBJ   := $(patsubst %.c,$(O)/%.o,$(wildcard proc/*.c))
PAYLOAD_OBJ:= $(patsubst %.c,$(O)/%.o,$(wildcard payload/*.c))
# The memlyze command (reader/: cmd_NAME.c and main.c) and its libraries,
# one folder per job.
TOOL_DIRS  := reader report export import symbolize live heapgraph replay
READER_OBJ := $(patsubst %.c,$(O)/%.o,$(wildcard $(addsuffix /*.c,$(TOOL_DIRS))))
INJ_OBJ    := $(patsubst %.c,$(O)/%.o,$(filter-out %_main.c,$(wildcard injector/*.c)))
UNIT_SRC   := $(wildcard tests/unit/test_*.c)
UNIT_BIN   := $(patsubst tests/unit/%.c,$(O)/tests/%,$(UNIT_SRC))
# Tests that build and run programs of their own (tests/targets/gotpatch).
PROG_BIN   := $(patsubst tests/gotpatch/%.c,$(O)/tests/%,$(wildcard tests/gotpatch/test_*.c))
BENCH_BIN  := $(patsubst bench/%.c,$(O)/bench/%,$(wildcard bench/*.c))

LIBFORMAT := $(O)/libmlzformat.a
LIBCORE   := $(O)/libmlzcore.a
LIBGOT    := $(O)/libmlzgot.a
LIBPROC   := $(O)/libmlzproc.a
LIBREADER := $(O)/libmlzreader.a
PAYLOAD   := $(if $(PAYLOAD_OBJ),$(O)/lib/libmemlyze.so $(O)/lib/libmemlyze-preload.so)
MEMLYZE   := $(O)/bin/memlyze
ATTACH    := $(O)/bin/memlyze-attach
DETACH    := $(O)/bin/memlyze-detach
LIBS      := $(LIBPROC) $(LIBGOT) $(LIBCORE) $(LIBFORMAT)

.PHONY: all test asan tsan-bins unit-bins fuzz deps install clean bench demo soak
all: $(MEMLYZE) $(O)/bin/memlyze-snapshot $(PAYLOAD) $(ATTACH) $(DETACH) $(UNIT_BIN) $(PROG_BIN) $(BENCH_BIN)

$(O)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

# The split-stream decoder's column loops want the vectoriser's full model.
$(O)/format/codec_split.o: CFLAGS += -O3

$(LIBFORMAT): $(FORMAT_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(LIBCORE): $(CORE_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(LIBGOT): $(GOT_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# A process seen from outside (maps, module files, symbols, memory, the
# payload's descriptor): the injector and the memlyze command share it.
$(LIBPROC): $(PROC_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# The memlyze command's library code (all but its command table), for unit tests.
$(LIBREADER): $(filter-out %/main.o,$(READER_OBJ))
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# The injected library: libc is its only runtime dependency (not even libm:
# core/sampler.c has its own log), so it loads in any target (containers,
# other mount namespaces) that has a glibc, and maps nothing more into it.
# libmemlyze-preload.so adds preload.c: exported malloc, free, ... for LD_PRELOAD,
# and exec_hooks.c: the exec family, flushing the profile before an exec.
#
# The library is linked with GCC's link-time optimisation, so the hooks'
# calls into the heap map, the rings and the clock (each in its own file)
# are inlined: exact mode's malloc+free on the churn took 12% fewer
# instructions (callgrind: 1587 -> 1393 per pair). Its objects carry both
# GCC's IR and ordinary code (-ffat-lto-objects); every other link says
# -fno-lto (GCC's linker plugin would optimise IR it finds anyway), so the
# tools and tests link the ordinary code, as before. Sanitizer builds keep
# plain objects.
ifeq ($(SANITIZE),)
PAYLOAD_LTO := -flto=auto -ffat-lto-objects
$(PAYLOAD_OBJ) $(CORE_OBJ) $(GOT_OBJ) $(FORMAT_OBJ): CFLAGS += $(PAYLOAD_LTO)
LDFLAGS += -fno-lto
endif
PAYLOAD_LINK = $(CC) $(filter-out -fno-lto,$(LDFLAGS)) $(PAYLOAD_LTO) $(filter -O% -g%,$(CFLAGS)) \
               -shared -Wl,-z,now -Wl,--no-undefined -o $@ $^ -lpthread -ldl
$(O)/lib/libmemlyze.so: $(filter-out %/preload.o %/exec_hooks.o,$(PAYLOAD_OBJ)) $(LIBGOT) $(LIBCORE) $(LIBFORMAT)
	@mkdir -p $(@D)
	$(PAYLOAD_LINK)
$(O)/lib/libmemlyze-preload.so: $(PAYLOAD_OBJ) $(LIBGOT) $(LIBCORE) $(LIBFORMAT)
	@mkdir -p $(@D)
	$(PAYLOAD_LINK)

# heapdump holds the target's threads with the injector's ptrace helpers.
MEMLYZE_INJ_OBJ := $(addprefix $(O)/injector/,ptrace.o threads.o errmsg.o)
$(MEMLYZE): $(READER_OBJ) $(MEMLYZE_INJ_OBJ) $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $(READER_OBJ) $(MEMLYZE_INJ_OBJ) $(LIBS) $(SYSLIBS)

# test_injector checks those helpers' reads of memory.
$(O)/tests/test_injector: $(O)/tests/unit/test_injector.o $(MEMLYZE_INJ_OBJ) $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(MEMLYZE_INJ_OBJ) $(LIBS) $(SYSLIBS)

# The injector runs outside the target: libelf reads the target's libc,
# libdw unwinds its stopped threads.
$(ATTACH): $(O)/injector/attach_main.o $(INJ_OBJ) $(LIBPROC) $(LIBCORE)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ -ldw -lelf

$(DETACH): $(O)/injector/detach_main.o $(INJ_OBJ) $(LIBPROC)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ -ldw -lelf

# memlyze-snapshot is memlyze itself: it looks at the name it was run by.
$(O)/bin/memlyze-snapshot: $(MEMLYZE)
	ln -sf memlyze $@

$(O)/tests/%: $(O)/tests/unit/%.o $(LIBREADER) $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBREADER) $(LIBS) $(SYSLIBS)

$(PROG_BIN): $(O)/tests/%: $(O)/tests/gotpatch/%.o $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBS) $(SYSLIBS)

$(O)/bench/%: $(O)/bench/%.o $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBS) $(SYSLIBS)

# test_arc checks the .arc reader and writer of heapgraph/.
$(O)/tests/test_arc: $(O)/tests/unit/test_arc.o $(O)/heapgraph/arc_read.o $(O)/heapgraph/arc_write.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^

unit-bins: $(UNIT_BIN) $(PROG_BIN) $(MEMLYZE) $(ATTACH) $(DETACH)

# Lock-free structures get a ThreadSanitizer build of their own tests.
# ... and so does the reader, whose read-ahead thread decodes split blocks.
TSAN_TESTS := $(patsubst tests/unit/%.c,%,$(wildcard tests/unit/test_lf_*.c)) test_read_ahead
tsan-bins: $(addprefix $(O)/tests/,$(TSAN_TESTS))

test: all
	@$(MAKE) --no-print-directory SANITIZE=address,undefined unit-bins
	@$(MAKE) --no-print-directory SANITIZE=thread tsan-bins
	@tests/run.sh

asan:
	@$(MAKE) --no-print-directory SANITIZE=address,undefined unit-bins
	@tests/run.sh --only build/san-address-undefined

# libFuzzer needs clang; seeds are dump texts in tests/fuzz/seeds (and one binary
# file of an older split encoding, tests/data).
FUZZ_BIN := build/fuzz/fuzz_reader
$(FUZZ_BIN): tests/fuzz/fuzz_reader.c $(wildcard format/*.c) $(wildcard format/*.h)
	@mkdir -p $(@D)
	clang -std=c11 -g -O1 -D_GNU_SOURCE -Iformat -fsanitize=fuzzer,address,undefined \
	    -o $@ tests/fuzz/fuzz_reader.c $(wildcard format/*.c) -ljansson -llz4 $(ZSTDLIB) -lz
# The importers (dumpalloc, heaptrack) and the trace builder they fill.
FUZZ_IMP_BIN := build/fuzz/fuzz_import
FUZZ_IMP_SRC := import/dumpalloc_read.c import/heaptrack_read.c import/import.c import/import_trace.c \
                report/addrmap.c report/errbuf.c
$(FUZZ_IMP_BIN): tests/fuzz/fuzz_import.c $(FUZZ_IMP_SRC) $(wildcard format/*.c) $(wildcard import/*.h report/*.h)
	@mkdir -p $(@D)
	clang -std=c11 -g -O1 -D_GNU_SOURCE -Iformat -Icore -Iimport -Ireport -fsanitize=fuzzer,address,undefined \
	    -o $@ tests/fuzz/fuzz_import.c $(FUZZ_IMP_SRC) $(wildcard format/*.c) -ljansson -llz4 $(ZSTDLIB) -lz
# The .arc reader (heap dumps) has its own target.
FUZZ_ARC_BIN := build/fuzz/fuzz_arc
$(FUZZ_ARC_BIN): tests/fuzz/fuzz_arc.c heapgraph/arc_read.c heapgraph/arc.h
	@mkdir -p $(@D)
	clang -std=c11 -g -O1 -D_GNU_SOURCE -Iheapgraph -fsanitize=fuzzer,address,undefined \
	    -o $@ tests/fuzz/fuzz_arc.c heapgraph/arc_read.c
# Seeds are kept as dump text (reviewable) and turned into binaries here;
# the .arc seeds are the hand-made rule cases. FUZZ_SECONDS is shared: half
# for the .mlyze reader, a quarter each for the importers and the .arc reader.
fuzz: $(FUZZ_BIN) $(FUZZ_IMP_BIN) $(FUZZ_ARC_BIN) $(MEMLYZE)
	@rm -rf build/fuzz/seeds build/fuzz/imp-seeds build/fuzz/arc-seeds && mkdir -p build/fuzz/corpus build/fuzz/seeds \
	    build/fuzz/imp-corpus build/fuzz/imp-seeds build/fuzz/arc-corpus
	@for s in tests/fuzz/seeds/*.txt; do \
	    $(MEMLYZE) undump -o build/fuzz/seeds/$$(basename $$s .txt).mlyze $$s || exit 1; done
	@cp tests/data/split_model1.mlyze build/fuzz/seeds/   # split blocks of address model 1
	@$(MEMLYZE) undump -o build/fuzz/imp-seeds/fixture.mlyze tests/e2e/reports/fixture.dump
	@$(MEMLYZE) export --format dumpalloc -o build/fuzz/imp-seeds/fixture.da build/fuzz/imp-seeds/fixture.mlyze
	@$(MEMLYZE) export --format heaptrack -o build/fuzz/imp-seeds/fixture.heaptrack build/fuzz/imp-seeds/fixture.mlyze
	@rm build/fuzz/imp-seeds/fixture.mlyze*
	@for k in odd past-end pcal-past-record; do python3 tests/e2e/interop/dumpalloc.py make $$k build/fuzz/imp-seeds/$$k.da || exit 1; done
	@python3 tests/arc/make_cases.py build/fuzz/arc-seeds > /dev/null
	$(FUZZ_BIN) -max_total_time=$$(( $(FUZZ_SECONDS) / 2 )) -max_len=65536 -timeout=10 -print_final_stats=1 \
	    build/fuzz/corpus build/fuzz/seeds
	$(FUZZ_IMP_BIN) -max_total_time=$$(( ($(FUZZ_SECONDS) + 3) / 4 )) -max_len=65536 -timeout=10 -print_final_stats=1 \
	    build/fuzz/imp-corpus build/fuzz/imp-seeds
	$(FUZZ_ARC_BIN) -max_total_time=$$(( ($(FUZZ_SECONDS) + 3) / 4 )) -max_len=65536 -timeout=10 -print_final_stats=1 \
	    build/fuzz/arc-corpus build/fuzz/arc-seeds

# Each prints its figures against a baseline measured in the same run.
bench: all
	$(O)/bench/bench_format
	$(O)/bench/bench_unwind
	$(O)/bench/bench_gotpatch
	bench/bench_payload.sh
	bench/bench_snapshot.sh
	nice -n 5 bench/bench_heapdump.sh
	bench/bench_attach.sh
	bench/compare.sh
	bench/compare_redis.sh
	bench/bench_trace_size.sh
	bench/bench_inline.sh

# Long runs, not in CI: thousands of attach/detach cycles, hundreds of kills.
soak: all
	@bash tests/soak/attach_soak.sh
	@INLINE_CYCLES=100 INLINE_CYCLES_JE=100 bash tests/e2e/inline_attach.sh

deps:
	@tests/install-deps.sh

# The README's first command: install, build, attach to a leaking server.
demo: deps
	@$(MAKE) --no-print-directory all
	@demo/demo.sh

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/memlyze $(DESTDIR)$(PREFIX)/share/man/man1 \
	    $(DESTDIR)$(PREFIX)/share/memlyze/gdb $(DESTDIR)$(PREFIX)/share/memlyze/lldb
	install -m 755 $(MEMLYZE) $(DESTDIR)$(PREFIX)/bin/memlyze
	ln -sf memlyze $(DESTDIR)$(PREFIX)/bin/memlyze-snapshot
	install -m 755 $(ATTACH) $(DETACH) $(DESTDIR)$(PREFIX)/bin/
	install -m 755 $(PAYLOAD) $(DESTDIR)$(PREFIX)/lib/memlyze/
	install -m 644 scripts/gdb/memlyze.py $(DESTDIR)$(PREFIX)/share/memlyze/gdb/memlyze.py
	install -m 644 scripts/lldb/memlyze.py $(DESTDIR)$(PREFIX)/share/memlyze/lldb/memlyze.py
	install -m 644 scripts/gdb/libmemlyze.so-gdb.py $(DESTDIR)$(PREFIX)/lib/memlyze/libmemlyze.so-gdb.py
	install -m 644 docs/memlyze.1 $(DESTDIR)$(PREFIX)/share/man/man1/memlyze.1

clean:
	rm -rf build

# Keep the objects of chained rules (tests, benches): a later make would
# otherwise rebuild them.
.SECONDARY:

# The output tree's own dependency files (headers): O=DIR builds track them too.
-include $(shell find $(O) -name '*.d' 2>/dev/null)
