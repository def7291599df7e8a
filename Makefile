# memlyze - build, test, install.
#
#   make                 build everything under build/
#   make test            build and run every test; ends with "N passed, N failed"
#   make asan            the unit tests under ASan+UBSan (also part of make test)
#   make fuzz            run the reader fuzzer for FUZZ_SECONDS (default 60)
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
           -MMD -MP -Iformat -Icore -Igotpatch -Ipayload
ifneq ($(SANITIZE),)
CFLAGS  += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SANITIZE)
endif

# libzstd and zlib are referenced only weakly (format/codec_split.c, so the payload
# need not have them): --no-as-needed keeps the linker from dropping them.
ZSTDLIB := -Wl,--push-state,--no-as-needed -lzstd -lz -Wl,--pop-state
SYSLIBS := -ljansson -llz4 $(ZSTDLIB) -ldw -lelf -lcapstone -lz -lstdc++ -lpthread -lm -ldl

FORMAT_OBJ := $(patsubst %.c,$(O)/%.o,$(wildcard format/*.c))
CORE_OBJ   := $(patsubst %.c,$(O)/%.o,$(wildcard core/*.c))
GOT_OBJ    := $(patsubst %.c,$(O)/%.o,$(wildcard gotpatch/*.c))
PAYLOAD_OBJ:= $(patsubst %.c,$(O)/%.o,$(wildcard payload/*.c))
READER_OBJ := $(patsubst %.c,$(O)/%.o,$(wildcard reader/*.c))
INJ_OBJ    := $(patsubst %.c,$(O)/%.o,$(filter-out %_main.c,$(wildcard injector/*.c)))
UNIT_SRC   := $(wildcard tests/unit/test_*.c)
UNIT_BIN   := $(patsubst tests/unit/%.c,$(O)/tests/%,$(UNIT_SRC))
BENCH_BIN  := $(patsubst bench/%.c,$(O)/bench/%,$(wildcard bench/*.c))

LIBFORMAT := $(O)/libmlzformat.a
LIBCORE   := $(O)/libmlzcore.a
LIBGOT    := $(O)/libmlzgot.a
PAYLOAD   := $(if $(PAYLOAD_OBJ),$(O)/lib/libmemlyze.so $(O)/lib/libmemlyze-preload.so)
MEMLYZE   := $(O)/bin/memlyze
ATTACH    := $(O)/bin/memlyze-attach
DETACH    := $(O)/bin/memlyze-detach
LIBS      := $(LIBGOT) $(LIBCORE) $(LIBFORMAT)

.PHONY: all test asan tsan-bins unit-bins fuzz deps install clean bench demo
all: $(MEMLYZE) $(O)/bin/memlyze-snapshot $(PAYLOAD) $(ATTACH) $(DETACH) $(UNIT_BIN) $(BENCH_BIN)

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

# The injected library: libc is its only runtime dependency, so it loads in
# any target (containers, other mount namespaces) that has a glibc.
# libmemlyze-preload.so adds preload.c: exported malloc, free, ... for LD_PRELOAD.
PAYLOAD_LINK = $(CC) $(LDFLAGS) -shared -Wl,-z,now -Wl,--no-undefined -o $@ $^ -lpthread -lm -ldl
$(O)/lib/libmemlyze.so: $(filter-out %/preload.o,$(PAYLOAD_OBJ)) $(LIBGOT) $(LIBCORE) $(LIBFORMAT)
	@mkdir -p $(@D)
	$(PAYLOAD_LINK)
$(O)/lib/libmemlyze-preload.so: $(PAYLOAD_OBJ) $(LIBGOT) $(LIBCORE) $(LIBFORMAT)
	@mkdir -p $(@D)
	$(PAYLOAD_LINK)

$(MEMLYZE): $(READER_OBJ) $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $(READER_OBJ) $(LIBS) $(SYSLIBS)

# The injector runs outside the target: libelf reads the target's libc,
# libdw unwinds its stopped threads.
$(ATTACH): $(O)/injector/attach_main.o $(INJ_OBJ)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ -ldw -lelf

$(DETACH): $(O)/injector/detach_main.o $(INJ_OBJ)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ -ldw -lelf

# memlyze-snapshot is memlyze itself: it looks at the name it was run by.
$(O)/bin/memlyze-snapshot: $(MEMLYZE)
	ln -sf memlyze $@

$(O)/tests/%: $(O)/tests/unit/%.o $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBS) $(SYSLIBS)

$(O)/bench/%: $(O)/bench/%.o $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBS) $(SYSLIBS)

unit-bins: $(UNIT_BIN) $(MEMLYZE) $(ATTACH) $(DETACH)

# Lock-free structures get a ThreadSanitizer build of their own tests.
TSAN_TESTS := $(patsubst tests/unit/%.c,%,$(wildcard tests/unit/test_lf_*.c))
tsan-bins: $(addprefix $(O)/tests/,$(TSAN_TESTS))

test: all
	@$(MAKE) --no-print-directory SANITIZE=address,undefined unit-bins
	@$(MAKE) --no-print-directory SANITIZE=thread tsan-bins
	@tests/run.sh

asan:
	@$(MAKE) --no-print-directory SANITIZE=address,undefined unit-bins
	@tests/run.sh --only build/san-address-undefined

# libFuzzer needs clang; seeds are dump texts in tests/fuzz/seeds.
FUZZ_BIN := build/fuzz/fuzz_reader
$(FUZZ_BIN): tests/fuzz/fuzz_reader.c $(wildcard format/*.c) $(wildcard format/*.h)
	@mkdir -p $(@D)
	clang -std=c11 -g -O1 -D_GNU_SOURCE -Iformat -fsanitize=fuzzer,address,undefined \
	    -o $@ tests/fuzz/fuzz_reader.c $(wildcard format/*.c) -ljansson -llz4 $(ZSTDLIB) -lz
# Seeds are kept as dump text (reviewable) and turned into binaries here.
fuzz: $(FUZZ_BIN) $(MEMLYZE)
	@rm -rf build/fuzz/seeds && mkdir -p build/fuzz/corpus build/fuzz/seeds
	@for s in tests/fuzz/seeds/*.txt; do \
	    $(MEMLYZE) undump -o build/fuzz/seeds/$$(basename $$s .txt).mlyze $$s || exit 1; done
	$(FUZZ_BIN) -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=10 -print_final_stats=1 \
	    build/fuzz/corpus build/fuzz/seeds

# Each prints its figures against a baseline measured in the same run.
bench: all
	$(O)/bench/bench_format
	$(O)/bench/bench_unwind
	$(O)/bench/bench_gotpatch
	bench/bench_payload.sh
	bench/bench_snapshot.sh
	bench/bench_attach.sh
	bench/bench_trace_size.sh

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

-include $(shell find build -name '*.d' 2>/dev/null)
