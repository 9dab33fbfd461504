# ds4cl — build, test, demo, bench, install.
#
# Every module directory contributes its *.c files to the library objects
# that all programs and the tests link in full (a missing function is a
# link error); cli/main_ds4cl.c and engine/testkit/main_mkmodel.c (the
# fixture generator, beside its code) are two program entry points, bench/
# holds the third program (ds4cl-bench: main_bench.c
# and the benchmarks, linked into it only); tests/ holds the test runner
# and one test file per area. New files are picked up automatically.
#
#   make            build ds4cl, ds4cl-bench, ds4cl-mkmodel in the repo root
#   make test       build and run the test suite (T=pattern filters, J=jobs)
#   make test SAN=1 the same under AddressSanitizer + UBSan (build/san)
#   make test TSAN=1 the same under ThreadSanitizer (build/tsan)
#   make demo       the agent end to end on a generated tiny model
#   make bench      benchmarks (CSV on stdout, see bench/README.md)
#   make fuzz       run the fuzz targets for FUZZ_SECONDS each
#   make deps       install the Debian packages the project needs
#   make MPI=1 …    the same with the layer split over MPI ranks (mpi/, built
#                   with mpicc into build/<variant>-mpi; needs Open MPI)

VERSION   := 0.1.0
PREFIX    ?= /usr/local
DESTDIR   ?=
CC        ?= cc
PKG_CONFIG ?= pkg-config
PKGS      := ncursesw libcurl libwebsockets json-c OpenCL libpcre2-8 libcrypto libmicrohttpd

MODULES   := base res engine engine/testkit cpu opencl dsml agent tools ui sessions prompts serve download cli

ifeq ($(SAN),1)
  VARIANT   := san
  OPTFLAGS  := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
  LDSAN     := -fsanitize=address,undefined
  BINDIR    := build/san
else ifeq ($(TSAN),1)
  VARIANT   := tsan
  OPTFLAGS  := -O1 -g -fno-omit-frame-pointer -fsanitize=thread
  LDSAN     := -fsanitize=thread
  BINDIR    := build/tsan
else
  VARIANT   := rel
  OPTFLAGS  := -O2 -g
  LDSAN     :=
  BINDIR    := .
endif

# ARCH=NAME builds for -march=NAME, objects and programs in directories of
# their own (build/VARIANT-NAME, build/bin-NAME): what a smaller x86 level
# compiles (ARCH=x86-64-v3: AVX2 without AVX-512, what most desktop CPUs
# run) is built and tested on a machine that has more.
ifneq ($(ARCH),)
  ARCHFLAGS := -march=$(ARCH)
  ARCHDIR   := -$(ARCH)
  BINDIR    := $(if $(filter .,$(BINDIR)),build/bin-$(ARCH),$(BINDIR)-$(ARCH))
endif

# MPI=1 adds mpi/ (the layer split over the ranks of an MPI job), compiled
# and linked with mpicc; without it nothing of MPI is built or needed.
ifeq ($(MPI),1)
  ifeq ($(origin CC),default)
    CC      := mpicc
  endif
  MODULES   += mpi
  CPPFLAGS  += -DDS4CL_MPI
  OBJDIR    := build/$(VARIANT)$(ARCHDIR)-mpi
else
  OBJDIR    := build/$(VARIANT)$(ARCHDIR)
endif
GENDIR    := build/gen

# The goals that compile run in a sub-make started after the dependency step
# (see "Dependencies first" below), so that pkg-config is asked only once the
# packages it describes can exist: a make that installs them cannot use
# flags it computed while parsing, before they were there.
ifeq ($(DS4CL_DEPS_READY),1)
PKG_CFLAGS := $(shell $(PKG_CONFIG) --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell $(PKG_CONFIG) --libs $(PKGS) 2>/dev/null)
endif

ARCHFLAGS ?= -march=native
CFLAGS    ?=
CPPFLAGS  += -D_GNU_SOURCE -DDS4CL_VERSION=\"$(VERSION)\" -DCL_TARGET_OPENCL_VERSION=120 \
             -I. -I$(GENDIR)
ALL_CFLAGS = -std=c11 -Wall -Wextra -pthread $(OPTFLAGS) $(ARCHFLAGS) $(PKG_CFLAGS) $(CFLAGS)
LDLIBS    += $(PKG_LIBS) -lm -pthread -ldl

# Generated sources: OpenCL kernels and prompt texts embedded as C strings.
CL_SRCS     := $(sort $(wildcard opencl/kernels/*.cl))
PROMPT_SRCS := $(sort $(wildcard prompts/*.txt))
GEN_SRCS    := $(GENDIR)/clrt_sources.c $(GENDIR)/prompt_texts.c

# The main_*.c are the program entry points; bench/ belongs to ds4cl-bench
# alone; every other .c of MODULES is library code that every program and
# the tests link, as plain objects: the backends and the MPI job join the
# engine from constructors in their own files (engine/backend.h), which a
# static archive would drop.
MAIN_SRCS  := cli/main_ds4cl.c bench/main_bench.c engine/testkit/main_mkmodel.c
BENCH_SRCS := $(filter-out bench/main_bench.c,$(sort $(wildcard bench/*.c)))
LIB_SRCS   := $(filter-out $(MAIN_SRCS) $(BENCH_SRCS),$(sort $(foreach m,$(MODULES),$(wildcard $(m)/*.c))))
LIB_OBJS   := $(patsubst %.c,$(OBJDIR)/%.o,$(LIB_SRCS)) \
              $(patsubst $(GENDIR)/%.c,$(OBJDIR)/gen/%.o,$(GEN_SRCS))
BENCH_OBJS := $(patsubst %.c,$(OBJDIR)/%.o,$(BENCH_SRCS))

# The integer 2-bit kernels of each x86 SIMD level (*/qk_avx*.c), the
# f32-activation kernels of each width (cpu/quant_f32_x*.c), the 256-bit
# row decoders (cpu/quant_x256.c) and the CPU kernels of each level
# (cpu/cpu_kernels_*.c, the scalar one with them so that it is the same
# code in every build), name their instructions per
# function and run only where CPUID (or the build's own target) says they
# may, so they are built for the x86-64 baseline whatever ARCHFLAGS says: a
# -march=native must not let the compiler use, in a level's code, an
# instruction of a higher level.
QK_LEVEL_SRCS := $(filter %/qk_avx2.c %/qk_avx2vnni.c %/qk_avx2vnni_evex.c %/qk_avx512.c %/qk_avx512vbmi.c %/quant_x256.c %/quant_f32_x256.c %/quant_f32_x512.c %/cpu_kernels_avx512vbmi.c %/cpu_kernels_avx512.c %/cpu_kernels_avx2.c %/cpu_kernels_scalar.c,$(LIB_SRCS))
ifneq ($(filter x86_64%,$(shell $(CC) -dumpmachine 2>/dev/null)),)
$(patsubst %.c,$(OBJDIR)/%.o,$(QK_LEVEL_SRCS)): override ARCHFLAGS := -march=x86-64 -mtune=generic
endif

TEST_SRCS := $(sort $(wildcard tests/*.c))
TEST_OBJS := $(patsubst %.c,$(OBJDIR)/%.o,$(TEST_SRCS))
TESTBIN   := $(OBJDIR)/ds4cl-tests

PROGRAMS  := $(BINDIR)/ds4cl $(BINDIR)/ds4cl-bench $(BINDIR)/ds4cl-mkmodel

# The programs of a build with and without MPI share their directory: a
# stamp that changes with the kind makes them relink when it does.
FLAVOR       := $(if $(filter 1,$(MPI)),mpi,plain)
FLAVOR_STAMP := build/flavor$(subst /,_,$(BINDIR))

DEPFILES  := $(patsubst %.o,%.d,$(LIB_OBJS) $(BENCH_OBJS) $(TEST_OBJS)) \
             $(patsubst %.c,$(OBJDIR)/%.d,$(MAIN_SRCS))

.PHONY: all test demo bench deps check-deps install uninstall clean fuzz programs
.DEFAULT_GOAL := all

# Dependencies first: in the top-level make every goal that compiles or runs
# what was compiled checks (and if need be installs) the packages, then runs
# again in a sub-make that reads the Makefile afresh.  Only that sub-make
# has DS4CL_DEPS_READY=1 and defines the rules below.
DEPS_GOALS := all programs test demo bench fuzz install $(PROGRAMS) $(TESTBIN)
ifneq ($(DS4CL_DEPS_READY),1)
# One sub-make at a time: two goals must not build the same objects at once.
.NOTPARALLEL:

$(DEPS_GOALS): check-deps
	@$(MAKE) --no-print-directory DS4CL_DEPS_READY=1 $@

# A fuzz target or object by name: the same (a file that exists would
# count as up to date here, where no rule says what it is made of).
build/fuzz/%: check-deps
	@$(MAKE) --no-print-directory DS4CL_DEPS_READY=1 $@

# Any other target (an object file) the same way.
.DEFAULT:
	@sh build-aux/deps.sh --check || $(MAKE) --no-print-directory deps
	@$(MAKE) --no-print-directory DS4CL_DEPS_READY=1 $@

check-deps:
	@sh build-aux/deps.sh --check || $(MAKE) --no-print-directory deps
ifeq ($(MPI),1)
	@sh build-aux/deps.sh --check-mpi || sh build-aux/deps.sh --install-mpi
endif

deps:
	sh build-aux/deps.sh --install
ifeq ($(MPI),1)
	sh build-aux/deps.sh --install-mpi
endif

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/ds4cl $(DESTDIR)$(PREFIX)/bin/ds4cl-bench \
	      $(DESTDIR)$(PREFIX)/bin/ds4cl-mkmodel $(DESTDIR)$(PREFIX)/share/man/man1/ds4cl.1

clean:
	rm -rf build ds4cl ds4cl-bench ds4cl-mkmodel
else

all: $(PROGRAMS)

.PHONY: FORCE
$(FLAVOR_STAMP): FORCE
	@mkdir -p build
	@[ "$$(cat $@ 2>/dev/null)" = "$(FLAVOR)" ] || echo "$(FLAVOR)" > $@

programs: $(PROGRAMS)

$(OBJDIR)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

$(OBJDIR)/gen/%.o: $(GENDIR)/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

$(GENDIR)/clrt_sources.c: $(CL_SRCS) build-aux/embed.sh
	@mkdir -p $(GENDIR)
	sh build-aux/embed.sh clrt_sources $(CL_SRCS) > $@.tmp && mv $@.tmp $@

$(GENDIR)/prompt_texts.c: $(PROMPT_SRCS) build-aux/embed.sh
	@mkdir -p $(GENDIR)
	sh build-aux/embed.sh prompt_texts $(PROMPT_SRCS) > $@.tmp && mv $@.tmp $@

$(BINDIR)/ds4cl: $(OBJDIR)/cli/main_ds4cl.o $(LIB_OBJS) $(FLAVOR_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LDSAN) -o $@ $(filter %.o,$^) $(LDLIBS)

$(BINDIR)/ds4cl-bench: $(OBJDIR)/bench/main_bench.o $(BENCH_OBJS) $(LIB_OBJS) $(FLAVOR_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LDSAN) -o $@ $(filter %.o,$^) $(LDLIBS)

$(BINDIR)/ds4cl-mkmodel: $(OBJDIR)/engine/testkit/main_mkmodel.o $(LIB_OBJS) $(FLAVOR_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LDSAN) -o $@ $(filter %.o,$^) $(LDLIBS)

$(TESTBIN): $(TEST_OBJS) $(LIB_OBJS)
	$(CC) $(ALL_CFLAGS) $(LDSAN) -o $@ $^ $(LDLIBS)

# The suite runs against the programs built in the same variant.
test: $(PROGRAMS) $(TESTBIN)
	DS4CL_BINDIR=$(abspath $(BINDIR)) DS4CL_ROOT=$(CURDIR) DS4CL_VARIANT=$(VARIANT) DS4CL_MPI_BUILD=$(FLAVOR) DS4CL_ARCH=$(ARCH) \
	ASAN_OPTIONS=$${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
	LSAN_OPTIONS=$${LSAN_OPTIONS:-suppressions=$(CURDIR)/build-aux/lsan.supp:print_suppressions=0} \
	UBSAN_OPTIONS=$${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
	$(TESTBIN) $(if $(J),-j $(J)) $(T)

demo: $(PROGRAMS)
	sh build-aux/demo.sh $(BINDIR)

bench: $(PROGRAMS)
	sh build-aux/bench.sh $(BINDIR)

# Fuzz targets live in tests/fuzz/*.c, one libFuzzer entry point each. The
# library is compiled once for them (coverage and sanitizer instrumentation,
# without libFuzzer's main) into build/fuzz/obj/, and every target links
# those objects: a new target costs one compile and one link.
FUZZ_SECONDS ?= 60
FUZZ_SRCS    := $(sort $(wildcard tests/fuzz/*.c))
FUZZ_BINS    := $(patsubst tests/fuzz/%.c,build/fuzz/%,$(FUZZ_SRCS))
FUZZ_LIB_SRCS := $(filter-out $(wildcard ui/*.c) cli/cmd_interactive.c,$(LIB_SRCS))
FUZZ_OBJDIR  := build/fuzz/obj
FUZZ_CFLAGS  := -std=c11 -g -O1 -pthread -fsanitize=fuzzer-no-link,address,undefined \
                -fno-sanitize-recover=undefined $(PKG_CFLAGS)
FUZZ_LIB_OBJS := $(patsubst %.c,$(FUZZ_OBJDIR)/%.o,$(FUZZ_LIB_SRCS)) \
                 $(patsubst $(GENDIR)/%.c,$(FUZZ_OBJDIR)/gen/%.o,$(GEN_SRCS))

$(FUZZ_OBJDIR)/%.o: %.c
	@mkdir -p $(dir $@)
	clang $(CPPFLAGS) $(FUZZ_CFLAGS) -MMD -MP -c $< -o $@

$(FUZZ_OBJDIR)/gen/%.o: $(GENDIR)/%.c
	@mkdir -p $(dir $@)
	clang $(CPPFLAGS) $(FUZZ_CFLAGS) -MMD -MP -c $< -o $@

$(FUZZ_BINS): build/fuzz/%: $(FUZZ_OBJDIR)/tests/fuzz/%.o $(FUZZ_LIB_OBJS)
	clang -fsanitize=fuzzer,address,undefined -o $@ $^ $(LDLIBS)

fuzz: $(FUZZ_BINS)
	sh build-aux/fuzz.sh $(FUZZ_SECONDS) $(FUZZ_BINS)

install: $(PROGRAMS)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 0755 $(PROGRAMS) $(DESTDIR)$(PREFIX)/bin/
	install -m 0644 doc/ds4cl.1 $(DESTDIR)$(PREFIX)/share/man/man1/ds4cl.1

-include $(DEPFILES) $(patsubst %.o,%.d,$(FUZZ_LIB_OBJS)) \
         $(patsubst tests/fuzz/%.c,$(FUZZ_OBJDIR)/tests/fuzz/%.d,$(FUZZ_SRCS))
endif
